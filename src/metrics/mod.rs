//! Metrics (docs/METRICS.md): the counters, gauges and histograms one shard
//! keeps about itself, and the plain-data `Snapshot` it answers a scrape
//! with. Each shard owns its own `Metrics` (on `Shard`), so they are `Cell`s:
//! no atomics, no sharing. The shard side (what is counted where, the mesh
//! scatter-gather) is `shard::metrics`; the text exposition is `text`.

pub mod text;

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::time::Duration;

use crate::protocol::router::Target;

/// The route label of `rill_http_requests_total`: a small fixed set.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Route {
    Stream,
    Bucket,
    Snapshot,
    Bootstrap,
    AppendBatch,
    Attrs,
    Health,
    Metrics,
    Other,
}

impl Route {
    pub fn label(self) -> &'static str {
        match self {
            Route::Stream => "stream",
            Route::Bucket => "bucket",
            Route::Snapshot => "snapshot",
            Route::Bootstrap => "bootstrap",
            Route::AppendBatch => "append_batch",
            Route::Attrs => "attrs",
            Route::Health => "health",
            Route::Metrics => "metrics",
            Route::Other => "other",
        }
    }

    /// The route of a routed request. Retention (extensions §2.2) counts as
    /// `snapshot`; unknown sub-resources, 404s and 400s as `other`.
    pub fn of(target: &Target) -> Route {
        match target {
            Target::Stream { .. } => Route::Stream,
            Target::StreamExtension { resource, .. } => match resource.as_str() {
                "attrs" => Route::Attrs,
                "append-batch" => Route::AppendBatch,
                "bootstrap" => Route::Bootstrap,
                r if is_snapshot_resource(r) => Route::Snapshot,
                _ => Route::Other,
            },
            Target::Bucket { .. } | Target::BucketStreams { .. } => Route::Bucket,
            Target::Health | Target::Ready => Route::Health,
            Target::Metrics => Route::Metrics,
            Target::NotFound | Target::Reserved | Target::Invalid(_) => Route::Other,
        }
    }
}

fn is_snapshot_resource(resource: &str) -> bool {
    let kind = resource.split('/').next().unwrap_or_default();
    kind == "snapshot" || kind == "retention"
}

/// Monotonic per-shard counters, rendered `{name}{shard="N"}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counter {
    Appends,
    AppendBytes,
    GroupCommits,
    CommitFailures,
    LogWriteBytes,
    Accepted,
    Handoffs,
    CacheHits,
    CacheMisses,
    LogReadBytes,
    SegmentsCleaned,
    CleanFailures,
}

impl Counter {
    pub const ALL: [Counter; 12] = [
        Counter::Appends,
        Counter::AppendBytes,
        Counter::GroupCommits,
        Counter::CommitFailures,
        Counter::LogWriteBytes,
        Counter::Accepted,
        Counter::Handoffs,
        Counter::CacheHits,
        Counter::CacheMisses,
        Counter::LogReadBytes,
        Counter::SegmentsCleaned,
        Counter::CleanFailures,
    ];

    /// Name (ending in `_total`) and help text.
    pub fn describe(self) -> (&'static str, &'static str) {
        match self {
            Counter::Appends => (
                "rill_appends_total",
                "Appends committed (POSTs with data, append-batch frames).",
            ),
            Counter::AppendBytes => (
                "rill_append_bytes_total",
                "Stream bytes committed by appends (canonical form).",
            ),
            Counter::GroupCommits => (
                "rill_group_commits_total",
                "Batches written to the log (one write, durable when it completes under --fsync always).",
            ),
            Counter::CommitFailures => (
                "rill_commit_failures_total",
                "Batches whose write or sync failed (their writes were rolled back).",
            ),
            Counter::LogWriteBytes => (
                "rill_log_write_bytes_total",
                "Bytes of framed log records written by group commits.",
            ),
            Counter::Accepted => (
                "rill_connections_accepted_total",
                "Connections accepted by this shard's listener.",
            ),
            Counter::Handoffs => (
                "rill_handoffs_total",
                "Connections this shard handed to the shard owning the request.",
            ),
            Counter::CacheHits => (
                "rill_cache_hits_total",
                "Reads of stream bytes served entirely from the cache.",
            ),
            Counter::CacheMisses => (
                "rill_cache_misses_total",
                "Reads of stream bytes that needed the log segments.",
            ),
            Counter::LogReadBytes => (
                "rill_log_read_bytes_total",
                "Stream bytes read from the log segments (cache misses).",
            ),
            Counter::SegmentsCleaned => (
                "rill_cleaner_segments_cleaned_total",
                "Segments the cleaner reclaimed.",
            ),
            Counter::CleanFailures => (
                "rill_cleaner_failures_total",
                "Cleaner passes that failed on a segment.",
            ),
        }
    }
}

