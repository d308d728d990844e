//! A job's schedule: read with each field checked (an error names the
//! field and its range, as `hour 25 out of range 0-23`), refused when it
//! can never fire (`0 0 0 30 2 *`), and its next fire times in the job's
//! time zone.
//!
//! croner parses the expression; the field check before it exists because
//! croner's errors name a bit position, not the field a user got wrong.

use chrono::{DateTime, TimeZone, Utc};
use chrono_tz::Tz;
use croner::parser::{CronParser, Seconds};
use croner::Cron;

use crate::{Error, Result};

/// The six fields, seconds first: name, smallest and largest value, and the
/// names a field also accepts (matched without regard to case).
const FIELDS: [(&str, u32, u32, &[&str]); 6] = [
    ("second", 0, 59, &[]),
    ("minute", 0, 59, &[]),
    ("hour", 0, 23, &[]),
    ("day of month", 1, 31, &[]),
    (
        "month",
        1,
        12,
        &[
            "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
        ],
    ),
    // 0 and 7 are both Sunday.
    (
        "day of week",
        0,
        7,
        &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
    ),
];

/// What every schedule error ends with: the expected shape.
const SHAPE: &str = "six fields, seconds first: second minute hour day-of-month month \
                     day-of-week, e.g. \"0 */5 * * * *\"";

fn schedule_err(schedule: &str, what: &str) -> Error {
    Error::Config {
        field: "schedule",
        rule: format!("{what} in \"{schedule}\" ({SHAPE})"),
    }
}

/// Parses `schedule`, naming the field that is wrong, and refuses one that
/// never fires.
pub(super) fn parse(schedule: &str) -> Result<Cron> {
    let fields: Vec<&str> = schedule.split_whitespace().collect();
    // `@daily` and the like, and a seventh field (the year), are croner's.
    if !schedule.trim_start().starts_with('@') {
        if !(6..=7).contains(&fields.len()) {
            return Err(schedule_err(
                schedule,
                &format!("{} fields where six are needed", fields.len()),
            ));
        }
        for (text, field) in fields.iter().zip(FIELDS) {
            check_field(text, field).map_err(|what| schedule_err(schedule, &what))?;
        }
    }
    let cron = CronParser::builder()
        .seconds(Seconds::Required)
        .dom_and_dow(true)
        .build()
        .parse(schedule)
        .map_err(|e| schedule_err(schedule, &e.to_string()))?;
    // The search runs to croner's last year: a schedule with no time in
    // thousands of years has no day at all (30 February, 31 April).
    if cron.find_next_occurrence(&Utc::now(), false).is_err() {
        return Err(schedule_err(
            schedule,
            "can never fire: no date has this day and month",
        ));
    }
    Ok(cron)
}

/// One field's values and steps within its range; forms with `L`, `W` or
/// `#` (last day, nearest weekday, nth weekday) are left to croner.
fn check_field(text: &str, (name, lo, hi, names): (&str, u32, u32, &[&str])) -> Result<(), String> {
    for part in text.split(',') {
        let is_name = |p: &str| names.iter().any(|n| p.eq_ignore_ascii_case(n));
        let special = part.contains('#')
            || part
                .split(['-', '/'])
                .any(|p| !is_name(p) && p.contains(['L', 'W', 'l', 'w']));
        if special {
            continue;
        }
        let (range, step) = match part.split_once('/') {
            Some((range, step)) => (range, Some(step)),
            None => (part, None),
        };
        if let Some(step) = step {
            match step.parse::<u32>() {
                Ok(s) if s >= 1 => {}
                _ => {
                    return Err(format!(
                        "{name} step `{step}` is not a whole number of 1 or more"
                    ))
                }
            }
        }
        if range == "*" || range == "?" {
            continue;
        }
        let (from, to) = range.split_once('-').unwrap_or((range, range));
        for value in [from, to] {
            let n = match value.parse::<u32>() {
                Ok(n) => n,
                Err(_) => match names.iter().position(|n| value.eq_ignore_ascii_case(n)) {
                    Some(i) => lo + u32::try_from(i).unwrap_or(0),
                    None => {
                        return Err(format!(
                            "{name} `{value}` is not a number{}",
                            if names.is_empty() {
                                String::new()
                            } else {
                                format!(" or a name ({})", names.join(", "))
                            }
                        ))
                    }
                },
            };
            if !(lo..=hi).contains(&n) {
                return Err(format!("{name} {n} out of range {lo}-{hi}"));
            }
        }
    }
    Ok(())
}

