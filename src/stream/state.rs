//! The state of one stream: configuration, data (`data::StreamData`),
//! message boundaries and record ordinals (`records::RecordIndex`, extensions
//! §6.1), closure and producer dedup state (PROTOCOL.md §4, §5.2.1).

use std::collections::HashMap;

use super::data::StreamData;
use super::records::RecordIndex;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerState {
    pub epoch: u64,
    pub last_seq: u64,
    /// Offsets the latest appends of this epoch wrote, so that a retry
    /// answers its original range (extensions §6.3).
    pub recent: RecentWrites,
}

/// How many of a producer's latest appends keep their offsets: enough for
/// the requests a pipelining client has in flight.
pub const RECENT_WRITES: usize = 8;

/// What one append wrote: bytes `[start, end)` and its `records` records,
/// which end before ordinal `records_next` (extensions §6.3: a retry
/// answers both ranges, also once retention dropped the index entries).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteRange {
    pub start: u64,
    pub end: u64,
    pub records: u32,
    /// Unknown after a restart until the rebuilt index tells it
    /// (`RecentWrites::fill_ordinals`).
    pub records_next: Option<u64>,
}

impl WriteRange {
    /// The record ordinals `[start, next)` the append created.
    pub fn ordinals(&self) -> Option<(u64, u64)> {
        let next = self.records_next?;
        Some((next.checked_sub(u64::from(self.records))?, next))
    }
}

/// A producer's latest appends, by sequence (a ring indexed by
/// `seq % RECENT_WRITES`). A sequence whose slot was reused, or whose
/// record was cleaned away before a restart, is unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecentWrites {
    slots: [(u64, WriteRange); RECENT_WRITES],
}

impl Default for RecentWrites {
    fn default() -> Self {
        RecentWrites::EMPTY
    }
}

impl RecentWrites {
    /// The sequence of an empty slot: sequences stay below 2^53.
    pub const NO_SEQ: u64 = u64::MAX;

    pub const EMPTY: RecentWrites = RecentWrites {
        slots: [(
            Self::NO_SEQ,
            WriteRange {
                start: 0,
                end: 0,
                records: 0,
                records_next: None,
            },
        ); RECENT_WRITES],
    };

    pub fn record(&mut self, seq: u64, range: WriteRange) {
        self.slots[seq as usize % RECENT_WRITES] = (seq, range);
    }

    /// The writes the ring holds, as (sequence, range).
    pub fn writes(&self) -> impl Iterator<Item = (u64, WriteRange)> + '_ {
        self.slots
            .iter()
            .copied()
            .filter(|&(seq, _)| seq != Self::NO_SEQ)
    }

    pub fn range_of(&self, seq: u64) -> Option<WriteRange> {
        let (at, range) = self.slots[seq as usize % RECENT_WRITES];
        (at == seq).then_some(range)
    }

    /// Fills in unknown record ordinals from where each write ended
    /// (`ordinal_at` of its end offset, while the index still holds it).
    pub fn fill_ordinals(&mut self, ordinal_at: impl Fn(u64) -> Option<u64>) {
        for (seq, range) in self.slots.iter_mut() {
            if *seq != Self::NO_SEQ && range.records_next.is_none() {
                range.records_next = ordinal_at(range.end);
            }
        }
    }
}