/// Per-shard gauges, rendered `{name}{shard="N"}`. `Connections` is
/// tracked as connections come and go; the others are read off the shard's
/// state when a scrape asks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Gauge {
    Connections,
    Streams,
    CachedBytes,
    IndexBytes,
    LogSegments,
    LogBytes,
    CommitQueueBytes,
    RecoverySeconds,
}

impl Gauge {
    pub const ALL: [Gauge; 8] = [
        Gauge::Connections,
        Gauge::Streams,
        Gauge::CachedBytes,
        Gauge::IndexBytes,
        Gauge::LogSegments,
        Gauge::LogBytes,
        Gauge::CommitQueueBytes,
        Gauge::RecoverySeconds,
    ];

    /// Name and help text.
    pub fn describe(self) -> (&'static str, &'static str) {
        match self {
            Gauge::Connections => (
                "rill_connections",
                "Open client connections served by this shard.",
            ),
            Gauge::Streams => (
                "rill_streams",
                "Streams in this shard's table (including expired ones not reaped yet).",
            ),
            Gauge::CachedBytes => (
                "rill_cached_bytes",
                "Committed stream bytes held in this shard's cache.",
            ),
            Gauge::IndexBytes => (
                "rill_index_bytes",
                "Memory of this shard's message ends, log locations, streams and bucket registry (--max-index-bytes).",
            ),
            Gauge::LogSegments => (
                "rill_log_segments",
                "Segment files of this shard's log on disk.",
            ),
            Gauge::LogBytes => (
                "rill_log_bytes",
                "Disk bytes of this shard's segment files (preallocated, so segments x segment size).",
            ),
            Gauge::CommitQueueBytes => (
                "rill_commit_queue_bytes",
                "Bytes of log records queued for this shard's writer.",
            ),
            Gauge::RecoverySeconds => (
                "rill_recovery_seconds",
                "How long this shard's startup recovery (log scan and rebuild) took.",
            ),
        }
    }
}

/// How a live reader waits (`mode` label of `rill_live_subscribers`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Sse,
    LongPoll,
}

impl Mode {
    pub fn label(self) -> &'static str {
        match self {
            Mode::Sse => "sse",
            Mode::LongPoll => "long_poll",
        }
    }
}

/// Upper bounds of `rill_fdatasync_seconds`.
pub const SYNC_SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
];
/// Upper bounds of `rill_commit_batch_records`.
pub const BATCH_RECORDS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];

/// A histogram with fixed upper bounds; observations above the last bound
/// land in the `+Inf` bucket.
pub struct Histogram {
    bounds: &'static [f64],
    /// One per bound, then `+Inf`: not cumulative.
    counts: Vec<Cell<u64>>,
    sum: Cell<f64>,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Histogram {
        assert!(
            bounds.windows(2).all(|w| w[0] < w[1]),
            "histogram bounds must increase"
        );
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| Cell::new(0)).collect(),
            sum: Cell::new(0.0),
        }
    }

    pub fn observe(&self, value: f64) {
        let at = self.bounds.partition_point(|&bound| bound < value);
        bump(&self.counts[at], 1);
        self.sum.set(self.sum.get() + value);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        HistogramSnapshot {
            bounds: self.bounds,
            counts: self.counts.iter().map(Cell::get).collect(),
            sum: self.sum.get(),
        }
    }
}

