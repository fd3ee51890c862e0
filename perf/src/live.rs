//! What the live-read scenarios (`fanout`, `longpoll`) share: the stream
//! they read (created `text/plain` on either surface), the event payload
//! (`seq,send_unix_nanos\n`, one line per append), the paced writer on its
//! own thread, per-reader sequence accounting (lost, duplicated), and the
//! wait for the readers to catch up with the writer.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hyper::Method;
use serde::Serialize;

use crate::Api;
use crate::client::{Conn, Error, Target};
use crate::stats::{self, Latency};
use crate::writer::{self, Pace, Written};

/// Sequence numbers past this are treated as garbage, not tracked.
const MAX_SEQ: u64 = 1 << 28;

/// Creates the bucket (for `--api bucket`, 201 or 409; by default named
/// like the stream) and a `text/plain` stream; returns the stream's path.
pub async fn create_stream(
    target: &Target,
    api: Api,
    bucket: Option<&str>,
    name: &str,
) -> Result<String, Error> {
    let mut conn = Conn::new(target.clone());
    let path = match api {
        Api::V1 => format!("/v1/stream/{name}"),
        Api::Bucket => {
            let bucket = bucket.unwrap_or(name);
            let r = conn
                .send(Method::PUT, &format!("/{bucket}"), None, Bytes::new())
                .await?;
            if !r.status.is_success() && r.status.as_u16() != 409 {
                return Err(format!("PUT /{bucket}: {}", r.status).into());
            }
            format!("/{bucket}/{name}")
        }
    };
    let r = conn
        .send(Method::PUT, &path, Some("text/plain"), Bytes::new())
        .await?;
    if !r.status.is_success() {
        return Err(format!("creating {path}: {}", r.status).into());
    }
    Ok(path)
}

/// A name unique to this run: `{millis}-{pid}`.
pub fn run_id() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    format!("{}-{}", now.as_millis(), std::process::id())
}

pub fn unix_secs() -> u64 {
    unix_nanos() / 1_000_000_000
}

pub fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// The payload of event `seq` sent at `nanos`.
pub fn event_line(seq: u64, nanos: u64) -> String {
    format!("{seq},{nanos}\n")
}

/// Parses `seq,nanos` (without the newline).
pub fn parse_line(line: &[u8]) -> Option<(u64, u64)> {
    let line = line.strip_suffix(b"\n").unwrap_or(line);
    let at = memchr::memchr(b',', line)?;
    let num = |s: &[u8]| std::str::from_utf8(s).ok()?.parse::<u64>().ok();
    Some((num(&line[..at])?, num(&line[at + 1..])?))
}

/// Latency in µs (at least 1) of an event sent at `sent_ns`, seen at `now_ns`.
pub fn latency_us(sent_ns: u64, now_ns: u64) -> u64 {
    (now_ns.saturating_sub(sent_ns) / 1000).max(1)
}

/// Which sequence numbers one reader has seen.
#[derive(Default, Debug)]
pub struct Tracker {
    seen: Vec<u64>,
    /// Events seen again.
    pub duplicated: u64,
    /// Lines that did not parse or had an absurd sequence number.
    pub malformed: u64,
    /// Every event seen, duplicates included.
    pub received: u64,
}

/// One reader's (or the sum of all readers') accounting against `sent`.
#[derive(Default, Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub received: u64,
    pub lost: u64,
    pub duplicated: u64,
    /// Malformed lines, and sequence numbers never sent.
    pub invalid: u64,
}

impl Counts {
    pub fn add(&mut self, o: Counts) {
        self.received += o.received;
        self.lost += o.lost;
        self.duplicated += o.duplicated;
        self.invalid += o.invalid;
    }
}

impl Tracker {
    /// Records one event; false if it is a duplicate or out of range.
    pub fn record(&mut self, seq: u64) -> bool {
        if seq >= MAX_SEQ {
            self.malformed += 1;
            return false;
        }
        self.received += 1;
        let (word, bit) = ((seq / 64) as usize, 1u64 << (seq % 64));
        if word >= self.seen.len() {
            self.seen.resize(word + 1, 0);
        }
        if self.seen[word] & bit != 0 {
            self.duplicated += 1;
            return false;
        }
        self.seen[word] |= bit;
        true
    }

    /// This reader's accounting against the writer's acknowledged events:
    /// each one not seen is lost; each distinct one seen but never
    /// acknowledged is invalid (as are malformed lines).
    pub fn counts(&self, acked: &Tracker) -> Counts {
        let word = |v: &[u64], i: usize| v.get(i).copied().unwrap_or(0);
        let words = self.seen.len().max(acked.seen.len());
        let (mut lost, mut extra) = (0u64, 0u64);
        for i in 0..words {
            let (seen, sent) = (word(&self.seen, i), word(&acked.seen, i));
            lost += u64::from((sent & !seen).count_ones());
            extra += u64::from((seen & !sent).count_ones());
        }
        Counts {
            received: self.received,
            lost,
            duplicated: self.duplicated,
            invalid: self.malformed + extra,
        }
    }
}

/// The writer's phase of a live scenario, as seen from the client.
pub struct Measured {
    pub written: Written,
    /// Acknowledged appends × readers.
    pub expected: u64,
    pub drained: bool,
    pub elapsed_s: f64,
    pub client_cpu_pct: f64,
    pub server_cpu_pct: Option<f64>,
}

