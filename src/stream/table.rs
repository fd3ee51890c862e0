//! The per-shard stream table and `apply`: the deterministic transition
//! function shared by the live commit path and recovery.
//!
//! Commands are applied to the head state when decided (so the next
//! decision builds on them) and made visible to readers once durable
//! (`publish`). A command whose commit fails is rolled back with the `Undo`
//! that `apply` returned.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ops::Bound;

use bytes::Bytes;
use xxhash_rust::xxh3::xxh3_64;

use super::command::{Command, NewStream, ProducerWrite};
use super::state::{ProducerState, Stream, WriteRange};
pub use super::undo::{Undo, WriteUndo};

pub struct Table {
    /// Ordered by key, so a bucket's streams (`{bucket}/{stream}`) are one
    /// range: listings and scans cost what they return, and a long scan
    /// can resume after its last key. Boxed: a B-tree node holds eleven
    /// values and is a third empty on average, and a `Stream` is hundreds
    /// of bytes (at ~570, 100,000 idle streams: 146 MB resident inline,
    /// 103 MB boxed).
    pub(super) streams: BTreeMap<String, Box<Stream>>,
    pub(super) cache: CacheBudget,
    /// A fork's inherited data, logged but not yet part of a stream:
    /// extents and message ends by the fork's incarnation.
    pub(super) staged: HashMap<u64, super::fork::Staged>,
    /// How many forks of this shard read from each source incarnation.
    pub(super) fork_refs: HashMap<u64, usize>,
    /// Index memory of all streams and its limit (`budget.rs`).
    pub(super) index_used: u64,
    /// What this shard's replica of the bucket registry takes of it.
    pub(super) registry_bytes: u64,
    pub(super) index_budget: u64,
    pub(super) producer_limits: super::budget::ProducerLimits,
    /// When the last deleted incarnation of each recently deleted key was
    /// created: a re-create in that same millisecond would otherwise get
    /// the same incarnation id (`incarnation_id` hashes key and time), and
    /// the old incarnation's pending effects would land on the new one.
    retired: HashMap<String, u64>,
    /// The size at which `retired` is pruned next.
    retired_prune_at: usize,
    /// Responses in flight that pin an incarnation's log locations
    /// (`pins.rs`), by incarnation.
    pub(super) read_pins: HashMap<u64, super::pins::Pins>,
    /// The last pin token handed out.
    pub(super) pin_tokens: u64,
}

/// Retired keys kept before the oldest are pruned (a re-create can only
/// collide within the millisecond its predecessor was created).
const RETIRED_KEEP: usize = 4096;

impl Default for Table {
    fn default() -> Self {
        Table::with_cache_budget(u64::MAX)
    }
}

/// The per-shard bound on cached stream bytes: committed chunks are
/// evicted oldest first (by commit order) once the budget is exceeded.
pub(super) struct CacheBudget {
    budget: u64,
    /// Located (evictable) cached bytes of existing streams.
    used: u64,
    /// Committed chunks in commit order: (stream id, bytes).
    fifo: VecDeque<(u64, u64)>,
    /// Stream id -> key, to find a chunk's stream.
    pub(super) keys: HashMap<u64, String>,
}

/// What `apply` did, for the shard to publish once the command is durable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Applied {
    pub key: String,
    /// The incarnation the command changed (0 for a delete).
    pub stream_id: u64,
    /// The stream's head tail and closure right after the command.
    pub tail: u64,
    pub closed: bool,
    /// Stream offset and length of the data the command added.
    pub data_start: u64,
    pub data_len: u64,
    /// A retention point this command set (its data before can go).
    pub retain: Option<u64>,
}

