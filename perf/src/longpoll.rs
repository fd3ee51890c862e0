//! The `longpoll` scenario: W waiters, each on its own connection, loop
//! `GET {stream}?offset=X&live=long-poll` at the tail (first `offset=now`,
//! then each answer's `Stream-Next-Offset`, echoing `Stream-Cursor`), while
//! one writer appends `seq,send_unix_nanos\n` every `--interval-ms`. Each
//! waiter records its wake-up latency per event (time the response was read
//! minus the event's send time) and counts missed and duplicated events.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hyper::Method;
use serde::Serialize;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::Api;
use crate::client::{Conn, Error, Reply, Target};
use crate::limits;
use crate::live::{self, Counts, Tracker};
use crate::stats::{self, Latency};
use crate::writer::Pace;

#[derive(clap::Args, Debug)]
pub struct LongpollArgs {
    /// Server base URL, e.g. http://127.0.0.1:4437
    #[arg(long)]
    url: String,
    #[arg(long, value_enum, default_value = "v1")]
    api: Api,
    /// Bucket name for --api bucket [default: the stream's name]
    #[arg(long)]
    bucket: Option<String>,
    /// Long-polling clients, one connection each.
    #[arg(long, default_value_t = 100)]
    waiters: usize,
    /// The writer appends one event every this many milliseconds.
    #[arg(long, default_value_t = 100)]
    interval_ms: u64,
    /// How long the writer appends, in seconds.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Pause between the waiters' first requests and the first append, so
    /// that every `offset=now` poll is parked at the server.
    #[arg(long, default_value_t = 300)]
    settle_ms: u64,
    /// Give up if not every waiter is connected after this many seconds.
    #[arg(long, default_value_t = 60.0)]
    ready_timeout: f64,
    /// After the writer stops, wait at most this long for the last wake-ups.
    #[arg(long, default_value_t = 5000)]
    drain_ms: u64,
    /// Connections the writer may use at once: each event's POST starts on
    /// schedule on an idle one, so slow acknowledgements do not lower the rate.
    #[arg(long, default_value_t = 32)]
    writer_connections: usize,
    #[command(flatten)]
    out: crate::output::Output,
}

#[derive(Serialize)]
struct Report {
    scenario: &'static str,
    label: String,
    url: String,
    api: Api,
    stream: String,
    waiters: usize,
    interval_ms: u64,
    duration_s: f64,
    /// From the writer's start until the last wake-up (or the drain timeout).
    elapsed_s: f64,
    /// Whether every waiter got every event before --drain-ms ran out.
    drained: bool,
    events_sent: u64,
    append_errors: u64,
    /// The writer's POSTs, request to acknowledgement (`--fsync` included).
    append_latency_us: Latency,
    /// Connections the writer opened (at most --writer-connections).
    writer_connections: usize,
    /// How late the latest POST started against its schedule (µs).
    max_start_delay_us: u64,
    /// From the writer's first POST to its last acknowledgement.
    writer_s: f64,
    deliveries_expected: u64,
    deliveries_received: u64,
    missed: u64,
    duplicated: u64,
    /// Malformed body lines and sequence numbers never sent.
    invalid: u64,
    /// Per event: the time its response was read minus its send time.
    latency_us: Latency,
    /// Long-poll requests answered (200 or 204).
    polls: u64,
    /// 204 answers (the server's long-poll timeout).
    timeouts: u64,
    errors: u64,
    error_kinds: BTreeMap<String, u64>,
    client_cpu_pct: f64,
    server_cpu_pct: Option<f64>,
    nofile_limit: u64,
    unix_time: u64,
}

struct Shared {
    target: Target,
    path: String,
    ready: AtomicUsize,
    /// New (not duplicated) events received, over all waiters.
    delivered: AtomicU64,
}

/// One waiter's position and accounting.
struct Waiter {
    tracker: Tracker,
    offset: String,
    cursor: Option<String>,
    hist: hdrhistogram::Histogram<u64>,
    polls: u64,
    timeouts: u64,
    errors: BTreeMap<String, u64>,
}

impl Waiter {
    fn new() -> Waiter {
        Waiter {
            tracker: Tracker::default(),
            offset: "now".into(),
            cursor: None,
            hist: stats::histogram(),
            polls: 0,
            timeouts: 0,
            errors: BTreeMap::new(),
        }
    }

    fn url(&self, path: &str) -> String {
        match &self.cursor {
            Some(c) => format!("{path}?offset={}&live=long-poll&cursor={c}", self.offset),
            None => format!("{path}?offset={}&live=long-poll", self.offset),
        }
    }