/// A histogram's values at scrape time.
#[derive(Clone, Debug, PartialEq)]
pub struct HistogramSnapshot {
    pub bounds: &'static [f64],
    /// Per bucket, not cumulative; the last is `+Inf`.
    pub counts: Vec<u64>,
    pub sum: f64,
}

impl HistogramSnapshot {
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

fn bump(cell: &Cell<u64>, by: u64) {
    cell.set(cell.get().saturating_add(by));
}

/// One shard's metrics. Lives on `Shard`; only its thread touches it.
pub struct Metrics {
    /// (route, status) -> responses.
    requests: RefCell<BTreeMap<(Route, u16), u64>>,
    counters: [Cell<u64>; Counter::ALL.len()],
    connections: Cell<u64>,
    subscribers: [Cell<u64>; 2],
    recovery: Cell<Duration>,
    pub fdatasync: Histogram,
    pub commit_seconds: Histogram,
    pub commit_batch: Histogram,
    /// Status of the response written on a connection (by fd) for the
    /// request in progress there, until `finish_request` counts it.
    statuses: RefCell<BTreeMap<i32, u16>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests: RefCell::default(),
            counters: Default::default(),
            connections: Cell::new(0),
            subscribers: Default::default(),
            recovery: Cell::new(Duration::ZERO),
            fdatasync: Histogram::new(SYNC_SECONDS),
            commit_seconds: Histogram::new(SYNC_SECONDS),
            commit_batch: Histogram::new(BATCH_RECORDS),
            statuses: RefCell::default(),
        }
    }
}

impl Metrics {
    pub fn add(&self, counter: Counter, by: u64) {
        bump(&self.counters[counter as usize], by);
    }

    pub fn get(&self, counter: Counter) -> u64 {
        self.counters[counter as usize].get()
    }

    pub fn set_recovery(&self, took: Duration) {
        self.recovery.set(took);
    }

    /// Notes the status of the response being written on connection `fd`.
    pub fn responding(&self, fd: i32, status: u16) {
        self.statuses.borrow_mut().insert(fd, status);
    }

    /// The request on `fd` is done: counts its response, if one was
    /// written, and returns its status.
    pub fn finish_request(&self, fd: i32, route: Route) -> Option<u16> {
        let status = self.statuses.borrow_mut().remove(&fd);
        if let Some(status) = status {
            self.count_requests(route, status, 1);
        }
        status
    }

    /// Counts `n` responses of `status` to requests on `route`.
    pub fn count_requests(&self, route: Route, status: u16, n: u64) {
        *self
            .requests
            .borrow_mut()
            .entry((route, status))
            .or_default() += n;
    }

    /// Counts an open connection until the guard drops.
    pub fn connection(&self) -> Held<'_> {
        Held::new(&self.connections)
    }

    /// Counts a live reader until the guard drops.
    pub fn subscriber(&self, mode: Mode) -> Held<'_> {
        Held::new(&self.subscribers[mode as usize])
    }

    /// The shard's values now; gauges read off shard state are left at 0
    /// for the caller to fill.
    pub fn snapshot(&self, shard: usize) -> Snapshot {
        let mut gauges = [0.0; Gauge::ALL.len()];
        gauges[Gauge::Connections as usize] = self.connections.get() as f64;
        gauges[Gauge::RecoverySeconds as usize] = self.recovery.get().as_secs_f64();
        Snapshot {
            shard,
            requests: self
                .requests
                .borrow()
                .iter()
                .map(|(&k, &v)| (k, v))
                .collect(),
            counters: std::array::from_fn(|i| self.counters[i].get()),
            gauges,
            subscribers: std::array::from_fn(|i| self.subscribers[i].get()),
            fdatasync: self.fdatasync.snapshot(),
            commit_seconds: self.commit_seconds.snapshot(),
            commit_batch: self.commit_batch.snapshot(),
        }
    }
}

