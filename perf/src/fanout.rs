//! The `fanout` scenario: one `text/plain` stream, S SSE subscribers
//! (`GET {stream}?offset=-1&live=sse`, each on its own connection, opened
//! at most K at a time) and, once every subscriber has its first control
//! event, one writer appending `seq,send_unix_nanos\n` at R events/s. Each
//! subscriber records publish-to-receive latency per event (receive time
//! minus the payload's timestamp, one machine clock), counts lost and
//! duplicated events, and reconnects from the last `streamNextOffset`
//! (echoing `streamCursor`) whenever a response ends.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::Serialize;
use tokio::sync::{Semaphore, SemaphorePermit, watch};
use tokio::task::JoinHandle;

use crate::Api;
use crate::client::{Error, Target};
use crate::limits;
use crate::live::{self, Counts, Tracker};
use crate::sse::{self, Control, Item};
use crate::sse_conn::SseConn;
use crate::stats::{self, Latency};
use crate::writer::Pace;

/// Histograms the subscribers share (subscriber i records into i % HISTS).
const HISTS: usize = 16;

#[derive(clap::Args, Debug)]
pub struct FanoutArgs {
    /// Server base URL, e.g. http://127.0.0.1:4437
    #[arg(long)]
    url: String,
    #[arg(long, value_enum, default_value = "v1")]
    api: Api,
    /// Bucket name for --api bucket [default: the stream's name]
    #[arg(long)]
    bucket: Option<String>,
    /// SSE subscribers, one connection each.
    #[arg(long, default_value_t = 1000)]
    subscribers: usize,
    /// Events the writer appends per second.
    #[arg(long, default_value_t = 50.0)]
    rate: f64,
    /// How long the writer appends, in seconds.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// Subscribers connecting at once (until their first control event).
    #[arg(long, default_value_t = 256)]
    connect_concurrency: usize,
    /// Offset of the first request: -1 (the start; the stream is empty) or now.
    #[arg(long, default_value = "-1")]
    offset: String,
    /// Give up if not every subscriber is connected after this many seconds.
    #[arg(long, default_value_t = 120.0)]
    ready_timeout: f64,
    /// After the writer stops, wait at most this long for the last deliveries.
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
    subscribers: usize,
    connect_concurrency: usize,
    rate: f64,
    duration_s: f64,
    /// From the first connect until every subscriber had a control event.
    connect_s: f64,
    /// From the writer's start until the last delivery (or the drain timeout).
    elapsed_s: f64,
    /// Whether every subscriber got every event before --drain-ms ran out.
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
    lost: u64,
    duplicated: u64,
    /// Malformed data lines and sequence numbers never sent.
    invalid: u64,
    /// Per delivery: receive time minus the send time in the payload.
    latency_us: Latency,
    /// Responses that ended (the server's SSE cycle) and were reopened.
    reconnects: u64,
    /// Failed connects or requests, non-200 answers, broken bodies.
    errors: u64,
    error_kinds: BTreeMap<String, u64>,
    client_cpu_pct: f64,
    server_cpu_pct: Option<f64>,
    nofile_limit: u64,
    unix_time: u64,
}

/// What the subscribers share.
struct Shared {
    target: Target,
    path: String,
    gate: Semaphore,
    ready: AtomicUsize,
    /// New (not duplicated) events delivered, over all subscribers.
    delivered: AtomicU64,
    hists: Vec<Mutex<hdrhistogram::Histogram<u64>>>,
}

/// One subscriber's position and accounting.
struct Sub {
    parser: sse::Parser,
    sink: Sink,
    reconnects: u64,
    errors: BTreeMap<String, u64>,
}

/// Where the parsed items go.
struct Sink {
    tracker: Tracker,
    offset: String,
    cursor: Option<String>,
    announced: bool,
    closed: bool,
    /// Latencies (µs) of the new events in the current chunk.
    latencies: Vec<u64>,
    bad_controls: u64,
}

impl Sink {
    fn on(&mut self, item: Item<'_>, now_ns: u64) {
        match item {
            Item::Data(line) => match live::parse_line(line) {
                Some((seq, sent_ns)) => {
                    if self.tracker.record(seq) {
                        self.latencies.push(live::latency_us(sent_ns, now_ns));
                    }
                }
                None => self.tracker.malformed += 1,
            },
            Item::Control(json) => match Control::parse(json) {
                Some(c) => {
                    if let Some(next) = c.stream_next_offset {
                        self.offset = next;
                    }
                    self.cursor = c.stream_cursor.or(self.cursor.take());
                    self.announced = true;
                    self.closed |= c.stream_closed;
                }
                None => self.bad_controls += 1,
            },
        }
    }
}

impl Sub {
    fn new(offset: &str) -> Sub {
        Sub {
            parser: sse::Parser::default(),
            sink: Sink {
                tracker: Tracker::default(),
                offset: offset.to_string(),
                cursor: None,
                announced: false,
                closed: false,
                latencies: Vec::new(),
                bad_controls: 0,
            },
            reconnects: 0,
            errors: BTreeMap::new(),
        }
    }

