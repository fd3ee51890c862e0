//! `GET /v1/metrics` and the shard-side glue of `crate::metrics`: the
//! scraping shard gathers one `Snapshot` from every shard through the mesh
//! (`MeshMsg::Metrics`), each filling in the gauges it reads off its own
//! state, and renders them all as Prometheus text. Also the few helpers the
//! commit path calls to count what it committed.

use std::time::Duration;

use super::Shard;
use super::mesh::MeshMsg;
use crate::metrics::{Counter, Gauge, Metrics, Process, Snapshot, text};
use crate::protocol::Response;
use crate::stream::table::{Applied, Undo};

/// Answers a scrape with every shard's metrics.
pub async fn serve(shard: &Shard) -> Response {
    // A shard stopped at shutdown is left out (no partial-scrape marker:
    // the process is about to exit).
    let snapshots = shard
        .mesh
        .gather(|reply| MeshMsg::Metrics { reply })
        .await
        .replies;
    debug_assert!(snapshots.len() <= shard.shards());
    let process = Process {
        ready: crate::health::is_ready(),
        disk: disk_space(&shard.config.data_dir),
    };
    Response::new(200)
        .header("content-type", text::CONTENT_TYPE)
        .header("cache-control", "no-store")
        .with_body(text::render(&snapshots, &process).into_bytes())
}

/// This shard's metrics now, with the gauges its state answers.
pub fn snapshot(shard: &Shard) -> Snapshot {
    let mut s = shard.metrics.snapshot(shard.index);
    {
        let table = shard.table.borrow();
        s.set(Gauge::Streams, table.len() as f64);
        s.set(Gauge::CachedBytes, table.cached_bytes() as f64);
        s.set(Gauge::IndexBytes, table.index_used() as f64);
    }
    let segments = shard.segments.on_disk().map_or(0, |list| list.len()) as u64;
    s.set(Gauge::LogSegments, segments as f64);
    s.set(
        Gauge::LogBytes,
        (segments * shard.config.segment_bytes) as f64,
    );
    s.set(Gauge::CommitQueueBytes, shard.commits.queued_bytes() as f64);
    s
}

/// Counts a committed stream command: an append (a write that added data
/// to an existing stream) and its bytes.
pub fn count_committed(metrics: &Metrics, applied: &Applied, undo: &Undo) {
    if matches!(undo, Undo::Write(_)) && applied.data_len > 0 {
        metrics.add(Counter::Appends, 1);
        metrics.add(Counter::AppendBytes, applied.data_len);
    }
}

/// Counts one group commit of `records` records, `bytes` framed bytes.
pub fn count_batch(metrics: &Metrics, records: usize, bytes: usize) {
    assert!(records > 0, "a batch holds at least one record");
    metrics.add(Counter::GroupCommits, 1);
    metrics.add(Counter::LogWriteBytes, bytes as u64);
    metrics.commit_batch.observe(records as f64);
}

/// Records how long each data sync took.
pub fn count_syncs(metrics: &Metrics, syncs: Vec<Duration>) {
    for took in syncs {
        metrics.fdatasync.observe(took.as_secs_f64());
    }
}

/// (available, total) bytes of the filesystem holding `dir`.
pub(super) fn disk_space(dir: &std::path::Path) -> Option<(u64, u64)> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain data (zeroed is a valid value) and the call
    // only writes into it; `path` is a NUL-terminated string we own.
    let stat = unsafe {
        let mut stat: libc::statvfs = std::mem::zeroed();
        if libc::statvfs(path.as_ptr(), &mut stat) != 0 {
            return None;
        }
        stat
    };
    let block = stat.f_frsize as u64;
    Some((stat.f_bavail as u64 * block, stat.f_blocks as u64 * block))
}
