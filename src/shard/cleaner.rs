//! The cleaner (issue 3 "Space comes back"): deleted and expired streams
//! leave segments partly dead. Periodically the cleaner picks a sealed
//! segment holding little live data, copies what still matters to the head
//! of the log, and deletes the file once the copies are committed:
//!
//! - bytes of live streams located in it, as RELOCATE records (their extents
//!   move when those commit);
//! - an IMAGE of every live stream that has any record in it (so a create,
//!   close or producer update stored only there is not lost);
//! - the creates of its buckets that still exist;
//! - its stream and bucket deletes, when an older segment remains (there
//!   they would otherwise resurrect what they removed), except deletes of
//!   an incarnation that is live again (a re-sharding logs the drop of the
//!   streams it moved away, and may move them back later).
//!
//! A victim whose copies would not free at least half of it (a segment of
//! creates and images holds no stream bytes, yet copying it frees nothing)
//! is left in place and looked at again after `RECONSIDER_PASSES` passes.
//!
//! Each pass also deletes expired streams no request has named since,
//! sweeps snapshot blobs no stream refers to any more and collects
//! soft-deleted streams without forks; it skips cleaning while a
//! fork copy is in flight (its staged records belong to no stream yet).
//!
//! Crash safety: the segment is removed only after the copies are durable;
//! recovery reads both copies the same way (data is placed by incarnation
//! and offset, the later IMAGE wins), so a crash at any point is harmless.

use std::collections::{BTreeSet, HashMap};
use std::rc::Rc;
use std::time::Duration;

use super::Shard;
use super::commit::Effect;
use crate::log::format::{self, Decoded};
use crate::log::recovery::read_segment;
use crate::log::storage::{DirectStorage, Storage};
use crate::metrics::Counter;
use crate::stream::Command;
use crate::stream::codec::{self, Entry};
use crate::stream::rebuild::{image_of, ring_budget};

/// A sealed segment is cleaned once less than this share of it is live.
const LIVE_SHARE_LIMIT: f64 = 0.5;

/// Passes after which segments found not worth cleaning are looked at
/// again (deletes since may have made their images and tombstones dead).
const RECONSIDER_PASSES: u32 = 64;

pub async fn run(shard: Rc<Shard>, storage: Rc<DirectStorage>) {
    let interval = Duration::from_millis(shard.config.clean_interval_ms);
    let mut not_worth_it = BTreeSet::new();
    let mut passes = 0u32;
    let mut collected = std::time::Instant::now();
    while !shard.stopping.get() {
        monoio::time::sleep(interval).await;
        reap_expired(&shard).await;
        super::snapshot::sweep_when_settled(&shard).await;
        super::fork::sweep(&shard);
        if collected.elapsed() >= COLLECT_EVERY {
            super::startup::return_freed_memory(false);
            collected = std::time::Instant::now();
        }
        passes += 1;
        if passes.is_multiple_of(RECONSIDER_PASSES) {
            not_worth_it.clear();
        }
        while let Some(victim) = choose_victim(&shard, &storage, &not_worth_it).await {
            if shard.table.borrow().has_staged() {
                break;
            }
            match clean(&shard, &storage, victim).await {
                Ok(Cleaned::NotWorthIt) => {
                    not_worth_it.insert(victim);
                }
                Ok(Cleaned::Removed) => {
                    shard.metrics.add(Counter::SegmentsCleaned, 1);
                    crate::info!(shard = shard.index, "cleaned segment {victim}")
                }
                Err(e) => {
                    shard.metrics.add(Counter::CleanFailures, 1);
                    crate::error!(shard = shard.index, "cleaning segment {victim} failed: {e}");
                    break;
                }
            }
        }
    }
}

/// Streams reaped between two yields to the shard's other tasks.
const REAP_CHUNK: usize = 1024;

/// Deletes the streams whose TTL or Expires-At has passed (PROTOCOL.md
/// §5.1) that no request has named since: a request reaps only the stream
/// it names, and an expired stream nobody names again must not hold the
/// index budget, memory and disk (nor its soft-deleted sources) forever.
async fn reap_expired(shard: &Shard) {
    let now_ms = crate::clock::now_ms();
    let expired: Vec<String> = shard
        .table
        .borrow()
        .iter()
        .filter(|(_, s)| s.is_expired(now_ms))
        .map(|(k, _)| k.clone())
        .collect();
    for (i, key) in expired.iter().enumerate() {
        shard.reap_if_expired(key);
        if (i + 1) % REAP_CHUNK == 0 {
            monoio::time::sleep(Duration::ZERO).await;
        }
    }
}