/// Runs the paced writer, then waits up to `drain` for `readers` to have
/// `delivered` every acknowledged event; CPU is measured over both.
pub async fn write_and_drain(
    target: Target,
    path: String,
    (pace, drain): (Pace, Duration),
    readers: usize,
    delivered: &AtomicU64,
    server_pid: Option<u32>,
) -> Result<Measured, Error> {
    let cpu = CpuClock::start(server_pid);
    let written = writer::write_paced(target, path, pace).await?;
    let expected = written.sent * readers as u64;
    let drained = self::drain(delivered, expected, drain).await;
    let (elapsed_s, client_cpu_pct, server_cpu_pct) = cpu.stop();
    Ok(Measured {
        written,
        expected,
        drained,
        elapsed_s,
        client_cpu_pct,
        server_cpu_pct,
    })
}

/// Waits until `delivered` reaches `expected` or `timeout` passes; true if
/// it did.
pub async fn drain(delivered: &AtomicU64, expected: u64, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if delivered.load(Ordering::Relaxed) >= expected {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until `ready` reaches `n`, printing progress every second; false
/// if `timeout` passes first.
pub async fn wait_ready(ready: &AtomicUsize, n: usize, what: &str, timeout: Duration) -> bool {
    let start = Instant::now();
    let mut last_print = start;
    loop {
        let now_ready = ready.load(Ordering::Relaxed);
        if now_ready >= n {
            return true;
        }
        if start.elapsed() >= timeout {
            return false;
        }
        if last_print.elapsed() >= Duration::from_secs(1) {
            eprintln!("rill-bench: {now_ready}/{n} {what} connected");
            last_print = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// CPU use over a measurement: this process's, and the server's when its
/// pid is known, both as % of one core.
pub struct CpuClock {
    start: Instant,
    client0: f64,
    server: Option<(u32, f64)>,
}

impl CpuClock {
    pub fn start(server_pid: Option<u32>) -> CpuClock {
        CpuClock {
            start: Instant::now(),
            client0: stats::self_cpu_seconds(),
            server: server_pid.and_then(|p| Some((p, stats::pid_cpu_seconds(p)?))),
        }
    }

    /// (elapsed seconds, client CPU %, server CPU %).
    pub fn stop(&self) -> (f64, f64, Option<f64>) {
        let elapsed = self.start.elapsed().as_secs_f64();
        let client = (stats::self_cpu_seconds() - self.client0) / elapsed * 100.0;
        let server = self
            .server
            .and_then(|(pid, s0)| Some((stats::pid_cpu_seconds(pid)? - s0) / elapsed * 100.0));
        (elapsed, client, server)
    }
}

/// Counts an error by kind.
pub fn count(kinds: &mut BTreeMap<String, u64>, kind: String) {
    *kinds.entry(kind).or_insert(0) += 1;
}

/// `p50/p90/p99/p999/max` cells for the tables.
pub fn latency_cells(l: &Latency) -> String {
    format!(
        "{:>8} {:>8} {:>8} {:>8} {:>9}",
        l.p50, l.p90, l.p99, l.p999, l.max
    )
}

pub fn cpu_cell(pct: Option<f64>) -> String {
    pct.map_or_else(|| "-".into(), |c| format!("{c:.0}%"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_lines_round_trip() {
        let line = event_line(42, 1_764_000_000_123_456_789);
        assert_eq!(
            parse_line(line.as_bytes()),
            Some((42, 1_764_000_000_123_456_789))
        );
        assert_eq!(parse_line(b"7,9"), Some((7, 9)));
        for bad in [&b""[..], b"7", b"7,", b",9", b"x,9", b"7,9,1", b"-1,9"] {
            assert_eq!(parse_line(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn latency_is_at_least_one_microsecond() {
        assert_eq!(latency_us(1_000, 3_500), 2);
        assert_eq!(latency_us(5_000, 1_000), 1);
    }

    fn acked(seqs: impl IntoIterator<Item = u64>) -> Tracker {
        let mut t = Tracker::default();
        for seq in seqs {
            t.record(seq);
        }
        t
    }

    #[test]
    fn all_seen_once() {
        let t = acked(0..200);
        let zero = Counts {
            received: 200,
            ..Counts::default()
        };
        assert_eq!(t.counts(&acked(0..200)), zero);
    }

    #[test]
    fn gaps_are_lost_and_repeats_duplicated() {
        let t = acked([0, 1, 2, 2, 5, 1, 64, 127]);
        let c = t.counts(&acked(0..130));
        assert_eq!(c.received, 8);
        assert_eq!(c.duplicated, 2);
        // 0..130 minus {0, 1, 2, 5, 64, 127}.
        assert_eq!(c.lost, 124);
        assert_eq!(c.invalid, 0);
    }

    #[test]
    fn lost_at_the_end_and_unsent_sequence_numbers() {
        let mut t = acked((0..10).chain([63, 64, MAX_SEQ]));
        t.malformed += 1;
        let c = t.counts(&acked(0..12));
        assert_eq!(c.lost, 2); // 10 and 11
        assert_eq!(c.invalid, 4); // 63, 64 never sent; MAX_SEQ; one malformed line
        assert_eq!(t.counts(&Tracker::default()).lost, 0);
    }

    #[test]
    fn unacknowledged_appends_are_not_lost() {
        // The writer's append 3 failed; a reader that saw 0..=5 except 3
        // lost nothing, and one that saw 3 anyway has an invalid event.
        let sent = acked([0, 1, 2, 4, 5]);
        assert_eq!(acked([0, 1, 2, 4, 5]).counts(&sent).lost, 0);
        let c = acked(0..6).counts(&sent);
        assert_eq!((c.lost, c.invalid), (0, 1));
        // Word boundaries: the acknowledged set is longer than the seen one.
        let c = acked([63]).counts(&acked([63, 64, 200]));
        assert_eq!((c.lost, c.invalid), (2, 0));
    }
}