/// Holds one unit of a gauge; gives it back when dropped.
pub struct Held<'a>(&'a Cell<u64>);

impl<'a> Held<'a> {
    fn new(gauge: &'a Cell<u64>) -> Held<'a> {
        gauge.set(gauge.get() + 1);
        Held(gauge)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        let now = self.0.get();
        debug_assert!(now > 0, "a held gauge cannot go below zero");
        self.0.set(now.saturating_sub(1));
    }
}

/// One shard's metrics at scrape time: plain data, sent through the mesh.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub shard: usize,
    pub requests: Vec<((Route, u16), u64)>,
    pub counters: [u64; Counter::ALL.len()],
    pub gauges: [f64; Gauge::ALL.len()],
    /// Indexed by `Mode`.
    pub subscribers: [u64; 2],
    pub fdatasync: HistogramSnapshot,
    pub commit_seconds: HistogramSnapshot,
    pub commit_batch: HistogramSnapshot,
}

impl Snapshot {
    pub fn set(&mut self, gauge: Gauge, value: f64) {
        self.gauges[gauge as usize] = value;
    }
}

/// Process-wide values the scraping shard adds once.
#[derive(Clone, Debug, Default)]
pub struct Process {
    pub ready: bool,
    /// Filesystem of the data dir: (available, total) bytes, if known.
    pub disk: Option<(u64, u64)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enums_index_their_arrays() {
        for (i, c) in Counter::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
            assert!(c.describe().0.ends_with("_total"));
        }
        for (i, g) in Gauge::ALL.iter().enumerate() {
            assert_eq!(*g as usize, i);
            assert!(!g.describe().0.ends_with("_total"));
        }
        assert_eq!(Mode::Sse as usize, 0);
        assert_eq!(Mode::LongPoll as usize, 1);
    }

    #[test]
    fn histogram_buckets_by_upper_bound() {
        let h = Histogram::new(&[1.0, 2.0]);
        for v in [0.5, 1.0, 1.5, 2.0, 3.0, 9.0] {
            h.observe(v);
        }
        let s = h.snapshot();
        assert_eq!(
            s.counts,
            vec![2, 2, 2],
            "le is inclusive; above the last is +Inf"
        );
        assert_eq!(s.count(), 6);
        assert_eq!(s.sum, 17.0);
    }

    #[test]
    fn held_gauges_and_request_statuses() {
        let m = Metrics::default();
        {
            let _a = m.connection();
            let _b = m.subscriber(Mode::Sse);
            let s = m.snapshot(3);
            assert_eq!(s.gauges[Gauge::Connections as usize], 1.0);
            assert_eq!(s.subscribers, [1, 0]);
        }
        let s = m.snapshot(3);
        assert_eq!(
            (s.gauges[Gauge::Connections as usize], s.subscribers),
            (0.0, [0, 0])
        );
        m.responding(7, 404);
        m.finish_request(7, Route::Stream);
        m.finish_request(7, Route::Stream);
        m.finish_request(8, Route::Other);
        assert_eq!(m.snapshot(3).requests, vec![((Route::Stream, 404), 1)]);
    }

    #[test]
    fn routes_of_targets() {
        use crate::protocol::router::route;
        assert_eq!(Route::of(&route("/v1/stream/a")), Route::Stream);
        assert_eq!(Route::of(&route("/bkt1/s/snapshot/5")), Route::Snapshot);
        assert_eq!(Route::of(&route("/bkt1/s/retention")), Route::Snapshot);
        assert_eq!(
            Route::of(&route("/bkt1/s/append-batch")),
            Route::AppendBatch
        );
        assert_eq!(Route::of(&route("/bkt1/streams")), Route::Bucket);
        assert_eq!(Route::of(&route("/v1/health/ready")), Route::Health);
        assert_eq!(Route::of(&route("/v1/metrics")), Route::Metrics);
        assert_eq!(Route::of(&route("/v1/nope")), Route::Other);
        assert_eq!(Route::of(&route("/bkt1/s/unknown")), Route::Other);
    }
}