    /// Accounts one answer and moves to its `Stream-Next-Offset`.
    fn on_reply(&mut self, r: Reply, delivered: &AtomicU64) {
        let now = live::unix_nanos();
        match r.status.as_u16() {
            200 => {
                self.polls += 1;
                let new = self.on_body(&r.body, now);
                delivered.fetch_add(new, Ordering::Relaxed);
            }
            204 => {
                self.polls += 1;
                self.timeouts += 1;
            }
            s => live::count(&mut self.errors, format!("http {s}")),
        }
        if let Some(next) = r.next_offset {
            self.offset = next;
        }
        self.cursor = r.cursor.or(self.cursor.take());
    }

    /// Records the events of a body read at `now`; returns how many were new.
    fn on_body(&mut self, body: &[u8], now: u64) -> u64 {
        let mut new = 0;
        for line in body.split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            match live::parse_line(line) {
                Some((seq, sent_ns)) if self.tracker.record(seq) => {
                    new += 1;
                    self.hist.saturating_record(live::latency_us(sent_ns, now));
                }
                Some(_) => {}
                None => self.tracker.malformed += 1,
            }
        }
        new
    }
}

fn check_args(args: &LongpollArgs) -> Result<(), Error> {
    if args.waiters == 0 || args.interval_ms == 0 || args.writer_connections == 0 {
        return Err("--waiters, --interval-ms and --writer-connections must be positive".into());
    }
    if args.duration <= 0.0 || args.ready_timeout <= 0.0 {
        return Err("--duration and --ready-timeout must be positive".into());
    }
    Ok(())
}

pub async fn run(args: LongpollArgs) -> Result<(), Error> {
    check_args(&args)?;
    let nofile = limits::raise_nofile(args.waiters, "--waiters")?;
    limits::warn_outside(args.waiters, args.out.server_pid);
    let target = Target::parse(&args.url)?;
    let name = format!("bench-longpoll-{}", live::run_id());
    let path = live::create_stream(&target, args.api, args.bucket.as_deref(), &name).await?;
    let shared = Arc::new(Shared {
        target: target.clone(),
        path: path.clone(),
        ready: AtomicUsize::new(0),
        delivered: AtomicU64::new(0),
    });
    let (handles, stop) = connect_all(&args, &shared).await?;
    tokio::time::sleep(Duration::from_millis(args.settle_ms)).await;
    let pace = Pace {
        every: Duration::from_millis(args.interval_ms),
        duration: Duration::from_secs_f64(args.duration),
        connections: args.writer_connections,
    };
    let times = (pace, Duration::from_millis(args.drain_ms));
    let (n, pid) = (args.waiters, args.out.server_pid);
    let m = live::write_and_drain(target, path, times, n, &shared.delivered, pid).await?;
    let _ = stop.send(true);
    let waiters = collect(handles, &m.written.acked).await?;
    let report = report(&args, &shared.path, nofile, &m, waiters);
    print_table(&report, &m.written.errors);
    args.out.write_json(&report)?;
    Ok(())
}

/// Starts every waiter and waits until each has its connection open; on
/// timeout, stops them and reports their errors.
async fn connect_all(
    args: &LongpollArgs,
    shared: &Arc<Shared>,
) -> Result<(Vec<JoinHandle<Waiter>>, watch::Sender<bool>), Error> {
    let (stop, stopped) = watch::channel(false);
    let handles: Vec<_> = (0..args.waiters)
        .map(|_| tokio::spawn(waiter(shared.clone(), stopped.clone())))
        .collect();
    let timeout = Duration::from_secs_f64(args.ready_timeout);
    if live::wait_ready(&shared.ready, args.waiters, "waiters", timeout).await {
        return Ok((handles, stop));
    }
    let _ = stop.send(true);
    let (.., kinds) = collect(handles, &Tracker::default()).await?;
    Err(format!(
        "only {} of {} waiters connected within {} s; errors: {kinds:?}",
        shared.ready.load(Ordering::Relaxed),
        args.waiters,
        args.ready_timeout
    )
    .into())
}

fn report(
    args: &LongpollArgs,
    path: &str,
    nofile: u64,
    m: &live::Measured,
    (counts, hist, polls, timeouts, error_kinds): Collected,
) -> Report {
    Report {
        scenario: "longpoll",
        label: args.out.label.clone(),
        url: args.url.clone(),
        api: args.api,
        stream: path.to_string(),
        waiters: args.waiters,
        interval_ms: args.interval_ms,
        duration_s: args.duration,
        elapsed_s: m.elapsed_s,
        drained: m.drained,
        events_sent: m.written.sent,
        append_errors: m.written.errors(),
        append_latency_us: Latency::of(&m.written.append_latency),
        writer_connections: m.written.connections,
        max_start_delay_us: m.written.max_start_delay_us,
        writer_s: m.written.writer_s,
        deliveries_expected: m.expected,
        deliveries_received: counts.received,
        missed: counts.lost,
        duplicated: counts.duplicated,
        invalid: counts.invalid,
        latency_us: Latency::of(&hist),
        polls,
        timeouts,
        errors: error_kinds.values().sum(),
        error_kinds,
        client_cpu_pct: m.client_cpu_pct,
        server_cpu_pct: m.server_cpu_pct,
        nofile_limit: nofile,
        unix_time: live::unix_secs(),
    }
}