/// Extents counted between two yields to the shard's other tasks: a
/// stream of millions of appends must not stall commits while the cleaner
/// counts (a 4.5M-extent stream stalled them ~350 ms in one go).
const COUNT_CHUNK: usize = 64 << 10;

/// Bytes located in each segment, counted a chunk at a time. Streams may
/// change between chunks; the counts only choose a victim, which `clean`
/// then copies from the current extents.
async fn live_by_segment(shard: &Shard) -> HashMap<u64, u64> {
    let keys: Vec<String> = shard
        .table
        .borrow()
        .iter()
        .map(|(k, _)| k.clone())
        .collect();
    let mut live = HashMap::new();
    let mut counted = 0;
    for key in keys {
        let mut from = 0;
        loop {
            let done = {
                let table = shard.table.borrow();
                let Some(stream) = table.get(&key) else { break };
                let to = (from + COUNT_CHUNK).min(stream.data.extent_count());
                stream.data.count_live_range(from..to, &mut live);
                counted += to - from;
                from = to;
                to == stream.data.extent_count()
            };
            if counted >= COUNT_CHUNK {
                counted = 0;
                monoio::time::sleep(Duration::ZERO).await;
            }
            if done {
                break;
            }
        }
    }
    live
}

/// The sealed segment with the least live data, if it is worth cleaning.
async fn choose_victim(
    shard: &Shard,
    storage: &DirectStorage,
    skip: &BTreeSet<u64>,
) -> Option<u64> {
    let head = shard.head_segment.get();
    let sealed: Vec<u64> = storage
        .list()
        .ok()?
        .into_iter()
        .filter(|&s| s < head && !skip.contains(&s))
        .collect();
    if sealed.is_empty() {
        return None;
    }
    let live = live_by_segment(shard).await;
    let limit = (shard.config.segment_bytes as f64 * LIVE_SHARE_LIMIT) as u64;
    sealed
        .into_iter()
        .map(|s| (live.get(&s).copied().unwrap_or(0), s))
        .filter(|&(bytes, _)| bytes < limit)
        .min()
        .map(|(_, s)| s)
}

/// What a segment holds that may still matter.
#[derive(Default)]
struct Contents {
    /// Keys of stream records.
    keys: BTreeSet<String>,
    /// Stream deletes: (key, incarnation).
    deletes: Vec<(String, u64)>,
    bucket_creates: BTreeSet<String>,
    bucket_deletes: Vec<String>,
    /// Bytes of records in the segment.
    used: usize,
}

fn contents(data: &[u8]) -> Contents {
    let mut found = Contents::default();
    let mut pos = 0;
    while let Decoded::Record { record, framed_len } = format::decode(&data[pos..]) {
        pos += framed_len;
        found.used = pos;
        let Ok(entry) = codec::decode(record.kind, record.payload) else {
            continue;
        };
        match entry {
            Entry::Stream(Command::Delete { key, stream_id }) => {
                found.deletes.push((key, stream_id))
            }
            Entry::Stream(command) => {
                found.keys.insert(command.key().to_string());
            }
            Entry::Relocate { key, .. } => {
                found.keys.insert(key);
            }
            Entry::Image(image) => {
                found.keys.insert(image.key);
            }
            Entry::BucketCreate { bucket, .. } => {
                found.bucket_creates.insert(bucket);
            }
            Entry::BucketDelete { bucket } => found.bucket_deletes.push(bucket),
        }
    }
    found
}

