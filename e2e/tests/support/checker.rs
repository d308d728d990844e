//! The safety and liveness checker over the lines of `leader-instance`
//! processes (see `e2e/src/bin/leader-instance.rs` for the line format).
//!
//! A *leadership window* is what one process believed about one token:
//! it starts at its `elected` line and ends at the last `valid_until` it
//! reported for that token (`elected` or `renewed`), not when it got around
//! to logging — or earlier, at its `lost` line, if that came first (a
//! superseded or shut-down leader ends its view before its `valid_until`).
//!
//! The instance stamps `elected` and `lost` with the moment the runtime
//! logged the transition, from inside the election task, microseconds after
//! the view turned on or off and before anything that follows it there (a
//! gated run admitted, a release sent to Redis). Both are upper bounds of
//! the real instants, tight enough that a release, a round trip to Redis
//! and the next acquisition always lie between one window's end and the
//! next one's start; an overlap longer than a few microseconds is real.
//! (Stamping `lost` when the process printed it is not: the release can
//! reach Redis, and the next leader be elected, before that print.)
//!
//! Safety, per group (a fleet elects one group, or with `GROUPS` several,
//! whose lines carry their group: [`History::per_group`]):
//! - no two windows overlap, across all processes;
//! - every gated run starts inside the window of its own process and token
//!   (the gate admits it between the `called` and `start` of its `run`
//!   line: it is outside for certain if its body started before the window
//!   began, or it was called only after the window had ended);
//! - tokens strictly grow from one leadership to the next.
//!
//! Liveness: [`History::failover_after`] is how long after an instant the
//! next leadership started; tests compare it to the fault's bound.

use std::collections::{BTreeMap, HashMap};
use std::fmt;

/// The stdout lines of one instance process, with a name unique in the run.
#[derive(Debug, Clone)]
pub struct ProcessLog {
    pub name: String,
    pub lines: Vec<String>,
}

impl ProcessLog {
    pub fn new(name: impl Into<String>, lines: Vec<String>) -> Self {
        Self {
            name: name.into(),
            lines,
        }
    }
}

/// One parsed line of an instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    Ready {
        at: u64,
    },
    Elected {
        token: u64,
        valid_until: u64,
        at: u64,
    },
    Renewed {
        token: u64,
        valid_until: u64,
        at: u64,
    },
    Lost {
        token: u64,
        reason: String,
        at: u64,
    },
    Begin {
        token: u64,
        start: u64,
    },
    Write {
        token: u64,
        believed: bool,
        result: String,
        start: u64,
        end: u64,
    },
    Run {
        token: u64,
        called: u64,
        start: u64,
        end: u64,
    },
    BackendError {
        at: u64,
        message: String,
    },
    Stats {
        elected: u64,
        acquire_attempts: u64,
        renewals: u64,
        renew_failures: u64,
        at: u64,
    },
    Exit {
        at: u64,
    },
    /// `n` events were lost: the log cannot be trusted.
    Lagged {
        n: u64,
        at: u64,
    },
    /// The `elected` line of `token` carries its print time, not the
    /// transition's: its window may start too late.
    Unstamped {
        token: u64,
        at: u64,
    },
}

impl Line {
    /// About when the line was printed (for lines in time order).
    pub fn time(&self) -> u64 {
        match self {
            Line::Ready { at }
            | Line::Elected { at, .. }
            | Line::Renewed { at, .. }
            | Line::Lost { at, .. }
            | Line::BackendError { at, .. }
            | Line::Stats { at, .. }
            | Line::Lagged { at, .. }
            | Line::Unstamped { at, .. }
            | Line::Exit { at } => *at,
            Line::Begin { start, .. } => *start,
            Line::Write { end, .. } | Line::Run { end, .. } => *end,
        }
    }
}

fn num(word: Option<&str>) -> Option<u64> {
    word?.parse().ok()
}

/// The group of a line of an instance run with `GROUPS` (`@<group> <line>`)
/// and the line without it; `None` for a line of no group.
pub fn split_group(line: &str) -> (Option<&str>, &str) {
    match line.strip_prefix('@').and_then(|rest| rest.split_once(' ')) {
        Some((group, rest)) => (Some(group), rest),
        None => (None, line),
    }
}