impl Table {
    pub fn with_cache_budget(budget: u64) -> Table {
        let cache = CacheBudget {
            budget,
            used: 0,
            fifo: VecDeque::new(),
            keys: HashMap::new(),
        };
        Table {
            streams: BTreeMap::new(),
            cache,
            staged: HashMap::new(),
            fork_refs: HashMap::new(),
            index_used: 0,
            registry_bytes: 0,
            index_budget: u64::MAX,
            producer_limits: Default::default(),
            retired: HashMap::new(),
            retired_prune_at: RETIRED_KEEP,
            read_pins: HashMap::new(),
            pin_tokens: 0,
        }
    }

    /// The creation time to stamp on a new incarnation of `key` decided at
    /// `now_ms`: later than its deleted predecessor's and than the stream
    /// the key holds now (an expired one a create replaces, or one created
    /// while a fork of the key copied), so their ids differ. The command
    /// carries it, so recovery derives the same id.
    pub fn create_stamp(&self, key: &str, now_ms: u64) -> u64 {
        let retired = self.retired.get(key).copied();
        let live = self.streams.get(key).map(|s| s.created_at_ms);
        match retired.max(live) {
            Some(previous) if previous >= now_ms => previous + 1,
            _ => now_ms,
        }
    }

    /// Claims `created_at_ms` (from `create_stamp`) for an incarnation of
    /// `key` not yet applied: a fork, which copies before its FORK record
    /// commits. Another create or fork of the key decided in the same
    /// millisecond then gets a later stamp, so no two share an id (and a
    /// staging area, or RELOCATE records that recovery would place).
    pub fn reserve_stamp(&mut self, key: &str, created_at_ms: u64) {
        self.retire(key, created_at_ms);
    }

    fn retire(&mut self, key: &str, created_at_ms: u64) {
        if self.retired.len() >= self.retired_prune_at {
            // Only a stamp within a millisecond of a new create's can
            // collide with it, and the newest stamp known stands for now:
            // keep the last second's (a fork's reservation among them;
            // pruned by a deleted stream's old creation time, or cleared,
            // they were lost). Pruning again waits for the map to double.
            let newest = self.retired.values().copied().max().unwrap_or(0);
            let horizon = newest.max(created_at_ms).saturating_sub(1000);
            self.retired.retain(|_, created| *created >= horizon);
            self.retired_prune_at = RETIRED_KEEP.max(2 * self.retired.len());
        }
        self.retired.insert(key.to_string(), created_at_ms);
    }

    /// Adds a stream rebuilt by recovery (durable, nothing cached).
    pub fn restore(&mut self, key: String, stream: Stream) {
        self.count_fork(&stream, true);
        self.cache.keys.insert(stream.id, key.clone());
        self.streams.insert(key.clone(), Box::new(stream));
        self.count_index(0, &key);
    }

    /// Points the extent of `key`'s incarnation `stream_id` that starts at
    /// `start` at its new place (the cleaner moved it).
    pub fn relocate(
        &mut self,
        key: &str,
        stream_id: u64,
        start: u64,
        location: (u64, u64),
    ) -> bool {
        // A move may unpack a chunk of extents: the index grows, and counts.
        let before = self.footprint_of(key);
        let moved = match self.streams.get_mut(key).filter(|s| s.id == stream_id) {
            Some(stream) => stream.data.relocate(start, location.0, location.1),
            None => false,
        };
        self.count_index(before, key);
        moved
    }

    /// Every stream, for the cleaner.
    pub fn iter(&self) -> impl Iterator<Item = (&String, &Stream)> {
        self.streams.iter().map(|(key, stream)| (key, &**stream))
    }

    /// Cached bytes that eviction may drop (committed data).
    pub fn cached_bytes(&self) -> u64 {
        self.cache.used
    }

    pub fn get(&self, key: &str) -> Option<&Stream> {
        self.streams.get(key).map(|stream| &**stream)
    }

    /// The stream as readers may see it: only once its create is durable,
    /// and not once it is soft-deleted.
    pub fn get_visible(&self, key: &str) -> Option<&Stream> {
        self.get(key).filter(|s| s.visible && !s.soft_deleted)
    }

