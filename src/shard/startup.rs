//! Shard startup: recover the shard's log into its table and bucket
//! registry, agree on the bucket registry with the other shards, open the
//! log for appending (issue 3 "Recovery", "Everything survives a restart").
//!
//! The bucket registry is replicated: every shard logs its own copy of each
//! change. A crash in the middle of a replication leaves the copies
//! different, so at startup each shard reports its registry to the main
//! thread, which answers with their union; a shard logs the buckets it
//! lacks. (A bucket whose create was not acknowledged may so survive; one
//! that was acknowledged is never lost.)

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::mpsc;

use super::buckets::Bucket;
use crate::config::Config;
use crate::log::appender::{Appender, LogEnd};
use crate::log::recovery::{self, Recovered};
use crate::log::storage::DirectStorage;
use crate::stream::Table;
use crate::stream::rebuild::{self, Rebuild};

/// Bucket id -> creation time.
pub type Registry = BTreeMap<String, u64>;

/// What a shard tells the main thread after recovering.
pub type Report = (usize, Result<Registry, String>);

/// The shard's end of the startup exchange with the main thread.
pub struct Startup {
    pub report: mpsc::Sender<Report>,
    /// The union of every shard's registry, or `None` to abort.
    pub union: mpsc::Receiver<Option<Registry>>,
}

/// A recovered shard, ready to serve.
pub struct Ready {
    pub table: Table,
    pub buckets: BTreeMap<String, Bucket>,
    pub missing: Registry,
    pub appender: Appender<DirectStorage>,
    pub storage: Rc<DirectStorage>,
    pub next_seq: u64,
    /// How long recovering the log and rebuilding the table took.
    pub recovery: std::time::Duration,
    /// The shard dir, when its log does not record TTL streams' reads yet
    /// (`datadir::ACCESS_MARKER`).
    pub legacy_access: Option<std::path::PathBuf>,
}

/// Replays one committed record (found at `at`) into a rebuild.
pub fn replay(rebuild: &mut Rebuild, kind: u8, payload: &[u8], at: LogEnd) -> Result<(), String> {
    rebuild::replay_record(rebuild, kind, payload, (at.segment, at.pos))
}

/// `legacy_access`: the log does not record TTL streams' reads
/// (`Rebuild::legacy_access`).
async fn recover(
    index: usize,
    config: &Config,
    dir: std::path::PathBuf,
    legacy_access: bool,
) -> Result<(Recovered, Table, Registry, Rc<DirectStorage>), String> {
    let storage = DirectStorage::new(dir.clone()).map_err(|e| format!("{}: {e}", dir.display()))?;
    // `--fsync always`: each commit's write is itself durable (O_DSYNC).
    let write_through = config.fsync == crate::config::FsyncPolicy::Always;
    let storage = Rc::new(storage.with_write_through(write_through));
    let mut rebuild = Rebuild::default();
    if legacy_access {
        rebuild.legacy_access();
    }
    let recovered = recovery::recover(&*storage, config.segment_bytes, |kind, payload, at| {
        replay(&mut rebuild, kind, payload, at)
    })
    .await
    .map_err(|e| e.to_string())?;
    let budget = config.cache_bytes / config.cores as u64;
    let (table, registry) = rebuild
        .finish(budget, crate::clock::now_ms())
        .map_err(|e| format!("the log is inconsistent: {e}"))?;
    let r = &recovered.report;
    crate::info!(
        shard = index,
        "recovered {} records ({} bytes) from {} segments in {} ms: {} streams, {} buckets{}{}",
        r.records,
        r.bytes,
        r.segments,
        r.elapsed.as_millis(),
        table.len(),
        registry.len(),
        if r.duplicates > 0 {
            format!(", {} duplicate records skipped", r.duplicates)
        } else {
            String::new()
        },
        match r.torn {
            Some((end, dropped)) => format!(
                ", torn tail at segment {} byte {} ({dropped} records of an unacknowledged batch dropped)",
                end.segment, end.pos
            ),
            None => String::new(),
        },
    );
    Ok((recovered, table, registry, storage))
}

/// Hands pages this thread freed back to the kernel: the allocator,
/// mimalloc, keeps them in the thread's heap until it allocates again, so
/// a shard gone quiet after a burst (large replies, say) would otherwise
/// stay at its peak resident size.
pub fn return_freed_memory(force: bool) {
    // SAFETY: mi_collect only walks the allocator's own heaps (this
    // thread's and abandoned ones); it takes no pointers from us.
    unsafe {
        libmimalloc_sys::mi_collect(force);
    }
}

/// Recovers the shard, takes part in the registry exchange, opens the log.
/// `None` when startup must stop (the reason was printed or reported).
pub async fn start(
    index: usize,
    config: &Config,
    dir: std::path::PathBuf,
    startup: Startup,
) -> Option<Ready> {
    let began = std::time::Instant::now();
    let legacy_access = (!crate::datadir::access_logged(&dir)).then(|| dir.clone());
    let recovered = recover(index, config, dir, legacy_access.is_some()).await;
    let recovery = began.elapsed();
    let (recovered, mut table, registry, storage) = match recovered {
        Ok(parts) => parts,
        Err(message) => {
            let _ = startup.report.send((index, Err(message)));
            return None;
        }
    };
    // The log opens for appending (its next segment preallocated) before
    // the shard reports: a shard that cannot write must fail the startup,
    // not leave the process ready with part of the keyspace unserved.
    let storage_for_reads = storage.clone();
    let appender = Appender::open(
        storage,
        config.segment_bytes,
        recovered.end,
        recovered.tail,
        recovered.scrub_to,
    )
    .await;
    let appender = match appender {
        Ok(appender) => appender,
        Err(e) => {
            let message = format!("cannot open the log for appending: {e}");
            let _ = startup.report.send((index, Err(message)));
            return None;
        }
    };
    let _ = startup.report.send((index, Ok(registry.clone())));
    // Blocking is fine here: no request is served yet, and the log's
    // background segment preparation (just spawned) can wait for it.
    let union = startup.union.recv().ok().flatten()?;
    table.publish_all();
    table.set_index_budget(config.max_index_bytes / config.cores as u64);
    table.set_producer_limits(config.producer_limits());
    // Recovery's scratch maps (records placed, images) are freed by now:
    // resident memory should reflect the streams kept, not replay's peak.
    return_freed_memory(true);
    let buckets = registry
        .iter()
        .map(|(id, &created_at_ms)| {
            (
                id.clone(),
                Bucket {
                    created_at_ms,
                    frozen: false,
                },
            )
        })
        .collect();
    let missing = union
        .into_iter()
        .filter(|(id, _)| !registry.contains_key(id))
        .collect();
    Some(Ready {
        table,
        buckets,
        missing,
        appender,
        storage: storage_for_reads,
        next_seq: recovered.next_seq,
        recovery,
        legacy_access,
    })
}

/// The main thread's side: gathers every shard's registry and sends back
/// the union, or aborts everyone if a shard failed.
pub fn coordinate(
    reports: mpsc::Receiver<Report>,
    unions: &[mpsc::Sender<Option<Registry>>],
) -> Result<(), String> {
    let mut union = Registry::new();
    let mut failures = Vec::new();
    for _ in 0..unions.len() {
        match reports.recv() {
            Ok((_, Ok(registry))) => union.extend(registry),
            Ok((index, Err(message))) => failures.push(format!("shard {index}: {message}")),
            Err(_) => failures.push("a shard stopped during recovery".to_string()),
        }
    }
    let answer = failures.is_empty().then_some(union);
    for sender in unions {
        let _ = sender.send(answer.clone());
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures.join("\n"))
    }
}
