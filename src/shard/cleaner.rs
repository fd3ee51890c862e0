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
use crate::log::segment_reader::SegmentReader;
use crate::log::storage::{DirectStorage, SegmentFile, Storage};
use crate::metrics::Counter;
use crate::stream::codec::{self, Entry};
use crate::stream::data::Extent;
use crate::stream::rebuild::{image_of, ring_budget};
use crate::stream::{Command, Stream};

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
    // The first pass comes at start, the sleep after it: a server
    // restarted sooner than an interval (a crash loop) still reaps what
    // expired and cleans what was deleted, and a fork source an expired
    // fork held is let go.
    while !shard.stopping.get() {
        super::reserve::on_pass(&shard).await;
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
        clean_victims(&shard, &storage, &mut not_worth_it).await;
        monoio::time::sleep(interval).await;
    }
}

/// Cleans sealed segments, least live first, until none is worth it (or
/// a fork copy is in flight, or one fails); returns how many went.
/// `not_worth_it` collects the victims left in place.
pub async fn clean_victims(
    shard: &Shard,
    storage: &DirectStorage,
    not_worth_it: &mut BTreeSet<u64>,
) -> usize {
    let mut removed = 0;
    while let Some(victim) = choose_victim(shard, storage, not_worth_it).await {
        if shard.table.borrow().has_staged() {
            break;
        }
        match clean(shard, storage, victim).await {
            Ok(Cleaned::NotWorthIt) => {
                not_worth_it.insert(victim);
            }
            Ok(Cleaned::Removed) => {
                removed += 1;
                shard.metrics.add(Counter::SegmentsCleaned, 1);
                crate::info!(shard = shard.index, "cleaned segment {victim}")
            }
            // A stop closed the log under the pass: nothing failed.
            Err(_) if shard.stopping.get() => break,
            Err(e) => {
                shard.metrics.add(Counter::CleanFailures, 1);
                crate::error!(shard = shard.index, "cleaning segment {victim} failed: {e}");
                break;
            }
        }
    }
    removed
}

/// The keys of the next `Shard::KEY_CHUNK` streams after `after` that
/// `pick` selects, and the last key looked at (`None`: no more). The
/// passes over every stream go a chunk at a time (2M streams in one go
/// stalled a shard ~0.5 s).
fn next_keys(
    shard: &Shard,
    after: Option<&str>,
    pick: impl Fn(&Stream) -> bool,
) -> (Vec<String>, Option<String>) {
    let mut keys = Vec::new();
    let last = shard.visit_keys("", after, |key, stream| {
        if pick(stream) {
            keys.push(key.clone());
        }
    });
    (keys, last)
}

