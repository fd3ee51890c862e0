//! The index budget (issue 4: the ordinal-to-offset index stays in memory
//! within a bounded budget). Every stream keeps, per retained message, its
//! end (`RecordIndex`, one per JSON record or per append) and, per
//! committed append, its log location (`Extent`); and it takes its key,
//! its attributes and a fixed share for the rest of its metadata, so that
//! creating streams cannot grow memory without bound either. The table
//! counts what all of them take as commands apply, publish and roll back;
//! creates and writes that would add to it over its budget are refused
//! (503) by `protocol` until retention or deletes free entries. Retention frees the
//! entries before the retained point (extensions §6.10 allows reclaiming
//! exactly those).

use super::state::Stream;
use super::table::Table;

/// What a bucket takes in every shard's registry replica: its entry and id.
pub fn bucket_bytes(id: &str) -> u64 {
    256 + id.len() as u64
}

/// Bounds on idempotent producers' state (PROTOCOL.md §5.2.1 keeps one
/// entry per producer id for the stream's lifetime): without them a
/// client could grow a stream's memory without end with new or long ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerLimits {
    /// Longest `Producer-Id`, in bytes (431 beyond).
    pub max_id_bytes: usize,
    /// Producer ids one stream remembers; a new id beyond gets 429.
    pub max_per_stream: usize,
}

impl Default for ProducerLimits {
    fn default() -> Self {
        ProducerLimits {
            max_id_bytes: 256,
            max_per_stream: 10_000,
        }
    }
}

/// A stream's own metadata besides its key and attributes (measured:
/// ~1 KiB of resident memory per idle stream, docs/OPERATIONS.md).
pub const STREAM_BYTES: u64 = 1024;

/// What one idempotent producer's state takes: its entry in the stream's
/// map (id, epoch, sequence and the ranges of its latest appends) twice,
/// for the table's slack (it doubles when 7/8 full, so it holds 1.14 to
/// 2.3 slots an entry; counted once this was ~0.6x what producers took,
/// limits probe of session 18), and an id up to the default
/// `--max-producer-id-bytes`. Counted per producer (not per id byte) so
/// the footprint stays O(1) to compute.
pub const PRODUCER_BYTES: u64 = (2 * PRODUCER_SLOT_BYTES + 16 + 256) as u64;

/// One slot of a stream's producer map, with its control byte.
const PRODUCER_SLOT_BYTES: usize = std::mem::size_of::<(String, super::state::ProducerState)>() + 1;

/// A message end in the index until its chunk is packed.
pub const END_BYTES: u64 = 8;
/// An append's extent in the index until its chunk is packed.
pub const EXTENT_BYTES: u64 = 16;

/// Index bytes an append of `messages` messages adds until its chunk is
/// packed: a message end each and one extent.
pub fn append_index_bytes(messages: u64) -> u64 {
    messages
        .saturating_mul(END_BYTES)
        .saturating_add(EXTENT_BYTES)
}

impl Stream {
    /// What this stream's indexes and metadata take (its key aside): the
    /// client-chosen strings count as sent, up to the head limit each, and
    /// each producer's state as `PRODUCER_BYTES` (a client naming new
    /// producers on many streams grew memory outside the budget).
    pub fn index_footprint(&self) -> u64 {
        let indexes = self.messages.index_bytes() + self.data.index_bytes();
        let strings = self.attrs.len()
            + self.content_type.len()
            + self.stream_seq.as_ref().map_or(0, String::len)
            + self.expires_at.as_ref().map_or(0, String::len);
        let producers = self.producers.len() as u64 * PRODUCER_BYTES;
        indexes + STREAM_BYTES + strings as u64 + producers
    }
}

impl Table {
    /// This shard's share of `--max-index-bytes`.
    pub fn set_index_budget(&mut self, bytes: u64) {
        self.index_budget = bytes;
    }

    pub fn set_producer_limits(&mut self, limits: ProducerLimits) {
        self.producer_limits = limits;
    }

    pub fn producer_limits(&self) -> ProducerLimits {
        self.producer_limits
    }

    /// Index memory of every stream of the table and of the shard's
    /// replica of the bucket registry (clients create buckets too).
    pub fn index_used(&self) -> u64 {
        self.index_used.saturating_add(self.registry_bytes)
    }

    /// Counts bucket `id` registered (`added`) or dropped on this shard.
    pub fn count_bucket(&mut self, id: &str, added: bool) {
        let bytes = bucket_bytes(id);
        self.registry_bytes = match added {
            true => self.registry_bytes.saturating_add(bytes),
            false => self.registry_bytes.saturating_sub(bytes),
        };
    }

    /// Whether a change adding `bytes` of index must wait for retention
    /// or deletes: it would take the table past its budget. (An estimate
    /// by the caller, `APPEND_INDEX_BYTES` and `STREAM_BYTES`: what a
    /// request adds is checked before it applies, so the budget holds to
    /// within that estimate's error instead of one whole request.)
    pub fn index_refuses(&self, bytes: u64) -> bool {
        self.index_used().saturating_add(bytes) > self.index_budget
    }

    /// Counts how the stream `key` grew or shrank since it took `before`
    /// (a created stream grows from 0, a deleted one shrinks to 0); the
    /// table calls it around every apply, publish and undo.
    pub(super) fn count_index(&mut self, before: u64, key: &str) {
        let after = self.footprint_of(key);
        let used = (self.index_used + after).checked_sub(before);
        // Checked in tests; in production a miscount must not stop a shard.
        debug_assert!(used.is_some(), "index accounting went negative");
        self.index_used = used.unwrap_or(0);
    }

    pub(super) fn footprint_of(&self, key: &str) -> u64 {
        let stream = self.streams.get(key);
        stream.map_or(0, |s| s.index_footprint() + key.len() as u64)
    }
}