/// The first `n` fire times after `after`, in `tz`, with the job's DST
/// rule (see [`super::instant`]): a local time in a gap fires at the first
/// instant after it, a repeated one at its first occurrence, and local
/// times that land on one instant are one fire time.
pub(super) fn next_fire_times(
    cron: &Cron,
    tz: &Tz,
    after: DateTime<Utc>,
    n: usize,
) -> Vec<DateTime<Tz>> {
    let mut out = Vec::with_capacity(n.min(1024));
    let mut last = after;
    // Where the search of local times goes on from.
    let mut local = after.with_timezone(tz).naive_local();
    while out.len() < n {
        let Ok(next) = cron.find_next_occurrence(&local.and_utc(), false) else {
            break;
        };
        local = next.naive_utc();
        let Some(at) = super::instant(tz, local) else {
            break;
        };
        // Local times of a repeated hour's second pass map to the first
        // pass (already past), and a gap's times to one instant.
        if at > last {
            out.push(tz.from_utc_datetime(&at.naive_utc()));
            last = at;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(schedule: &str) -> String {
        match parse(schedule) {
            Err(Error::Config { field, rule }) => {
                assert_eq!(field, "schedule");
                rule
            }
            other => panic!("{schedule}: {other:?}"),
        }
    }

    #[test]
    fn a_bad_field_is_named_with_its_range() {
        for (schedule, says) in [
            ("0 0 25 * * *", "hour 25 out of range 0-23"),
            ("60 * * * * *", "second 60 out of range 0-59"),
            ("0 61 * * * *", "minute 61 out of range 0-59"),
            ("0 0 0 0 * *", "day of month 0 out of range 1-31"),
            ("0 0 0 1 13 *", "month 13 out of range 1-12"),
            ("0 0 0 * * 8", "day of week 8 out of range 0-7"),
            ("0 0 1-24 * * *", "hour 24 out of range 0-23"),
            ("0 0,75 * * * *", "minute 75 out of range 0-59"),
            (
                "0 */0 * * * *",
                "minute step `0` is not a whole number of 1 or more",
            ),
            ("0 0 x * * *", "hour `x` is not a number"),
            (
                "0 0 0 * FOO *",
                "month `FOO` is not a number or a name (JAN,",
            ),
            ("0 0 * * *", "5 fields where six are needed"),
        ] {
            let rule = rule(schedule);
            assert!(rule.contains(says), "{schedule}: {rule}");
            assert!(rule.contains(schedule), "{schedule}: {rule}");
        }
    }

    #[test]
    fn a_schedule_that_never_fires_is_refused() {
        for schedule in ["0 0 0 30 2 *", "0 0 0 31 4 *", "0 0 12 31 FEB *"] {
            assert!(rule(schedule).contains("can never fire"), "{schedule}");
        }
        // Rare but real: 29 February.
        assert!(parse("0 0 0 29 2 *").is_ok());
    }

    #[test]
    fn good_schedules_pass() {
        for schedule in [
            "0 */5 * * * *",
            "0 30 2 * * MON-FRI",
            "0 0 0 L * *",
            "0 0 9 * * 1#2",
            "*/10 * * ? * *",
            "0 0 0 1 jan,Jul *",
            "0 0 0 * * 7",
            "@daily",
        ] {
            assert!(parse(schedule).is_ok(), "{schedule}: {:?}", parse(schedule));
        }
    }

    fn utc(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    /// Berlin springs forward on 2026-03-29 at 02:00 (to 03:00) and falls
    /// back on 2026-10-25 at 03:00 (to 02:00).
    #[test]
    fn fire_times_follow_the_zone_through_dst() {
        let berlin = chrono_tz::Europe::Berlin;
        let cron = parse("0 30 2 * * *").unwrap();
        let times: Vec<String> = next_fire_times(&cron, &berlin, utc("2026-03-27T12:00:00Z"), 3)
            .iter()
            .map(|t| t.to_rfc3339())
            .collect();
        // 02:30 does not exist on the 29th: it fires at 03:00, the first
        // instant after the gap.
        assert_eq!(
            times,
            [
                "2026-03-28T02:30:00+01:00",
                "2026-03-29T03:00:00+02:00",
                "2026-03-30T02:30:00+02:00"
            ]
        );
        // 02:30 happens twice on 25 October: once, at the first.
        let times: Vec<String> = next_fire_times(&cron, &berlin, utc("2026-10-24T12:00:00Z"), 3)
            .iter()
            .map(|t| t.to_rfc3339())
            .collect();
        assert_eq!(
            times,
            [
                "2026-10-25T02:30:00+02:00",
                "2026-10-26T02:30:00+01:00",
                "2026-10-27T02:30:00+01:00"
            ]
        );
        // Every 15 minutes across the repeated hour: each instant once, in
        // order, the second pass included only where it is new time.
        let cron = parse("0 */30 * * * *").unwrap();
        let times: Vec<DateTime<Utc>> =
            next_fire_times(&cron, &berlin, utc("2026-10-24T23:45:00Z"), 6)
                .iter()
                .map(|t| t.with_timezone(&Utc))
                .collect();
        assert!(times.windows(2).all(|w| w[0] < w[1]), "{times:?}");
    }

    /// Out-of-range asks are refused, not a panic or an endless list.
    #[test]
    fn next_fire_times_refuses_what_it_cannot_answer() {
        let builder =
            crate::cron::JobBuilder::new("* * * * * *", "g").time_zone(chrono_tz::Asia::Tokyo);
        let far = DateTime::<Utc>::MAX_UTC;
        assert!(matches!(
            builder.next_fire_times_after(far, 1),
            Err(Error::Config { field: "after", .. })
        ));
        assert!(matches!(
            builder.next_fire_times(usize::MAX),
            Err(Error::Config { field: "n", .. })
        ));
        assert_eq!(builder.next_fire_times(10_000).unwrap().len(), 10_000);
    }
}