    fn url(&self, path: &str) -> String {
        let s = &self.sink;
        match &s.cursor {
            Some(c) => format!("{path}?offset={}&live=sse&cursor={c}", s.offset),
            None => format!("{path}?offset={}&live=sse", s.offset),
        }
    }

    /// Parses one body chunk and records its deliveries.
    fn feed(&mut self, shared: &Shared, hist: usize, data: &[u8]) {
        let now = live::unix_nanos();
        self.parser.feed(data, &mut |item| self.sink.on(item, now));
        let new = &mut self.sink.latencies;
        if new.is_empty() {
            return;
        }
        shared
            .delivered
            .fetch_add(new.len() as u64, Ordering::Relaxed);
        let mut h = shared.hists[hist].lock().expect("histogram lock");
        for us in new.drain(..) {
            h.saturating_record(us);
        }
    }
}

fn check_args(args: &FanoutArgs) -> Result<(), Error> {
    if args.subscribers == 0 || args.connect_concurrency == 0 {
        return Err("--subscribers and --connect-concurrency must be positive".into());
    }
    if args.rate <= 0.0 || args.duration <= 0.0 || args.ready_timeout <= 0.0 {
        return Err("--rate, --duration and --ready-timeout must be positive".into());
    }
    if args.writer_connections == 0 {
        return Err("--writer-connections must be positive".into());
    }
    Ok(())
}

pub async fn run(args: FanoutArgs) -> Result<(), Error> {
    check_args(&args)?;
    let nofile = limits::raise_nofile(args.subscribers, "--subscribers")?;
    limits::warn_outside(args.subscribers, args.out.server_pid);
    let target = Target::parse(&args.url)?;
    let name = format!("bench-fanout-{}", live::run_id());
    let path = live::create_stream(&target, args.api, args.bucket.as_deref(), &name).await?;
    let shared = Arc::new(Shared {
        target: target.clone(),
        path: path.clone(),
        gate: Semaphore::new(args.connect_concurrency),
        ready: AtomicUsize::new(0),
        delivered: AtomicU64::new(0),
        hists: (0..HISTS).map(|_| Mutex::new(stats::histogram())).collect(),
    });
    let connect = Instant::now();
    let (handles, stop) = connect_all(&args, &shared).await?;
    let connect_s = connect.elapsed().as_secs_f64();
    let n = args.subscribers;
    eprintln!("rill-bench fanout: {n} subscribers connected in {connect_s:.2} s");
    let pace = Pace {
        every: Duration::from_secs_f64(1.0 / args.rate),
        duration: Duration::from_secs_f64(args.duration),
        connections: args.writer_connections,
    };
    let times = (pace, Duration::from_millis(args.drain_ms));
    let m = live::write_and_drain(
        target,
        path,
        times,
        n,
        &shared.delivered,
        args.out.server_pid,
    )
    .await?;
    let _ = stop.send(true);
    let subs = collect(handles, &m.written.acked).await?;
    let mut hist = stats::histogram();
    for h in &shared.hists {
        hist.add(&*h.lock().expect("histogram lock"))?;
    }
    let report = report(&args, &shared.path, (nofile, connect_s), &m, subs, &hist);
    print_table(&report, &m.written.errors);
    args.out.write_json(&report)?;
    Ok(())
}

/// Starts every subscriber and waits until each has its first control
/// event; on timeout, stops them and reports their errors.
async fn connect_all(
    args: &FanoutArgs,
    shared: &Arc<Shared>,
) -> Result<(Vec<JoinHandle<Sub>>, watch::Sender<bool>), Error> {
    let (stop, stopped) = watch::channel(false);
    let handles: Vec<_> = (0..args.subscribers)
        .map(|i| {
            let (shared, offset) = (shared.clone(), args.offset.clone());
            tokio::spawn(subscriber(shared, i, offset, stopped.clone()))
        })
        .collect();
    let timeout = Duration::from_secs_f64(args.ready_timeout);
    if live::wait_ready(&shared.ready, args.subscribers, "subscribers", timeout).await {
        return Ok((handles, stop));
    }
    let _ = stop.send(true);
    let (_, _, kinds) = collect(handles, &Tracker::default()).await?;
    Err(format!(
        "only {} of {} subscribers connected within {} s; errors: {kinds:?}",
        shared.ready.load(Ordering::Relaxed),
        args.subscribers,
        args.ready_timeout
    )
    .into())
}

type Collected = (Counts, u64, BTreeMap<String, u64>);

fn report(
    args: &FanoutArgs,
    path: &str,
    (nofile, connect_s): (u64, f64),
    m: &live::Measured,
    (counts, reconnects, error_kinds): Collected,
    hist: &hdrhistogram::Histogram<u64>,
) -> Report {
    Report {
        scenario: "fanout",
        label: args.out.label.clone(),
        url: args.url.clone(),
        api: args.api,
        stream: path.to_string(),
        subscribers: args.subscribers,
        connect_concurrency: args.connect_concurrency,
        rate: args.rate,
        duration_s: args.duration,
        connect_s,
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
        lost: counts.lost,
        duplicated: counts.duplicated,
        invalid: counts.invalid,
        latency_us: Latency::of(hist),
        reconnects,
        errors: error_kinds.values().sum(),
        error_kinds,
        client_cpu_pct: m.client_cpu_pct,
        server_cpu_pct: m.server_cpu_pct,
        nofile_limit: nofile,
        unix_time: live::unix_secs(),
    }
}