    /// `key`'s visible stream if it is still the incarnation `id`.
    pub fn get_incarnation(&self, key: &str, id: u64) -> Option<&Stream> {
        self.get_visible(key).filter(|s| s.id == id)
    }

    /// `get_incarnation` as a live reader waiting on it sees it at
    /// `now_ms`: past its `Stream-Expires-At` it is gone (PROTOCOL.md
    /// §5.1), though not reaped yet (waiting slides only a `Stream-TTL`).
    pub fn get_waited_on(&self, key: &str, id: u64, now_ms: u64) -> Option<&Stream> {
        self.get_incarnation(key, id)
            .filter(|s| !s.past_expires_at(now_ms))
    }

    pub fn len(&self) -> usize {
        self.streams.len()
    }

    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }

    /// The streams whose key starts with `prefix`, in key order.
    pub fn keys_with_prefix<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = (&'a String, &'a Stream)> {
        self.keys_after(prefix, None)
    }

    /// The streams whose key starts with `prefix` and (when given) sorts
    /// after `after`, in key order: a scan resumes where the last ended.
    pub fn keys_after<'a>(
        &'a self,
        prefix: &'a str,
        after: Option<&str>,
    ) -> impl Iterator<Item = (&'a String, &'a Stream)> {
        let from = match after {
            Some(after) if after >= prefix => Bound::Excluded(after.to_string()),
            _ => Bound::Included(prefix.to_string()),
        };
        self.streams
            .range::<String, _>((from, Bound::Unbounded))
            .take_while(move |(k, _)| k.starts_with(prefix))
            .map(|(key, stream)| (key, &**stream))
    }

    /// Records a read or write access: `Stream-TTL` slides from here. Only
    /// some are logged (`Command::Touch`, `Stream::logged_access_ms`).
    pub fn touch(&mut self, key: &str, now_ms: u64) {
        if let Some(stream) = self.streams.get_mut(key) {
            stream.accessed(now_ms, false);
        }
    }

    /// Applies one decided command to the head state. Commands were
    /// validated by `protocol` against this same state, so one that no
    /// longer fits is a bug.
    pub fn apply(&mut self, command: Command) -> (Applied, Undo) {
        let before = self.footprint_of(command.key());
        let (applied, undo) = self.apply_untracked(command);
        self.count_index(before, &applied.key);
        (applied, undo)
    }

    fn apply_untracked(&mut self, command: Command) -> (Applied, Undo) {
        match command {
            Command::Create(_) => self.apply_create(command),
            Command::Fork { .. } => self.apply_fork(command),
            Command::SoftDelete { key, stream_id } => {
                let stream = self
                    .streams
                    .get_mut(&key)
                    .expect("soft delete of a missing stream");
                assert_eq!(stream.id, stream_id, "soft delete of another incarnation");
                let undo = WriteUndo::capture(&key, stream, None);
                stream.soft_deleted = true;
                let tail = stream.head_tail();
                (applied(&key, stream, tail), Undo::Write(Box::new(undo)))
            }
            Command::Append {
                key,
                stream_id,
                start,
                data,
                producer,
                stream_seq,
                close,
                now_ms,
            } => {
                let stream = self
                    .streams
                    .get_mut(&key)
                    .expect("append to a missing stream");
                assert!(!stream.closed, "append to a closed stream");
                assert_eq!(
                    (stream.id, stream.head_tail()),
                    (stream_id, start),
                    "append decided on other state"
                );
                let undo = WriteUndo::capture(&key, stream, producer.as_ref());
                let data_start = stream.head_tail();
                let records_before = stream.messages.next();
                push_data(stream, data);
                let records_next = stream.messages.next();
                let range = WriteRange {
                    start: data_start,
                    end: stream.head_tail(),
                    records: u32::try_from(records_next - records_before)
                        .expect("an append's records fit u32"),
                    records_next: Some(records_next),
                };
                record_producer(stream, producer.as_ref(), Some(range));
                if stream_seq.is_some() {
                    stream.stream_seq = stream_seq;
                }
                if close {
                    stream.closed = true;
                    stream.closed_by = producer.map(Box::new);
                }
                stream.last_write_ms = now_ms;
                stream.accessed(now_ms, true);
                (
                    applied(&key, stream, data_start),
                    Undo::Write(Box::new(undo)),
                )
            }
            Command::Close {
                key,
                stream_id,
                producer,
                now_ms,
            } => {
                let stream = self
                    .streams
                    .get_mut(&key)
                    .expect("close of a missing stream");
                assert_eq!(stream.id, stream_id, "close decided on another incarnation");
                let undo = WriteUndo::capture(&key, stream, producer.as_ref());
                record_producer(stream, producer.as_ref(), None);
                if !stream.closed {
                    stream.closed = true;
                    stream.closed_by = producer.map(Box::new);
                }
                stream.accessed(now_ms, true);
                let tail = stream.head_tail();
                (applied(&key, stream, tail), Undo::Write(Box::new(undo)))
            }
            Command::Retain {
                key,
                stream_id,
                offset,
                first_record,
            } => {
                let stream = self
                    .streams
                    .get_mut(&key)
                    .expect("retention of a missing stream");
                assert_eq!(
                    stream.id, stream_id,
                    "retention decided on another incarnation"
                );
                let undo = WriteUndo::capture(&key, stream, None);
                assert_eq!(
                    stream.messages.ordinal_at(offset),
                    Some(first_record),
                    "retention decided on another message boundary"
                );
                stream.retained = offset;
                stream.first_record = first_record;
                let tail = stream.head_tail();
                let done = Applied {
                    retain: Some(offset),
                    ..applied(&key, stream, tail)
                };
                (done, Undo::Write(Box::new(undo)))
            }
            Command::Snapshot {
                key,
                stream_id,
                snapshot,
            } => {
                let stream = self
                    .streams
                    .get_mut(&key)
                    .expect("snapshot of a missing stream");
                assert_eq!(
                    stream.id, stream_id,
                    "snapshot decided on another incarnation"
                );
                let mut undo = WriteUndo::capture(&key, stream, None);
                undo.snapshot = Some(stream.snapshot.take());
                stream.snapshot = Some(Box::new(snapshot));
                let tail = stream.head_tail();
                (applied(&key, stream, tail), Undo::Write(Box::new(undo)))
            }
            Command::SetAttrs {
                key,
                stream_id,
                attrs,
            } => {
                let stream = self
                    .streams
                    .get_mut(&key)
                    .expect("attrs of a missing stream");
                assert_eq!(stream.id, stream_id, "attrs decided on another incarnation");
                let mut undo = WriteUndo::capture(&key, stream, None);
                undo.attrs = Some(std::mem::replace(&mut stream.attrs, attrs));
                let tail = stream.head_tail();
                (applied(&key, stream, tail), Undo::Write(Box::new(undo)))
            }
            Command::Touch {
                key,
                stream_id,
                now_ms,
            } => {
                let stream = self
                    .streams
                    .get_mut(&key)
                    .expect("touch of a missing stream");
                assert_eq!(stream.id, stream_id, "touch decided on another incarnation");
                let undo = WriteUndo::capture(&key, stream, None);
                stream.accessed(now_ms, true);
                let tail = stream.head_tail();
                (applied(&key, stream, tail), Undo::Write(Box::new(undo)))
            }
            Command::Delete { key, stream_id } => {
                let matches = self.streams.get(&key).is_some_and(|s| s.id == stream_id);
                let removed = matches.then(|| self.streams.remove(&key)).flatten();
                if let Some(stream) = &removed {
                    self.cache.forget(stream);
                    self.count_fork(stream, false);
                    self.retire(&key, stream.created_at_ms);
                }
                let done = Applied {
                    key: key.clone(),
                    stream_id: 0,
                    tail: 0,
                    closed: false,
                    data_start: 0,
                    data_len: 0,
                    retain: None,
                };
                (
                    done,
                    Undo::Delete {
                        key,
                        stream: removed,
                    },
                )
            }
        }
    }

    pub(super) fn apply_create(&mut self, command: Command) -> (Applied, Undo) {
        let Command::Create(NewStream {
            key,
            content_type,
            ttl_secs,
            expires_at,
            expires_at_ms,
            closed,
            data,
            now_ms,
            attrs,
        }) = command
        else {
            unreachable!("apply_create takes Create only");
        };
        assert!(
            !self.streams.contains_key(&key),
            "create over an existing stream"
        );
        let json = crate::protocol::content_type::is_json(&content_type);
        let mut stream = Stream {
            id: incarnation_id(&key, now_ms),
            content_type,
            json,
            ttl_secs,
            expires_at,
            expires_at_ms,
            created_at_ms: now_ms,
            last_access_ms: now_ms,
            logged_access_ms: now_ms,
            last_write_ms: now_ms,
            closed,
            closed_by: None,
            data: Default::default(),
            messages: Default::default(),
            first_record: 0,
            stream_seq: None,
            producers: Default::default(),
            visible: false,
            visible_tail: 0,
            visible_closed: false,
            attrs,
            snapshot: None,
            retained: 0,
            fork: None,
            soft_deleted: false,
        };
        push_data(&mut stream, data.into());
        let done = applied(&key, &stream, 0);
        self.cache.keys.insert(stream.id, key.clone());
        self.streams.insert(key.clone(), Box::new(stream));
        (done, Undo::Create { key })
    }

    /// Takes back one applied command (newest first when several).
    pub fn undo(&mut self, undo: Undo) {
        let key = match &undo {
            Undo::Create { key } | Undo::Delete { key, .. } => key.clone(),
            Undo::Write(w) => w.key.clone(),
        };
        let before = self.footprint_of(&key);
        self.undo_untracked(undo);
        self.count_index(before, &key);
    }

    fn undo_untracked(&mut self, undo: Undo) {
        match undo {
            Undo::Create { key } => {
                if let Some(stream) = self.streams.remove(&key) {
                    self.cache.keys.remove(&stream.id);
                    self.count_fork(&stream, false);
                }
            }
            Undo::Write(w) => {
                if let Some(stream) = self.streams.get_mut(&w.key) {
                    w.restore(stream);
                }
            }
            Undo::Delete { key, stream } => {
                if let Some(stream) = stream {
                    self.cache.remember(&key, &stream);
                    self.count_fork(&stream, true);
                    self.streams.insert(key, stream);
                }
            }
        }
    }

    /// Makes a durable command visible to readers; `location` is where its
    /// data landed in the log (segment, file position). Returns whether
    /// readers of the stream must be woken.
    pub fn publish(&mut self, applied: &Applied, location: Option<(u64, u64)>) -> bool {
        let before = self.footprint_of(&applied.key);
        let wake = self.publish_untracked(applied, location);
        self.count_index(before, &applied.key);
        wake
    }

    fn publish_untracked(&mut self, applied: &Applied, location: Option<(u64, u64)>) -> bool {
        let Some(stream) = self.streams.get_mut(&applied.key) else {
            return true;
        };
        if stream.id != applied.stream_id {
            return false;
        }
        stream.visible = true;
        if let Some(offset) = applied.retain {
            // Locations a pinned response still reads stay (`pins.rs`).
            let drop_to = match self.read_pins.get_mut(&stream.id) {
                Some(pins) => pins.commit_retention(offset),
                None => offset,
            };
            stream.data.drop_before(drop_to);
            stream.messages.drop_before(offset);
        }
        stream.visible_tail = stream.visible_tail.max(applied.tail);
        stream.visible_closed |= applied.closed;
        if let (Some((segment, pos)), true) = (location, applied.data_len > 0) {
            stream
                .data
                .locate(applied.data_start, applied.data_len, segment, pos);
            self.cache.used += applied.data_len;
            self.cache.fifo.push_back((stream.id, applied.data_len));
        }
        true
    }

    /// Evicts committed cached bytes, oldest first, down to the budget.
    pub fn enforce_cache_budget(&mut self) {
        while self.cache.used > self.cache.budget {
            let Some((id, bytes)) = self.cache.fifo.pop_front() else {
                break;
            };
            let stream = self
                .cache
                .keys
                .get(&id)
                .and_then(|key| self.streams.get_mut(key));
            let Some(stream) = stream.filter(|s| s.id == id) else {
                continue;
            };
            let evicted = stream.data.evict_front();
            debug_assert_eq!(evicted, Some(bytes), "chunks are evicted in commit order");
            self.cache.used -= evicted.unwrap_or(0);
        }
    }

    /// After recovery everything applied is durable.
    pub fn publish_all(&mut self) {
        for stream in self.streams.values_mut() {
            stream.visible = true;
            stream.visible_tail = stream.head_tail();
            stream.visible_closed = stream.closed;
        }
    }
}

