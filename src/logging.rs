//! Log lines (issue 7 "Logs"): one structured line per event on stderr, in
//! logfmt (`level=info shard=0 msg="..."`), with the syslog priority prefix
//! journald reads (`<6>`) when stderr is the journal (systemd sets
//! `JOURNAL_STREAM`), and the optional access log (`--access-log true`):
//! one `kind=access` line per answered request.

use std::fmt::Write as _;
use std::sync::OnceLock;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Error,
    Warn,
    Info,
}

impl Level {
    fn name(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
        }
    }

    /// The syslog priority journald reads from a `<N>` prefix.
    fn priority(self) -> u8 {
        match self {
            Level::Error => 3,
            Level::Warn => 4,
            Level::Info => 6,
        }
    }
}

fn to_journal() -> bool {
    static JOURNAL: OnceLock<bool> = OnceLock::new();
    *JOURNAL.get_or_init(|| std::env::var_os("JOURNAL_STREAM").is_some())
}

/// `value` as a logfmt value: bare when it needs no quoting, else quoted
/// with `"`, `\` and control characters escaped (one event, one line).
pub fn value(value: &str) -> String {
    let bare = !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_graphic() && c != '"' && c != '=' && c != '\\');
    if bare {
        return value.to_string();
    }
    let mut out = String::from("\"");
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// One line: level, the shard if any, then `fields` (already `key=value`).
pub fn line(level: Level, shard: Option<usize>, fields: &str, journal: bool) -> String {
    let mut out = String::new();
    if journal {
        let _ = write!(out, "<{}>", level.priority());
    }
    let _ = write!(out, "level={}", level.name());
    if let Some(shard) = shard {
        let _ = write!(out, " shard={shard}");
    }
    out.push(' ');
    out.push_str(fields);
    out
}

/// Writes one event with message `msg`.
pub fn event(level: Level, shard: Option<usize>, msg: &str) {
    let fields = format!("msg={}", value(msg));
    emit(&line(level, shard, &fields, to_journal()));
}

/// Writes one line to stderr, ignoring failures: a log line lost to a
/// full disk or a closed pipe (stderr redirected to a file, a restarted
/// journal) must not panic the shard that logs it, as `eprintln!` would.
fn emit(line: &str) {
    use std::io::Write;
    // One write, so lines of other writers to the same pipe cannot land
    // between a line and its newline.
    let mut whole = String::with_capacity(line.len() + 1);
    whole.push_str(line);
    whole.push('\n');
    let _ = std::io::stderr().lock().write_all(whole.as_bytes());
}

/// Writes one access-log line.
pub fn access(shard: usize, method: &str, path: &str, status: u16, micros: u128) {
    let fields = format!(
        "kind=access method={method} path={} status={status} us={micros}",
        value(path)
    );
    emit(&line(Level::Info, Some(shard), &fields, to_journal()));
}

/// `info!(shard, "...", args)` or `info!("...", args)` (no shard); also
/// `warn!` and `error!`.
#[macro_export]
macro_rules! log_event {
    ($level:expr, shard = $shard:expr, $($arg:tt)*) => {
        $crate::logging::event($level, Some($shard), &format!($($arg)*))
    };
    ($level:expr, $($arg:tt)*) => {
        $crate::logging::event($level, None, &format!($($arg)*))
    };
}

#[macro_export]
macro_rules! info {
    ($($arg:tt)*) => { $crate::log_event!($crate::logging::Level::Info, $($arg)*) };
}

#[macro_export]
macro_rules! warn {
    ($($arg:tt)*) => { $crate::log_event!($crate::logging::Level::Warn, $($arg)*) };
}

#[macro_export]
macro_rules! error {
    ($($arg:tt)*) => { $crate::log_event!($crate::logging::Level::Error, $($arg)*) };
}

/// At most one line per `every` for an event that can repeat on every
/// request (a write refused by a full disk): the rest are counted and the
/// next line that passes says how many were left out.
pub struct Throttle {
    every: std::time::Duration,
    last: Option<std::time::Instant>,
    suppressed: u64,
}

impl Throttle {
    pub fn new(every: std::time::Duration) -> Throttle {
        Throttle {
            every,
            last: None,
            suppressed: 0,
        }
    }

    /// `Some(lines left out since the last one)` when a line may go out
    /// at `now`, else `None` (and it is counted).
    pub fn allow(&mut self, now: std::time::Instant) -> Option<u64> {
        match self.last {
            Some(last) if now.duration_since(last) < self.every => {
                self.suppressed += 1;
                None
            }
            _ => {
                self.last = Some(now);
                Some(std::mem::take(&mut self.suppressed))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_logfmt_with_the_journal_priority() {
        let fields = format!("msg={}", value("recovered 3 records"));
        assert_eq!(
            line(Level::Info, Some(1), &fields, false),
            "level=info shard=1 msg=\"recovered 3 records\""
        );
        assert_eq!(
            line(Level::Error, None, "msg=x", true),
            "<3>level=error msg=x"
        );
    }

    #[test]
    fn values_stay_on_one_line() {
        assert_eq!(value("plain"), "plain");
        assert_eq!(value(""), "\"\"");
        assert_eq!(value("a \"b\"\\\nc\u{1}"), "\"a \\\"b\\\"\\\\\\nc\\u0001\"");
    }

    #[test]
    fn a_throttle_lets_one_line_a_period_through_and_counts_the_rest() {
        use std::time::{Duration, Instant};
        let mut throttle = Throttle::new(Duration::from_secs(1));
        let t0 = Instant::now();
        assert_eq!(throttle.allow(t0), Some(0));
        assert_eq!(throttle.allow(t0 + Duration::from_millis(10)), None);
        assert_eq!(throttle.allow(t0 + Duration::from_millis(900)), None);
        assert_eq!(throttle.allow(t0 + Duration::from_millis(1000)), Some(2));
        assert_eq!(throttle.allow(t0 + Duration::from_millis(2500)), Some(0));
    }
}