/// Parse one line, of whichever group; `None` for anything that is not an
/// event line.
pub fn parse_line(line: &str) -> Option<Line> {
    let mut w = split_group(line).1.split(' ');
    let kind = w.next()?;
    let parsed = match kind {
        "ready" => {
            let (_id, _pid) = (w.next()?, w.next()?);
            Line::Ready { at: num(w.next())? }
        }
        "elected" => Line::Elected {
            token: num(w.next())?,
            valid_until: num(w.next())?,
            at: num(w.next())?,
        },
        "renewed" => Line::Renewed {
            token: num(w.next())?,
            valid_until: num(w.next())?,
            at: num(w.next())?,
        },
        "lost" => Line::Lost {
            token: num(w.next())?,
            reason: w.next()?.to_owned(),
            at: num(w.next())?,
        },
        "begin" => Line::Begin {
            token: num(w.next())?,
            start: num(w.next())?,
        },
        "write" => Line::Write {
            token: num(w.next())?,
            believed: num(w.next())? == 1,
            result: w.next()?.to_owned(),
            start: num(w.next())?,
            end: num(w.next())?,
        },
        "run" => Line::Run {
            token: num(w.next())?,
            called: num(w.next())?,
            start: num(w.next())?,
            end: num(w.next())?,
        },
        "backend_error" => Line::BackendError {
            at: num(w.next())?,
            message: w.collect::<Vec<_>>().join(" "),
        },
        "stats" => Line::Stats {
            elected: num(w.next())?,
            acquire_attempts: num(w.next())?,
            renewals: num(w.next())?,
            renew_failures: num(w.next())?,
            at: num(w.next())?,
        },
        "exit" => Line::Exit { at: num(w.next())? },
        "lagged" => Line::Lagged {
            n: num(w.next())?,
            at: num(w.next())?,
        },
        "unstamped" => Line::Unstamped {
            token: num(w.next())?,
            at: num(w.next())?,
        },
        _ => return None,
    };
    Some(parsed)
}

/// What one process believed about one token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Window {
    pub process: String,
    pub token: u64,
    pub start: u64,
    pub end: u64,
    /// Reason and time of the `lost` line, if the process logged one.
    pub lost: Option<(String, u64)>,
}

/// A finished gated run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    pub process: String,
    pub token: u64,
    /// When the gated function was called (the gate admitted it after this).
    pub called: u64,
    /// The body's first reading of the clock (the gate admitted it before this).
    pub start: u64,
    pub end: u64,
}

/// A fenced write as the instance reported it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Write {
    pub process: String,
    pub token: u64,
    /// Whether the instance's view was valid when it started the write.
    pub believed: bool,
    pub result: String,
    pub start: u64,
    pub end: u64,
}

/// A broken safety property.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// Two windows of the group overlap by `by_ns`.
    Overlap {
        first: Window,
        second: Window,
        by_ns: u64,
    },
    /// A gated run started outside the window of its own token.
    RunOutsideWindow { run: Run, window: Option<Window> },
    /// A later leadership got a token not greater than the one before.
    TokenNotGrowing { earlier: Window, later: Window },
    /// The log itself is inconsistent (e.g. `renewed` for a token never elected).
    Malformed {
        process: String,
        line: String,
        why: &'static str,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Overlap {
                first,
                second,
                by_ns,
            } => write!(
                f,
                "overlap of {:.3} ms: {first:?} and {second:?}",
                *by_ns as f64 / 1e6
            ),
            Violation::RunOutsideWindow { run, window } => {
                write!(f, "run outside its window: {run:?}, window {window:?}")
            }
            Violation::TokenNotGrowing { earlier, later } => {
                write!(f, "token did not grow: {earlier:?} then {later:?}")
            }
            Violation::Malformed { process, line, why } => {
                write!(f, "malformed log of {process}: {why}: {line:?}")
            }
        }
    }
}

/// Everything a fleet's processes reported, as windows, runs and writes.
#[derive(Debug, Clone, Default)]
pub struct History {
    /// Sorted by start.
    pub windows: Vec<Window>,
    pub runs: Vec<Run>,
    pub writes: Vec<Write>,
    /// Inconsistencies found while building (reported by [`check`](Self::check)).
    pub malformed: Vec<Violation>,
}

impl History {
    pub fn from_logs(logs: &[ProcessLog]) -> History {
        let mut history = History::default();
        for log in logs {
            let mut open: Option<Window> = None;
            for raw in &log.lines {
                let Some(line) = parse_line(raw) else {
                    continue;
                };
                let malformed = |why| Violation::Malformed {
                    process: log.name.clone(),
                    line: raw.clone(),
                    why,
                };
                match line {
                    Line::Elected {
                        token,
                        valid_until,
                        at,
                    } => {
                        if let Some(w) = open.take() {
                            history
                                .malformed
                                .push(malformed("elected while a window is open"));
                            history.windows.push(w);
                        }
                        open = Some(Window {
                            process: log.name.clone(),
                            token,
                            start: at,
                            end: valid_until,
                            lost: None,
                        });
                    }
                    Line::Renewed {
                        token, valid_until, ..
                    } => match open.as_mut() {
                        Some(w) if w.token == token => w.end = w.end.max(valid_until),
                        _ => history
                            .malformed
                            .push(malformed("renewed without its window")),
                    },
                    Line::Lost { token, reason, at } => match open.take() {
                        Some(mut w) if w.token == token => {
                            w.end = w.end.min(at);
                            w.lost = Some((reason, at));
                            history.windows.push(w);
                        }
                        other => {
                            open = other;
                            history.malformed.push(malformed("lost without its window"));
                        }
                    },
                    Line::Run {
                        token,
                        called,
                        start,
                        end,
                    } => history.runs.push(Run {
                        process: log.name.clone(),
                        token,
                        called,
                        start,
                        end,
                    }),
                    Line::Write {
                        token,
                        believed,
                        result,
                        start,
                        end,
                    } => history.writes.push(Write {
                        process: log.name.clone(),
                        token,
                        believed,
                        result,
                        start,
                        end,
                    }),
                    Line::Lagged { .. } => history
                        .malformed
                        .push(malformed("events were lost: the log is incomplete")),
                    Line::Unstamped { .. } => history
                        .malformed
                        .push(malformed("an elected line without its transition time")),
                    _ => {}
                }
            }
            history.windows.extend(open);
        }
        history.windows.sort_by_key(|w| (w.start, w.token));
        history
    }

