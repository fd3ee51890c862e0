//! Forks in the stream table (PROTOCOL.md §4.2). A fork copies what it
//! inherits: the source's bytes `[retained, fork point)` are logged first as
//! RELOCATE records of the fork's incarnation (one per source append), and
//! their locations are *staged* here; the FORK command then makes a stream
//! of them plus its own data. A fork never reads its source afterwards, so
//! sources and forks live on any shards and are deleted independently;
//! each shard counts the forks it holds per source incarnation, which
//! decides between delete and soft delete of a source.

use super::budget::{END_BYTES, EXTENT_BYTES};
use super::command::{Command, ForkOrigin};
use super::data::{Extent, StreamData};
use super::records::RecordIndex;
use super::state::Stream;
use super::table::{Applied, Table, Undo, incarnation_id};

/// A fork's inherited data, logged but not yet part of a stream.
#[derive(Debug, Default)]
pub struct Staged {
    pub extents: Vec<Extent>,
    /// Message ends in the inherited data, ascending.
    pub ends: Vec<u64>,
}

impl Table {
    /// Starts staging the inherited data of fork incarnation `stream_id`.
    pub fn begin_stage(&mut self, stream_id: u64) {
        self.staged.insert(stream_id, Staged::default());
    }

    /// Records that inherited bytes of the fork incarnation `stream_id`
    /// landed at `extent`, with the message ends inside them; ignored when
    /// the fork was abandoned meanwhile.
    pub fn stage(&mut self, stream_id: u64, extent: Extent, ends: &[u64]) {
        let Some(staged) = self.staged.get_mut(&stream_id) else {
            return;
        };
        debug_assert!(
            staged
                .extents
                .last()
                .is_none_or(|e| e.end() == extent.start)
        );
        debug_assert!(ends.iter().all(|&e| e > extent.start && e <= extent.end()));
        staged.extents.push(extent);
        staged.ends.extend_from_slice(ends);
    }

    /// Forgets an abandoned fork's staged data (its records stay orphans,
    /// which recovery ignores and the cleaner reclaims).
    pub fn unstage(&mut self, stream_id: u64) {
        self.staged.remove(&stream_id);
    }

    /// Index memory the fork incarnation `stream_id`'s staged data will
    /// take once its FORK applies (unpacked, as `append_index_bytes` counts).
    pub fn staged_index_bytes(&self, stream_id: u64) -> u64 {
        self.staged.get(&stream_id).map_or(0, |staged| {
            let extents = staged.extents.len() as u64 * EXTENT_BYTES;
            extents.saturating_add(staged.ends.len() as u64 * END_BYTES)
        })
    }

    /// Whether a fork copy is in flight (the cleaner must not move or drop
    /// staged records, which no stream refers to yet).
    pub fn has_staged(&self) -> bool {
        !self.staged.is_empty()
    }

    /// How many forks of this shard were made from incarnation `source_id`.
    pub fn fork_count(&self, source_id: u64) -> usize {
        self.fork_refs.get(&source_id).copied().unwrap_or(0)
    }

    /// Counts (or uncounts) `stream` as a fork of its source.
    pub(super) fn count_fork(&mut self, stream: &Stream, add: bool) {
        if let Some(origin) = &stream.fork {
            self.count_source(origin.source_id, add);
        }
    }

    fn count_source(&mut self, source_id: u64, add: bool) {
        let count = self.fork_refs.entry(source_id).or_default();
        match add {
            true => *count += 1,
            false => *count = count.saturating_sub(1),
        }
        if *count == 0 {
            self.fork_refs.remove(&source_id);
        }
    }

    pub(super) fn apply_fork(&mut self, command: Command) -> (Applied, Undo) {
        let Command::Fork {
            mut new,
            start,
            origin,
            retained,
            first_record,
            snapshot,
        } = command
        else {
            unreachable!("apply_fork takes Fork only");
        };
        // A create of the same configuration, whose data is then the staged
        // inherited bytes and, at the fork point, the fork's own.
        let data = std::mem::take(&mut new.data);
        let (key, now_ms) = (new.key.clone(), new.now_ms);
        let (_, undo) = self.apply_create(Command::Create(new));
        let id = incarnation_id(&key, now_ms);
        let staged = self.staged.remove(&id).unwrap_or_default();
        let mut messages = RecordIndex::starting_at(first_record, retained);
        messages.extend(staged.ends.iter().copied());
        assert_eq!(
            messages.end(),
            start,
            "inherited data ends at the fork point"
        );
        let source_id = origin.source_id;
        let stream = self.streams.get_mut(&key).expect("created above");
        stream.data = inherited(staged.extents, retained, start);
        stream.messages = messages;
        stream.first_record = first_record;
        stream.retained = retained;
        stream.snapshot = snapshot;
        stream.visible_tail = start;
        stream.fork = Some(Box::new(origin));
        super::table::push_data(stream, data.into());
        let done = super::table::applied(&key, stream, start);
        self.count_source(source_id, true);
        (done, undo)
    }
}

/// The located inherited bytes `[retained, start)`, which `extents` must
/// cover without gaps.
fn inherited(extents: Vec<Extent>, retained: u64, start: u64) -> StreamData {
    let mut data = StreamData::default();
    let mut at = retained;
    for extent in extents {
        assert_eq!(extent.start, at, "inherited data has no gaps");
        at = extent.end();
        data.push_recovered(extent);
    }
    assert_eq!(at, start, "inherited data reaches the fork point");
    data.recovered_to(start)
}

/// Whether a fork re-create names the same fork (PROTOCOL.md §4.2
/// idempotency): same source, same sub-offset, and the same fork offset
/// when the request gives one.
pub fn same_origin(existing: &ForkOrigin, source: &str, offset: Option<u64>, sub: u64) -> bool {
    existing.source == source && existing.sub == sub && offset.is_none_or(|o| o == existing.offset)
}
