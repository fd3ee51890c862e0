//! The writer task of a shard: takes queued records as one batch, appends
//! them to the log, and reports the outcome to the commit pipeline (and
//! the batch and its syncs to the shard's metrics).
//!
//! At shutdown the shard sets `finish` once its connections have ended; the
//! writer then writes whatever is still queued, syncs the log (under
//! `--fsync interval:MS` acknowledged writes may not be synced yet) and
//! returns.

use std::cell::Cell;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use super::commit::CommitError;
use super::{Shard, metrics};
use crate::config::FsyncPolicy;
use crate::log::appender::Appender;
use crate::log::storage::Storage;
use crate::metrics::Counter;

/// Set when a shard's final sync failed: acknowledged writes may not be
/// on disk, so the process must not exit 0.
static FINAL_SYNC_FAILED: AtomicBool = AtomicBool::new(false);

/// Whether some shard's final sync at shutdown failed.
pub fn final_sync_failed() -> bool {
    FINAL_SYNC_FAILED.load(Ordering::SeqCst)
}

pub async fn run<S: Storage + 'static>(
    shard: Rc<Shard>,
    mut appender: Appender<S>,
    policy: FsyncPolicy,
    finish: Rc<Cell<bool>>,
) {
    shard.head_segment.set(appender.end().segment);
    let mut last_sync = Instant::now();
    // A full disk fails every batch: a line a second, not one a batch.
    let mut failures = crate::logging::Throttle::new(Duration::from_secs(1));
    loop {
        let seen = shard.commits.wake_writer.generation();
        let Some(batch) = shard
            .commits
            .take_batch(appender.max_batch_bytes() as usize)
        else {
            if finish.get() {
                return final_sync(&shard, &mut appender, policy).await;
            }
            idle(&shard, &mut appender, policy, seen, &mut last_sync).await;
            continue;
        };
        let sync_now = match policy {
            FsyncPolicy::Always => true,
            FsyncPolicy::Interval(ms) => last_sync.elapsed() >= Duration::from_millis(ms),
        };
        let result = appender.append(&batch.bytes, sync_now).await;
        metrics::count_syncs(&shard.metrics, appender.take_sync_times());
        match result {
            Ok(landed) => {
                if sync_now {
                    last_sync = Instant::now();
                }
                metrics::count_batch(&shard.metrics, batch.records, batch.bytes.len());
                shard.head_segment.set(appender.end().segment);
                shard.on_committed(batch.last_seq, (landed.segment, landed.pos), sync_now);
            }
            Err(e) => {
                if let Some(left_out) = failures.allow(Instant::now()) {
                    crate::error!(
                        shard = shard.index,
                        "log write failed: {e}; uncommitted writes rolled back \
                         ({left_out} more failures since the last such line)"
                    );
                }
                shard.metrics.add(Counter::CommitFailures, 1);
                shard.on_failed(&e);
                if CommitError::from_io(&e).no_space {
                    super::reserve::disk_full(&shard).await;
                }
            }
        }
        shard.commits.recycle(batch.bytes);
    }
}

/// Syncs everything written (nothing is queued any more): under
/// `--fsync always` every batch was synced when it was written.
async fn final_sync<S: Storage + 'static>(
    shard: &Shard,
    appender: &mut Appender<S>,
    policy: FsyncPolicy,
) {
    if policy == FsyncPolicy::Always {
        return;
    }
    match appender.sync().await {
        Ok(()) => {
            shard.commits.synced_all();
            crate::info!(shard = shard.index, "log synced at shutdown");
        }
        Err(e) => {
            FINAL_SYNC_FAILED.store(true, Ordering::SeqCst);
            crate::error!(shard = shard.index, "final log sync failed: {e}");
        }
    }
}

/// Waits for work; under `--fsync interval:MS` also syncs what was written.
async fn idle<S: Storage + 'static>(
    shard: &Shard,
    appender: &mut Appender<S>,
    policy: FsyncPolicy,
    seen: u64,
    last_sync: &mut Instant,
) {
    let changed = shard.commits.wake_writer.changed(seen);
    match policy {
        FsyncPolicy::Always => changed.await,
        FsyncPolicy::Interval(ms) => {
            let period = Duration::from_millis(ms);
            if monoio::time::timeout(period, changed).await.is_err() {
                let synced = appender.sync().await;
                metrics::count_syncs(&shard.metrics, appender.take_sync_times());
                match synced {
                    Ok(()) => shard.commits.synced_all(),
                    Err(e) => {
                        crate::error!(shard = shard.index, "periodic log sync failed: {e}")
                    }
                }
                *last_sync = Instant::now();
            }
        }
    }
}