/// Joins the subscribers; sums their accounting against the acknowledged events.
async fn collect(handles: Vec<JoinHandle<Sub>>, acked: &Tracker) -> Result<Collected, Error> {
    let mut counts = Counts::default();
    let mut reconnects = 0;
    let mut kinds = BTreeMap::new();
    for handle in handles {
        let sub = handle.await?;
        counts.add(sub.sink.tracker.counts(acked));
        counts.invalid += sub.sink.bad_controls;
        reconnects += sub.reconnects;
        for (k, v) in sub.errors {
            *kinds.entry(k).or_insert(0) += v;
        }
    }
    Ok((counts, reconnects, kinds))
}

/// One subscriber, until `stopped` turns true.
async fn subscriber(
    shared: Arc<Shared>,
    index: usize,
    offset: String,
    mut stopped: watch::Receiver<bool>,
) -> Sub {
    let mut sub = Sub::new(&offset);
    tokio::select! {
        () = follow(&shared, index % HISTS, &mut sub) => {}
        _ = stopped.wait_for(|s| *s) => {}
    }
    sub
}

/// Reads responses one after another; returns when the stream closes.
async fn follow(shared: &Shared, hist: usize, sub: &mut Sub) {
    let mut permit = Some(shared.gate.acquire().await.expect("gate never closes"));
    let mut conn = None;
    let mut failures = 0u32;
    loop {
        match response(shared, hist, sub, &mut conn, &mut permit).await {
            Ok(()) if sub.sink.closed => return,
            Ok(()) => {
                sub.reconnects += 1;
                failures = 0;
            }
            Err(e) => {
                live::count(&mut sub.errors, e.to_string());
                conn = None;
                failures += 1;
                let backoff = 10 * u64::from(failures.min(100));
                tokio::time::sleep(Duration::from_millis(backoff)).await;
            }
        }
    }
}

/// One SSE response, read to its end.
async fn response(
    shared: &Shared,
    hist: usize,
    sub: &mut Sub,
    conn: &mut Option<SseConn>,
    permit: &mut Option<SemaphorePermit<'_>>,
) -> Result<(), Error> {
    if conn.as_ref().is_none_or(|c| !c.reusable) {
        let opened = SseConn::open(&shared.target).await;
        *conn = Some(opened.map_err(|e| format!("connect: {e}"))?);
    }
    let c = conn.as_mut().expect("opened above");
    let status = c.get(&shared.target, &sub.url(&shared.path)).await?;
    if status != 200 {
        return Err(format!("http {status}").into());
    }
    sub.parser = sse::Parser::default();
    c.body(|data| {
        sub.feed(shared, hist, data);
        if sub.sink.announced && permit.take().is_some() {
            shared.ready.fetch_add(1, Ordering::Relaxed);
        }
    })
    .await
}

fn print_table(r: &Report, append_errors: &BTreeMap<String, u64>) {
    let label = if r.label.is_empty() { &r.url } else { &r.label };
    println!(
        "fanout {label}: {} subscribers ({:?}), {} events/s for {:.1} s, connected in {:.2} s",
        r.subscribers, r.api, r.rate, r.duration_s, r.connect_s
    );
    println!(
        "{:>7} {:>10} {:>10} {:>6} {:>5} {:>8} {:>8} {:>8} {:>8} {:>9} {:>7} {:>7} {:>8} {:>8}",
        "sent",
        "expected",
        "received",
        "lost",
        "dup",
        "p50 µs",
        "p90 µs",
        "p99 µs",
        "p999 µs",
        "max µs",
        "reconn",
        "errors",
        "cli CPU",
        "srv CPU"
    );
    println!(
        "{:>7} {:>10} {:>10} {:>6} {:>5} {} {:>7} {:>7} {:>7.0}% {:>8}",
        r.events_sent,
        r.deliveries_expected,
        r.deliveries_received,
        r.lost,
        r.duplicated,
        live::latency_cells(&r.latency_us),
        r.reconnects,
        r.errors,
        r.client_cpu_pct,
        live::cpu_cell(r.server_cpu_pct)
    );
    let a = &r.append_latency_us;
    println!(
        "  appends: {} ok, {} failed, p50 {} µs, p99 {} µs, max {} µs; {} connections, \
         started at most {} µs late",
        r.events_sent,
        r.append_errors,
        a.p50,
        a.p99,
        a.max,
        r.writer_connections,
        r.max_start_delay_us
    );
    for (kind, n) in append_errors.iter().chain(&r.error_kinds) {
        println!("  error {kind}: {n}");
    }
    if r.invalid > 0 {
        println!("  invalid lines or control events: {}", r.invalid);
    }
    if !r.drained {
        println!("  not every delivery arrived within the drain time");
    }
}