/// The copies that make `victim` unnecessary.
fn copies(
    shard: &Shard,
    victim: u64,
    data: &[u8],
    found: &Contents,
    older_exists: bool,
) -> Vec<(Entry, Effect)> {
    let table = shard.table.borrow();
    let mut out = Vec::new();
    for key in &found.keys {
        let Some(stream) = table.get(key) else {
            continue;
        };
        for extent in stream.data.extents_in_segment(victim) {
            let bytes = data[extent.pos as usize..(extent.pos + extent.len) as usize].to_vec();
            let entry = Entry::Relocate {
                key: key.clone(),
                stream_id: stream.id,
                start: extent.start,
                data: bytes,
            };
            let effect = Effect::Relocate {
                key: key.clone(),
                stream_id: stream.id,
                start: extent.start,
            };
            out.push((entry, effect));
        }
        out.push((
            Entry::Image(Box::new(image_of(
                key,
                stream,
                ring_budget(shard.config.segment_bytes),
            ))),
            Effect::Nothing,
        ));
    }
    if older_exists {
        // A tombstone of an incarnation that is live again (a re-sharding
        // moved it away, its drop was logged here, and moved it back) is
        // superseded: copied to the head it would delete the stream.
        let live = |key: &String, id: u64| table.get(key).is_some_and(|s| s.id == id);
        for (key, stream_id) in found.deletes.iter().filter(|(k, id)| !live(k, *id)) {
            let tombstone = Command::Delete {
                key: key.clone(),
                stream_id: *stream_id,
            };
            out.push((Entry::Stream(tombstone), Effect::Nothing));
        }
    }
    let registry = shard.buckets.borrow();
    for bucket in &found.bucket_creates {
        if let Some(state) = registry.get(bucket) {
            let entry = Entry::BucketCreate {
                bucket: bucket.clone(),
                created_at_ms: state.created_at_ms,
            };
            out.push((entry, Effect::Nothing));
        }
    }
    for bucket in found
        .bucket_deletes
        .iter()
        .filter(|b| older_exists && !registry.contains_key(*b))
    {
        out.push((
            Entry::BucketDelete {
                bucket: bucket.clone(),
            },
            Effect::Nothing,
        ));
    }
    out
}

/// Whether copying `entries` out of a segment holding `used` bytes of
/// records frees enough: at least the share `LIVE_SHARE_LIMIT` leaves
/// behind. Victims are chosen by live stream bytes alone; a segment full of
/// images, tombstones and bucket records would otherwise be copied to the
/// head again and again, each copy cleaned in turn, without end.
fn worth_copying(entries: &[(Entry, Effect)], used: usize) -> bool {
    let mut scratch = Vec::new();
    let copied: usize = entries
        .iter()
        .map(|(entry, _)| {
            scratch.clear();
            codec::encode(entry, &mut scratch);
            format::framed_len(scratch.len())
        })
        .sum();
    // A segment whose copies are nothing (empty, or all dead) always goes.
    copied == 0 || (copied as f64) < used as f64 * (1.0 - LIVE_SHARE_LIMIT)
}

/// How often the cleaner's pass also returns freed memory to the kernel.
const COLLECT_EVERY: Duration = Duration::from_secs(10);

/// What `clean` did with a victim.
enum Cleaned {
    Removed,
    /// Its copies would be about as large as it: left in place.
    NotWorthIt,
}

async fn clean(shard: &Shard, storage: &DirectStorage, victim: u64) -> std::io::Result<Cleaned> {
    let data = read_segment(storage, victim, shard.config.segment_bytes).await?;
    let found = contents(&data);
    let older_exists = storage.list()?.iter().any(|&s| s < victim);
    let entries = copies(shard, victim, &data, &found, older_exists);
    if !worth_copying(&entries, found.used) {
        return Ok(Cleaned::NotWorthIt);
    }
    if let Some(ticket) = shard.submit_entries(entries) {
        ticket.await.map_err(|e| std::io::Error::other(e.message))?;
    }
    let still_used = shard
        .table
        .borrow()
        .iter()
        .any(|(_, s)| s.data.extents_in_segment(victim).next().is_some());
    if still_used {
        return Err(std::io::Error::other(
            "data still located there after the copies committed",
        ));
    }
    shard.segments.forget(victim);
    storage.remove(victim).await?;
    Ok(Cleaned::Removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bucket_creates(n: usize) -> Vec<(Entry, Effect)> {
        (0..n)
            .map(|i| {
                let entry = Entry::BucketCreate {
                    bucket: format!("bucket-{i:04}"),
                    created_at_ms: 1,
                };
                (entry, Effect::Nothing)
            })
            .collect()
    }

    #[test]
    fn a_victim_must_free_half_of_itself_unless_nothing_is_copied() {
        assert!(worth_copying(&[], 0), "an empty segment goes");
        assert!(worth_copying(&[], 4096), "an all-dead segment goes");
        let one = bucket_creates(1);
        let mut scratch = Vec::new();
        codec::encode(&one[0].0, &mut scratch);
        let framed = format::framed_len(scratch.len());
        assert!(worth_copying(&one, 2 * framed + 8));
        assert!(!worth_copying(&one, 2 * framed), "copies as large as half");
        assert!(
            !worth_copying(&bucket_creates(10), 10 * framed),
            "copies as large as it"
        );
    }
}