/// A published snapshot: its blob lives in a file of its own.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snapshot {
    pub offset: u64,
    pub content_type: String,
    pub digest: String,
    pub len: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stream {
    /// Unique per incarnation of a key: a re-created stream gets a new id, so
    /// its ETags never match the old one's.
    pub id: u64,
    pub content_type: String,
    /// `application/json` streams keep one normalized message per line.
    pub json: bool,
    pub ttl_secs: Option<u64>,
    pub expires_at: Option<String>,
    pub expires_at_ms: Option<u64>,
    pub created_at_ms: u64,
    /// Last read or write: `Stream-TTL` is a sliding idle window.
    pub last_access_ms: u64,
    /// The latest access the log records (creation, appends, closes and
    /// `Touch`es): a `Stream-TTL` stream's reads log one once they pass
    /// half a window beyond it, so every access is before this plus half a
    /// window, which is where recovery puts the last access.
    pub logged_access_ms: u64,
    pub last_write_ms: u64,
    /// Closed as decided (head state, may not be durable yet).
    pub closed: bool,
    /// The producer write that closed the stream, so its retry is a duplicate
    /// (boxed: rare, and every idle stream pays for an inline one).
    pub closed_by: Option<Box<super::command::ProducerWrite>>,
    /// The bytes: located in the log, a suffix cached in memory.
    pub data: StreamData,
    /// Retained message boundaries and their ordinals: one per record on
    /// JSON streams, one per append otherwise. Its end is the head tail.
    pub messages: RecordIndex,
    /// The first retained record ordinal F (extensions §6.1), moved only
    /// with `retained`.
    pub first_record: u64,
    pub stream_seq: Option<String>,
    pub producers: HashMap<String, ProducerState>,
    /// Stream attributes (extensions §5): a canonical JSON object, empty
    /// when none are set.
    pub attrs: Vec<u8>,
    /// The latest visible snapshot (extensions §2); boxed like `closed_by`.
    pub snapshot: Option<Box<Snapshot>>,
    /// The earliest retained offset (extensions §2.2): reads before it 410.
    pub retained: u64,
    /// Readers see only what is durable: whether the create is, and how far
    /// data and closure are (`written >= synced >= visible`).
    pub visible: bool,
    pub visible_tail: u64,
    pub visible_closed: bool,
    /// Set on a fork (PROTOCOL.md §4.2); boxed like `closed_by`.
    pub fork: Option<Box<super::ForkOrigin>>,
    /// Deleted while forks exist: its URL answers 410, re-creation 409.
    pub soft_deleted: bool,
}

// Every stream, idle or not, pays for this struct in the table
// (`tests/idle_memory.rs` bounds the total per idle stream): rare parts are
// boxed so they cost 8 bytes until used.
const _: () = assert!(std::mem::size_of::<Stream>() <= 432);

impl Stream {
    /// The durable tail: what readers may see.
    pub fn tail(&self) -> u64 {
        self.visible_tail
    }

    /// The decided tail, durable or not: what writers build on.
    pub fn head_tail(&self) -> u64 {
        self.data.tail()
    }

    /// Readers' view of closure.
    pub fn is_closed(&self) -> bool {
        self.visible_closed
    }

    /// Records an access at `now_ms`; `logged` when its record says so.
    pub fn accessed(&mut self, now_ms: u64, logged: bool) {
        self.last_access_ms = self.last_access_ms.max(now_ms);
        if logged {
            self.logged_access_ms = self.logged_access_ms.max(now_ms);
        }
    }

    /// Whether its absolute expiry (`Stream-Expires-At`) has passed.
    pub fn past_expires_at(&self, now_ms: u64) -> bool {
        self.expires_at_ms.is_some_and(|at| now_ms >= at)
    }

    /// Whether the stream has expired at `now_ms` (absolute expiry, or the
    /// TTL idle window since the last access).
    pub fn is_expired(&self, now_ms: u64) -> bool {
        let absolute = self.past_expires_at(now_ms);
        let idle = self
            .ttl_secs
            .is_some_and(|ttl| now_ms >= self.last_access_ms.saturating_add(ttl * 1000));
        absolute || idle
    }

    /// Whether `offset` falls on a message boundary (or the start).
    pub fn is_boundary(&self, offset: u64) -> bool {
        offset == 0 || offset == self.retained || self.messages.is_boundary(offset)
    }

    /// The record tail N readers see: the ordinal at the visible tail.
    pub fn record_next(&self) -> u64 {
        self.messages
            .ordinal_at(self.visible_tail)
            .expect("the visible tail is a message boundary")
    }

    /// Remaining seconds of the TTL window (rounded up), for HEAD.
    pub fn ttl_remaining_secs(&self, now_ms: u64) -> Option<u64> {
        let ttl = self.ttl_secs?;
        let deadline = self.last_access_ms.saturating_add(ttl * 1000);
        Some(deadline.saturating_sub(now_ms).div_ceil(1000))
    }
}