type Collected = (
    Counts,
    hdrhistogram::Histogram<u64>,
    u64,
    u64,
    BTreeMap<String, u64>,
);

/// Joins the waiters: accounting against the acknowledged events, latencies, polls,
/// timeouts and errors.
async fn collect(handles: Vec<JoinHandle<Waiter>>, acked: &Tracker) -> Result<Collected, Error> {
    let mut counts = Counts::default();
    let mut hist = stats::histogram();
    let (mut polls, mut timeouts) = (0, 0);
    let mut kinds = BTreeMap::new();
    for handle in handles {
        let w = handle.await?;
        counts.add(w.tracker.counts(acked));
        hist.add(&w.hist)?;
        polls += w.polls;
        timeouts += w.timeouts;
        for (k, v) in w.errors {
            *kinds.entry(k).or_insert(0) += v;
        }
    }
    Ok((counts, hist, polls, timeouts, kinds))
}

/// One waiter, until `stopped` turns true.
async fn waiter(shared: Arc<Shared>, mut stopped: watch::Receiver<bool>) -> Waiter {
    let mut w = Waiter::new();
    tokio::select! {
        () = poll_loop(&shared, &mut w) => {}
        _ = stopped.wait_for(|s| *s) => {}
    }
    w
}

async fn poll_loop(shared: &Shared, w: &mut Waiter) {
    let mut conn = Conn::new(shared.target.clone());
    while let Err(e) = conn.open().await {
        live::count(&mut w.errors, format!("connect: {e}"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    shared.ready.fetch_add(1, Ordering::Relaxed);
    loop {
        let url = w.url(&shared.path);
        match conn.send(Method::GET, &url, None, Bytes::new()).await {
            Ok(r) => w.on_reply(r, &shared.delivered),
            Err(e) => {
                live::count(&mut w.errors, format!("transport: {e}"));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
}

fn print_table(r: &Report, append_errors: &BTreeMap<String, u64>) {
    let label = if r.label.is_empty() { &r.url } else { &r.label };
    println!(
        "longpoll {label}: {} waiters ({:?}), one event every {} ms for {:.1} s",
        r.waiters, r.api, r.interval_ms, r.duration_s
    );
    println!(
        "{:>7} {:>10} {:>10} {:>6} {:>5} {:>8} {:>8} {:>8} {:>8} {:>9} {:>7} {:>7} {:>8} {:>8}",
        "sent",
        "expected",
        "received",
        "missed",
        "dup",
        "p50 µs",
        "p90 µs",
        "p99 µs",
        "p999 µs",
        "max µs",
        "204s",
        "errors",
        "cli CPU",
        "srv CPU"
    );
    println!(
        "{:>7} {:>10} {:>10} {:>6} {:>5} {} {:>7} {:>7} {:>7.0}% {:>8}",
        r.events_sent,
        r.deliveries_expected,
        r.deliveries_received,
        r.missed,
        r.duplicated,
        live::latency_cells(&r.latency_us),
        r.timeouts,
        r.errors,
        r.client_cpu_pct,
        live::cpu_cell(r.server_cpu_pct)
    );
    let a = &r.append_latency_us;
    println!(
        "  appends: {} ok, {} failed, p50 {} µs, p99 {} µs, max {} µs; {} connections, \
         started at most {} µs late; {} polls",
        r.events_sent,
        r.append_errors,
        a.p50,
        a.p99,
        a.max,
        r.writer_connections,
        r.max_start_delay_us,
        r.polls
    );
    for (kind, n) in append_errors.iter().chain(&r.error_kinds) {
        println!("  error {kind}: {n}");
    }
    if r.invalid > 0 {
        println!("  invalid lines: {}", r.invalid);
    }
    if !r.drained {
        println!("  not every wake-up arrived within the drain time");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_with_several_events() {
        let mut w = Waiter::new();
        let body = format!(
            "{}{}",
            live::event_line(0, 1_000),
            live::event_line(1, 2_000)
        );
        assert_eq!(w.on_body(body.as_bytes(), 5_000), 2);
        assert_eq!(w.on_body(live::event_line(1, 2_000).as_bytes(), 6_000), 0);
        assert_eq!(w.on_body(b"junk\n3,1\n", 7_000), 1);
        let sent: Tracker = {
            let mut t = Tracker::default();
            (0..4).for_each(|s| {
                t.record(s);
            });
            t
        };
        let c = w.tracker.counts(&sent);
        assert_eq!((c.received, c.lost, c.duplicated, c.invalid), (4, 1, 1, 1));
        assert_eq!(w.hist.len(), 3);
    }
}