/// Deletes the streams whose TTL or Expires-At has passed (PROTOCOL.md
/// §5.1) that no request has named since: a request reaps only the stream
/// it names, and an expired stream nobody names again must not hold the
/// index budget, memory and disk (nor its soft-deleted sources) forever.
async fn reap_expired(shard: &Shard) {
    let now_ms = crate::clock::now_ms();
    let mut after = None;
    loop {
        let (expired, last) = next_keys(shard, after.as_deref(), |s| s.is_expired(now_ms));
        for key in &expired {
            shard.reap_if_expired(key);
        }
        let Some(last) = last else { return };
        after = Some(last);
        Shard::yield_to_others().await;
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
    let mut live = HashMap::new();
    let mut after = None;
    loop {
        let (keys, last) = next_keys(shard, after.as_deref(), |_| true);
        count_live(shard, keys, &mut live).await;
        let Some(last) = last else { return live };
        after = Some(last);
        Shard::yield_to_others().await;
    }
}

/// Adds the bytes the streams `keys` locate in each segment to `live`.
async fn count_live(shard: &Shard, keys: Vec<String>, live: &mut HashMap<u64, u64>) {
    let mut counted = 0;
    for key in keys {
        let mut from = 0;
        loop {
            let done = {
                let table = shard.table.borrow();
                let Some(stream) = table.get(&key) else { break };
                let to = (from + COUNT_CHUNK).min(stream.data.extent_count());
                stream.data.count_live_range(from..to, live);
                counted += to - from;
                from = to;
                to == stream.data.extent_count()
            };
            if counted >= COUNT_CHUNK {
                counted = 0;
                Shard::yield_to_others().await;
            }
            if done {
                break;
            }
        }
    }
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
    /// Some record did not decode (a kind this build does not know): the
    /// keys above may then miss a stream whose data is there.
    undecoded: bool,
}

/// What the victim's records name, read through a window; yields every
/// `SCAN_CHUNK_BYTES`.
async fn contents<F: SegmentFile>(reader: &mut SegmentReader<F>) -> std::io::Result<Contents> {
    let mut found = Contents::default();
    let mut scanned = 0;
    loop {
        reader.fill_record(found.used as u64).await?;
        let Decoded::Record { record, framed_len } = format::decode(reader.from(found.used as u64))
        else {
            return Ok(found);
        };
        found.used += framed_len;
        scanned += framed_len;
        let entry = codec::decode(record.kind, record.payload);
        if scanned >= SCAN_CHUNK_BYTES {
            scanned = 0;
            Shard::yield_to_others().await;
        }
        let Ok(entry) = entry else {
            found.undecoded = true;
            continue;
        };
        found.note(entry);
    }
}

impl Contents {
    fn note(&mut self, entry: Entry) {
        match entry {
            Entry::Stream(Command::Delete { key, stream_id }) => {
                self.deletes.push((key, stream_id))
            }
            Entry::Stream(command) => {
                self.keys.insert(command.key().to_string());
            }
            Entry::Relocate { key, .. } => {
                self.keys.insert(key);
            }
            Entry::Image(image) => {
                self.keys.insert(image.key);
            }
            Entry::BucketCreate { bucket, .. } => {
                self.bucket_creates.insert(bucket);
            }
            Entry::BucketDelete { bucket } => self.bucket_deletes.push(bucket),
        }
    }
}

/// A live stream's data in the victim: its extents there, copied as
/// RELOCATE records a part at a time, then its IMAGE.
struct Moving {
    key: String,
    stream_id: u64,
    extents: Vec<Extent>,
}

/// What makes `victim` unnecessary: the data of the live streams with a
/// record in it (their IMAGEs follow it), and its delete and bucket
/// records (taken again as they go, `current`).
async fn plan(
    shard: &Shard,
    victim: u64,
    found: &Contents,
    older_exists: bool,
) -> (Vec<Moving>, Vec<Entry>) {
    let mut moving = Vec::new();
    let mut scanned = 0;
    for key in &found.keys {
        if let Some((stream_id, extents)) = located_in(shard, key, victim, &mut scanned).await {
            moving.push(Moving {
                key: key.clone(),
                stream_id,
                extents,
            });
        }
    }
    let tombstones = found
        .deletes
        .iter()
        .filter(|_| older_exists)
        .map(|(key, id)| {
            Entry::Stream(Command::Delete {
                key: key.clone(),
                stream_id: *id,
            })
        });
    let bucket_creates = found
        .bucket_creates
        .iter()
        .map(|bucket| Entry::BucketCreate {
            bucket: bucket.clone(),
            created_at_ms: 0,
        });
    let bucket_deletes = found.bucket_deletes.iter().filter(|_| older_exists);
    let bucket_deletes = bucket_deletes.map(|bucket| Entry::BucketDelete {
        bucket: bucket.clone(),
    });
    let records = tombstones.chain(bucket_creates).chain(bucket_deletes);
    (moving, records.collect())
}

/// The incarnation of stream `key` and its extents located in `victim`,
/// scanned `COUNT_CHUNK` extents at a time with a yield between (a stream
/// of millions of appends held the shard for hundreds of milliseconds);
/// None when the stream is gone or another incarnation replaced it
/// meanwhile (its records are then in a newer segment). `scanned` counts
/// extents since the last yield, across calls.
async fn located_in(
    shard: &Shard,
    key: &str,
    victim: u64,
    scanned: &mut usize,
) -> Option<(u64, Vec<Extent>)> {
    let (mut id, mut extents, mut from) = (None, Vec::new(), (0, 0));
    loop {
        let next = {
            let table = shard.table.borrow();
            let stream = table.get(key)?;
            if *id.get_or_insert(stream.id) != stream.id {
                return None;
            }
            let (part, next) = stream
                .data
                .extents_in_segment_from(victim, from, COUNT_CHUNK);
            extents.extend(part);
            *scanned += COUNT_CHUNK.min(stream.data.extent_count());
            next
        };
        if *scanned >= COUNT_CHUNK {
            *scanned = 0;
            Shard::yield_to_others().await;
        }
        match next {
            Some(next) => from = next,
            None => return Some((id?, extents)),
        }
    }
}

/// The IMAGE of the stream `key` as it is now, if it is still `stream_id`.
fn image_entry(shard: &Shard, key: &str, stream_id: u64) -> Option<Entry> {
    let table = shard.table.borrow();
    let stream = table.get(key).filter(|s| s.id == stream_id)?;
    let budget = ring_budget(shard.config.segment_bytes);
    Some(Entry::Image(Box::new(image_of(key, stream, budget))))
}

/// `entry` as the shard's state now has it, or `None` when that state no
/// longer needs it. The copies are committed a part at a time, so what
/// rests on state (images, tombstones, bucket records) is taken right
/// before it is submitted: an IMAGE older than a write logged before it
/// would undo that write on recovery.
fn current(shard: &Shard, entry: Entry) -> Option<Entry> {
    let registry = shard.buckets.borrow();
    match entry {
        Entry::Image(image) => image_entry(shard, &image.key, image.stream_id),
        // A tombstone of an incarnation that is live again (a re-sharding
        // moved it away, its drop was logged here, and moved it back) is
        // superseded: copied to the head it would delete the stream.
        Entry::Stream(Command::Delete { key, stream_id }) => {
            let live = shard
                .table
                .borrow()
                .get(&key)
                .is_some_and(|s| s.id == stream_id);
            (!live).then_some(Entry::Stream(Command::Delete { key, stream_id }))
        }
        Entry::BucketCreate { bucket, .. } => {
            let created_at_ms = registry.get(&bucket)?.created_at_ms;
            Some(Entry::BucketCreate {
                bucket,
                created_at_ms,
            })
        }
        Entry::BucketDelete { bucket } => {
            (!registry.contains_key(&bucket)).then_some(Entry::BucketDelete { bucket })
        }
        other => Some(other),
    }
}

/// Framed bytes the copies of `moving` and `records` would take.
fn copied_bytes(shard: &Shard, moving: &[Moving], records: &[Entry]) -> usize {
    let mut scratch = Vec::new();
    let mut framed = |entry: &Entry| {
        scratch.clear();
        codec::encode(entry, &mut scratch);
        scratch.len()
    };
    let mut total = 0;
    for m in moving {
        // A RELOCATE is its key and offsets, then its data (fixed widths).
        let empty = Entry::Relocate {
            key: m.key.clone(),
            stream_id: m.stream_id,
            start: 0,
            data: Vec::new(),
        };
        let base = framed(&empty);
        let data: usize = m
            .extents
            .iter()
            .map(|e| format::framed_len(base + e.len as usize))
            .sum();
        let image =
            image_entry(shard, &m.key, m.stream_id).map_or(0, |i| format::framed_len(framed(&i)));
        total += data + image;
    }
    let records = records.iter().filter_map(|e| current(shard, e.clone()));
    total
        + records
            .map(|e| format::framed_len(framed(&e)))
            .sum::<usize>()
}

/// Copies the moving streams' data out of the victim in file order
/// through a read window, as RELOCATE records in parts of about
/// `COPY_PART_BYTES` each committed before the next, then each stream's
/// IMAGE. (Reading the victim whole held a segment per cleaning shard.)
async fn copy_streams(
    shard: &Shard,
    storage: &DirectStorage,
    victim: u64,
    moving: &[Moving],
) -> std::io::Result<()> {
    let mut reader = SegmentReader::open(storage, victim).await?;
    let mut pieces: Vec<(&Moving, &Extent)> = moving
        .iter()
        .flat_map(|m| m.extents.iter().map(move |extent| (m, extent)))
        .collect();
    pieces.sort_by_key(|(_, extent)| extent.pos);
    let mut part = Vec::new();
    let mut bytes = 0;
    for (i, (m, extent)) in pieces.iter().enumerate() {
        let piece = reader.range(extent.pos, extent.len).await?.to_vec();
        bytes += piece.len();
        part.push(relocation(m, extent.start, piece));
        if bytes >= COPY_PART_BYTES || i + 1 == pieces.len() {
            commit_part(shard, std::mem::take(&mut part)).await?;
            bytes = 0;
        }
    }
    for m in moving {
        let image = image_entry(shard, &m.key, m.stream_id).map(|e| (e, Effect::Nothing));
        commit_part(shard, image.into_iter().collect()).await?;
    }
    Ok(())
}

/// The RELOCATE record of `m`'s bytes from stream offset `start`, and
/// its effect (the extent moves when it commits).
fn relocation(m: &Moving, start: u64, data: Vec<u8>) -> (Entry, Effect) {
    let entry = Entry::Relocate {
        key: m.key.clone(),
        stream_id: m.stream_id,
        start,
        data,
    };
    let effect = Effect::Relocate {
        key: m.key.clone(),
        stream_id: m.stream_id,
        start,
    };
    (entry, effect)
}

/// Commits the victim's delete and bucket records as the state has them.
/// The bucket registry shows a change only once it commits: a
/// BUCKET_CREATE taken while a delete of that bucket is pending would be
/// logged after the delete and undo it (an old BUCKET_DELETE after a
/// pending create likewise), so they are taken when no change is pending,
/// and submitted with no await in between.
async fn commit_records(shard: &Shard, records: Vec<Entry>) -> std::io::Result<()> {
    while shard.commits.bucket_change_pending() {
        barrier(shard).await?;
    }
    let records = records.into_iter().filter_map(|e| current(shard, e));
    commit_part(shard, records.map(|e| (e, Effect::Nothing)).collect()).await
}

/// Waits until everything submitted so far is committed.
async fn barrier(shard: &Shard) -> std::io::Result<()> {
    shard
        .barrier()
        .await
        .map_err(|e| std::io::Error::other(e.message))
}

/// Submits `part` (when not empty) and waits until it is committed.
async fn commit_part(shard: &Shard, part: Vec<(Entry, Effect)>) -> std::io::Result<()> {
    if part.is_empty() {
        return Ok(());
    }
    let submitted = shard.submit_entries(part);
    let ticket = submitted.map_err(|e| std::io::Error::other(e.message))?;
    if let Some(ticket) = ticket {
        ticket.await.map_err(|e| std::io::Error::other(e.message))?;
    }
    Ok(())
}

/// Whether copying `entries` out of a segment holding `used` bytes of
/// records frees enough: at least the share `LIVE_SHARE_LIMIT` leaves
/// behind. Victims are chosen by live stream bytes alone; a segment full of
/// images, tombstones and bucket records would otherwise be copied to the
/// head again and again, each copy cleaned in turn, without end.
fn worth_copying(copied: usize, used: usize) -> bool {
    // A segment whose copies are nothing (empty, or all dead) always goes.
    copied == 0 || (copied as f64) < used as f64 * (1.0 - LIVE_SHARE_LIMIT)
}

/// Data bytes of RELOCATE records submitted together: the writer encodes
/// a submission in one go, and a victim of many small live appends (a
/// RELOCATE each, built at once) stalled the shard ~300 ms. Each part is
/// committed before the next is built.
const COPY_PART_BYTES: usize = 1 << 20;

/// Bytes of the victim scanned between two yields to the shard's other
/// tasks.
const SCAN_CHUNK_BYTES: usize = 4 << 20;

/// How often the cleaner's pass also returns freed memory to the kernel.
const COLLECT_EVERY: Duration = Duration::from_secs(10);

/// What `clean` did with a victim.
enum Cleaned {
    Removed,
    /// Its copies would be about as large as it: left in place.
    NotWorthIt,
}

async fn clean(shard: &Shard, storage: &DirectStorage, victim: u64) -> std::io::Result<Cleaned> {
    // Its window and buffer go before the copy's reader takes its own.
    let found = contents(&mut SegmentReader::open(storage, victim).await?).await?;
    let older_exists = storage.list()?.iter().any(|&s| s < victim);
    let (moving, records) = plan(shard, victim, &found, older_exists).await;
    if !worth_copying(copied_bytes(shard, &moving, &records), found.used) {
        return Ok(Cleaned::NotWorthIt);
    }
    copy_streams(shard, storage, victim, &moving).await?;
    commit_records(shard, records).await?;
    // What made the victim's other data dead (a delete, a retention move)
    // may still be queued: the file goes only once that is durable, or a
    // crash would lose data that recovery still expects there.
    barrier(shard).await?;
    // Only a stream with a record in the victim can have data located
    // there (an extent points at its record); every stream when some
    // record did not decode.
    let keys: Vec<String> = match found.undecoded {
        true => shard
            .table
            .borrow()
            .iter()
            .map(|(k, _)| k.clone())
            .collect(),
        false => found.keys.iter().cloned().collect(),
    };
    let mut still_used = false;
    let mut scanned = 0;
    for key in &keys {
        if let Some((_, extents)) = located_in(shard, key, victim, &mut scanned).await {
            still_used |= !extents.is_empty();
        }
    }
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
        assert!(worth_copying(0, 0), "an empty segment goes");
        assert!(worth_copying(0, 4096), "an all-dead segment goes");
        let one = bucket_creates(1);
        let mut scratch = Vec::new();
        codec::encode(&one[0].0, &mut scratch);
        let framed = format::framed_len(scratch.len());
        assert!(worth_copying(framed, 2 * framed + 8));
        assert!(
            !worth_copying(framed, 2 * framed),
            "copies as large as half"
        );
        assert!(
            !worth_copying(10 * framed, 10 * framed),
            "copies as large as it"
        );
    }
}