    /// One history per group, for instances run with `GROUPS`: each line
    /// goes to the history of its group; lines of no group (`ready`,
    /// `exit`) to none, except `lagged` (the process lost events of any of
    /// its groups), which goes to each group of the fleet.
    pub fn per_group(logs: &[ProcessLog]) -> BTreeMap<String, History> {
        // Every group of the fleet first: a process that lost events may
        // have printed no line of some group.
        let mut split: BTreeMap<&str, Vec<ProcessLog>> = logs
            .iter()
            .flat_map(|log| log.lines.iter().filter_map(|raw| split_group(raw).0))
            .map(|group| (group, Vec::new()))
            .collect();
        for log in logs {
            let mut by_group: BTreeMap<&str, Vec<String>> = BTreeMap::new();
            let mut lagged = Vec::new();
            for raw in &log.lines {
                match split_group(raw) {
                    (Some(group), line) => by_group.entry(group).or_default().push(line.to_owned()),
                    (None, line) if matches!(parse_line(line), Some(Line::Lagged { .. })) => {
                        lagged.push(line.to_owned());
                    }
                    _ => {}
                }
            }
            for (group, logs) in split.iter_mut() {
                let mut lines = by_group.remove(group).unwrap_or_default();
                lines.extend(lagged.iter().cloned());
                if !lines.is_empty() {
                    logs.push(ProcessLog::new(log.name.clone(), lines));
                }
            }
        }
        split
            .into_iter()
            .map(|(group, logs)| (group.to_owned(), History::from_logs(&logs)))
            .collect()
    }

    /// Every safety violation: overlaps, runs outside their window, tokens
    /// that do not grow, and inconsistencies of the log itself.
    pub fn check(&self) -> Vec<Violation> {
        let mut found = self.malformed.clone();
        // Overlaps: compare each window with the one reaching furthest so far.
        let mut furthest: Option<&Window> = None;
        for w in &self.windows {
            if let Some(f) = furthest {
                if w.start < f.end {
                    found.push(Violation::Overlap {
                        first: f.clone(),
                        second: w.clone(),
                        by_ns: f.end.min(w.end) - w.start,
                    });
                }
            }
            if furthest.is_none_or(|f| w.end > f.end) {
                furthest = Some(w);
            }
        }
        for pair in self.windows.windows(2) {
            if pair[1].token <= pair[0].token {
                found.push(Violation::TokenNotGrowing {
                    earlier: pair[0].clone(),
                    later: pair[1].clone(),
                });
            }
        }
        let by_key: HashMap<(&str, u64), &Window> = self
            .windows
            .iter()
            .map(|w| ((w.process.as_str(), w.token), w))
            .collect();
        for run in &self.runs {
            let window = by_key.get(&(run.process.as_str(), run.token));
            // The gate admitted the run between `called` and `start` (its
            // body's first reading of the clock): outside the window for
            // certain if it started before the window began, or was called
            // only after the window had ended.
            let inside = window.is_some_and(|w| w.start <= run.start && run.called < w.end);
            if !inside {
                found.push(Violation::RunOutsideWindow {
                    run: run.clone(),
                    window: window.map(|w| (*w).clone()),
                });
            }
        }
        found
    }

    /// Panics with every violation (and `context`) if any.
    pub fn assert_safe(&self, context: &dyn Fn() -> String) {
        let violations = self.check();
        if !violations.is_empty() {
            let list: Vec<String> = violations.iter().map(ToString::to_string).collect();
            panic!(
                "{} safety violation(s):\n{}\n{}",
                violations.len(),
                list.join("\n"),
                context()
            );
        }
    }

    /// How many leaderships ended in a hand-over (`stepped_down`: a
    /// step-down, or a hand-over for the balance).
    pub fn hand_overs(&self) -> usize {
        let handed = |w: &&Window| {
            w.lost
                .as_ref()
                .is_some_and(|(why, _)| why == "stepped_down")
        };
        self.windows.iter().filter(handed).count()
    }

    /// The first leadership that started at or after `t_ns`.
    pub fn first_window_after(&self, t_ns: u64) -> Option<&Window> {
        self.windows.iter().find(|w| w.start >= t_ns)
    }

    /// How long after `t_ns` the next leadership started.
    pub fn failover_after(&self, t_ns: u64) -> Option<u64> {
        self.first_window_after(t_ns).map(|w| w.start - t_ns)
    }

    /// The windows of one process.
    pub fn windows_of<'a>(&'a self, process: &'a str) -> impl Iterator<Item = &'a Window> + 'a {
        self.windows.iter().filter(move |w| w.process == process)
    }
}