impl CacheBudget {
    /// A deleted stream's cached bytes are freed with it.
    fn forget(&mut self, stream: &Stream) {
        let located = stream
            .data
            .located_end()
            .saturating_sub(stream.data.cache_start());
        self.used -= located.min(self.used);
        self.keys.remove(&stream.id);
    }

    /// A restored stream's cached bytes count again.
    fn remember(&mut self, key: &str, stream: &Stream) {
        self.used += stream
            .data
            .located_end()
            .saturating_sub(stream.data.cache_start());
        self.keys.insert(stream.id, key.to_string());
    }
}

/// Stable across restarts (ETags survive them) and different for every
/// incarnation of a key.
pub fn incarnation_id(key: &str, created_at_ms: u64) -> u64 {
    let mut bytes = key.as_bytes().to_vec();
    bytes.extend_from_slice(&created_at_ms.to_le_bytes());
    xxh3_64(&bytes).max(1)
}

pub(super) fn applied(key: &str, stream: &Stream, data_start: u64) -> Applied {
    let tail = stream.head_tail();
    Applied {
        key: key.to_string(),
        stream_id: stream.id,
        tail,
        closed: stream.closed,
        data_start,
        data_len: tail - data_start,
        retain: None,
    }
}

/// Remembers a producer's last write and, for an append, the offsets it
/// wrote (a retry answers them).
fn record_producer(
    stream: &mut Stream,
    producer: Option<&ProducerWrite>,
    range: Option<WriteRange>,
) {
    let Some(p) = producer else { return };
    let mut recent = match stream.producers.get(&p.id) {
        Some(state) if state.epoch == p.epoch => state.recent,
        _ => Default::default(),
    };
    if let Some(range) = range {
        recent.record(p.seq, range);
    }
    let state = ProducerState {
        epoch: p.epoch,
        last_seq: p.seq,
        recent,
    };
    stream.producers.insert(p.id.clone(), state);
}

/// Appends canonical bytes and records message boundaries: one per line on
/// JSON streams, one per append otherwise.
pub(super) fn push_data(stream: &mut Stream, data: Bytes) {
    if data.is_empty() {
        return;
    }
    let base = stream.head_tail();
    if stream.json {
        let ends = super::newlines::positions(&data).map(|newline| base + newline as u64 + 1);
        stream.messages.extend(ends);
    } else {
        stream.messages.push(base + data.len() as u64);
    }
    stream.data.push(data);
    assert_eq!(
        stream.messages.end(),
        stream.head_tail(),
        "canonical JSON ends every message with a newline"
    );
}

#[cfg(test)]
#[path = "table_tests.rs"]
mod tests;
