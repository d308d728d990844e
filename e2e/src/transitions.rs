//! When the election published or ended a view, by group and token.
//!
//! The runtime logs `elected`, `stepped down` and `lost leadership`
//! (`tracing`, INFO) synchronously right after turning its view on or off,
//! inside the election task itself: before a gated run can be admitted under
//! the new view, before the release goes to Redis. [`layer`] notes the time
//! of each, so a process can report the transition within microseconds of
//! when it happened, and not when it got around to printing it (the
//! broadcast event or the `on_elected` callback, which can come much later
//! on a busy host: after the release already reached Redis and the next
//! leader was elected).
//!
//! With `LOAD_CALL_DUMP=<file>` in the environment, the layer also appends
//! one line per follower `acquire_many` call to that file (the runtime's
//! DEBUG event `acquire_many call answered`), each in one write, so the
//! processes of a fleet can share the file: `<instance> <attempts> <close>
//! <handed_over_ns> <sent_ns> <answered_ns>`, times in
//! [`monotonic_now_ns`] (the first attempt's hand-over to the batcher, the
//! call's send and its answer).

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use nix::time::{clock_gettime, ClockId};
use tracing::span;
use tracing_subscriber::filter::{filter_fn, Filtered};
use tracing_subscriber::layer::{Context, Layer};
use tracing_subscriber::registry::LookupSpan;

/// Nanoseconds on `CLOCK_MONOTONIC`, the clock every process on the machine
/// shares. A process that cannot read it (never expected on Linux) exits
/// with code 3: its times would mean nothing.
pub fn monotonic_now_ns() -> u64 {
    match clock_gettime(ClockId::CLOCK_MONOTONIC) {
        // Both fields are non-negative for CLOCK_MONOTONIC.
        Ok(ts) => ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64,
        Err(e) => {
            eprintln!("clock_gettime(CLOCK_MONOTONIC): {e}");
            std::process::exit(3)
        }
    }
}

#[derive(Default)]
struct Moments {
    elected: HashMap<(String, u64), u64>,
    ended: HashMap<(String, u64), u64>,
}

static MOMENTS: Mutex<Option<Moments>> = Mutex::new(None);

/// When the view of `group`'s leadership with `token` began, in
/// [`monotonic_now_ns`] time; taken (a second call answers `None`).
pub fn take_elected(group: &str, token: u64) -> Option<u64> {
    take(group, token, true)
}

/// When the view of `group`'s leadership with `token` ended; taken.
pub fn take_ended(group: &str, token: u64) -> Option<u64> {
    take(group, token, false)
}

fn take(group: &str, token: u64, elected: bool) -> Option<u64> {
    let mut moments = MOMENTS.lock().unwrap_or_else(PoisonError::into_inner);
    let moments = moments.as_mut()?;
    let key = (group.to_owned(), token);
    if elected {
        moments.elected.remove(&key)
    } else {
        moments.ended.remove(&key)
    }
}

/// The layer that records the transitions, filtered to the runtime's
/// events and spans at INFO and above (the election's span names the
/// group). Add it to the process's subscriber.
pub fn layer<S>() -> Filtered<Transitions, impl tracing_subscriber::layer::Filter<S>, S>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    Transitions.with_filter(filter_fn(|m| {
        m.target().starts_with("leader_runtime")
            && (*m.level() <= tracing::Level::INFO
                || (m.target() == CALLS_TARGET && call_dump().is_some()))
    }))
}

/// See [`layer`].
pub struct Transitions;

/// Where the runtime logs each attempt call.
const CALLS_TARGET: &str = "leader_runtime::backend::batch";

/// The file of `LOAD_CALL_DUMP`, opened once (for appending).
fn call_dump() -> Option<&'static Mutex<std::fs::File>> {
    static DUMP: std::sync::OnceLock<Option<Mutex<std::fs::File>>> = std::sync::OnceLock::new();
    DUMP.get_or_init(|| {
        let path = std::env::var_os("LOAD_CALL_DUMP")?;
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path);
        file.ok().map(Mutex::new)
    })
    .as_ref()
}

/// The fields of an `acquire_many call answered` event.
#[derive(Default)]
struct CallFields {
    instance: Option<String>,
    counts: HashMap<&'static str, u64>,
}

impl tracing::field::Visit for CallFields {
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        self.counts.insert(field.name(), value);
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "instance" {
            self.instance = Some(value.to_owned());
        }
    }

    fn record_debug(&mut self, _: &tracing::field::Field, _: &dyn std::fmt::Debug) {}
}

/// Append one attempt call to the `LOAD_CALL_DUMP` file (see the module docs).
fn dump_call(event: &tracing::Event<'_>, answered_ns: u64) {
    let Some(dump) = call_dump() else { return };
    let mut fields = CallFields::default();
    event.record(&mut fields);
    let field = |name| fields.counts.get(name).copied();
    let (Some(instance), Some(attempts), Some(close), Some(queued_us), Some(took_us)) = (
        fields.instance.as_deref(),
        field("attempts"),
        field("close"),
        field("queued_us"),
        field("took_us"),
    ) else {
        return;
    };
    let sent_ns = answered_ns.saturating_sub(took_us * 1_000);
    let handed_over_ns = sent_ns.saturating_sub(queued_us * 1_000);
    let line = format!("{instance} {attempts} {close} {handed_over_ns} {sent_ns} {answered_ns}\n");
    use std::io::Write;
    let mut file = dump.lock().unwrap_or_else(PoisonError::into_inner);
    let _ = file.write_all(line.as_bytes());
}

#[derive(Default)]
struct Fields {
    message: Option<String>,
    group: Option<String>,
    token: Option<u64>,
}

impl tracing::field::Visit for Fields {
    fn record_u64(&mut self, field: &tracing::field::Field, value: u64) {
        if field.name() == "token" {
            self.token = Some(value);
        }
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "group" {
            self.group = Some(value.to_owned());
        }
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        match field.name() {
            "message" => self.message = Some(format!("{value:?}")),
            // `group = %name` on the election's span: Debug shows the name.
            "group" => self.group = Some(format!("{value:?}")),
            _ => {}
        }
    }
}

/// The group of an election's span, kept in the span's extensions.
struct SpanGroup(String);

impl<S> Layer<S> for Transitions
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let (Some(group), Some(span)) = (fields.group, ctx.span(id)) {
            span.extensions_mut().insert(SpanGroup(group));
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
        let at = monotonic_now_ns();
        if event.metadata().target() == CALLS_TARGET
            && *event.metadata().level() > tracing::Level::INFO
        {
            dump_call(event, at);
            return;
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        let (Some(message), Some(token)) = (fields.message, fields.token) else {
            return;
        };
        let elected = match message.as_str() {
            "elected" => true,
            "stepped down" | "lost leadership" => false,
            _ => return,
        };
        // The group is a field of the election's span, not of the event.
        let group = ctx.event_scope(event).and_then(|mut scope| {
            scope.find_map(|span| span.extensions().get::<SpanGroup>().map(|g| g.0.clone()))
        });
        let Some(group) = group else {
            return;
        };
        let mut moments = MOMENTS.lock().unwrap_or_else(PoisonError::into_inner);
        let moments = moments.get_or_insert_with(Moments::default);
        let map = if elected {
            &mut moments.elected
        } else {
            &mut moments.ended
        };
        map.insert((group, token), at);
    }
}
