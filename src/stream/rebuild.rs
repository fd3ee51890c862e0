//! Recovery's replay of a shard's log (issue 3 "Recovery"): metadata follows
//! the records in log order, the latest IMAGE superseding what came before,
//! while stream bytes are placed by (incarnation, offset) wherever their
//! record is, so data moved by the cleaner (RELOCATE) lands where it
//! belongs whatever order the records come in. Data stays on disk: only
//! extents (and JSON message boundaries) are kept; the cache starts cold.

use std::collections::{BTreeMap, HashMap};

use super::codec::{self, Entry, StreamImage};
use super::command::{Command, NewStream, ProducerWrite};
use super::data::{Extent, StreamData};
use super::records::RecordIndex;
use super::state::{ProducerState, RecentWrites, Stream, WriteRange};
use super::table::{Table, incarnation_id};

pub use super::placed::Location;
use super::placed::{Piece, Placed, Trimmed};

#[derive(Default)]
pub struct Rebuild {
    /// Current incarnation of each key.
    meta: HashMap<String, StreamImage>,
    /// Data pieces by stream id.
    placed: HashMap<u64, Placed>,
    /// Bucket id -> creation time.
    pub registry: BTreeMap<String, u64>,
    /// The offsets each producer's latest appends wrote, by (stream id,
    /// producer id), with their epoch, so a retry answers its range.
    ranges: HashMap<(u64, String), (u64, RecentWrites)>,
    /// Where each producer sits in its stream's `meta.producers`, by stream
    /// key: a linear search per record made a log of many producers
    /// quadratic to recover. Dropped whenever the key's meta is replaced.
    producer_slots: HashMap<String, HashMap<String, usize>>,
    /// The log predates `Command::Touch` (`legacy_access`).
    legacy_access: bool,
}

impl Rebuild {
    /// Marks the log as written before reads of `Stream-TTL` streams were
    /// logged: its access times bound nothing, so every TTL window starts
    /// again at the restart, as it did then (`datadir::ACCESS_MARKER`).
    pub fn legacy_access(&mut self) {
        self.legacy_access = true;
    }

    /// Replays one committed record, whose stream data (if any) is at
    /// `location`.
    pub fn replay(&mut self, entry: Entry, location: Option<Location>) {
        match entry {
            Entry::Stream(command) => self.command(command, location),
            Entry::BucketCreate {
                bucket,
                created_at_ms,
            } => {
                self.registry.insert(bucket, created_at_ms);
            }
            Entry::BucketDelete { bucket } => {
                self.registry.remove(&bucket);
            }
            Entry::Relocate {
                key,
                stream_id,
                start,
                data,
            } => {
                let json = self.json_of(&key, stream_id);
                self.place(stream_id, start, &data, location, json);
            }
            Entry::Image(image) => {
                self.producer_slots.remove(&image.key);
                // The image is newer than every APPEND before it in the
                // log: its rings replace what those told.
                for (p, ring) in image.producers.iter().zip(&image.recent) {
                    let key = (image.stream_id, p.id.clone());
                    self.ranges.insert(key, (p.epoch, *ring));
                }
                self.meta.insert(image.key.clone(), *image);
            }
        }
    }

    fn command(&mut self, command: Command, location: Option<Location>) {
        match command {
            Command::Create(NewStream {
                key,
                content_type,
                ttl_secs,
                expires_at,
                expires_at_ms,
                closed,
                data,
                now_ms,
                attrs,
            }) => {
                let stream_id = incarnation_id(&key, now_ms);
                let json = crate::protocol::content_type::is_json(&content_type);
                self.place(stream_id, 0, &data, location, json);
                let image = StreamImage {
                    key: key.clone(),
                    stream_id,
                    content_type,
                    ttl_secs,
                    expires_at,
                    expires_at_ms,
                    created_at_ms: now_ms,
                    last_write_ms: now_ms,
                    closed,
                    closed_by: None,
                    stream_seq: None,
                    producers: Vec::new(),
                    tail: data.len() as u64,
                    attrs,
                    snapshot: None,
                    retained: 0,
                    first_record: 0,
                    fork: None,
                    soft_deleted: false,
                    recent: Vec::new(),
                    logged_access_ms: now_ms,
                };
                self.producer_slots.remove(&key);
                self.meta.insert(key, image);
            }
            Command::Fork {
                mut new,
                start,
                origin,
                retained,
                first_record,
                snapshot,
            } => {
                // A create of the same configuration, then the fork's own
                // data at the fork point; the inherited pieces are RELOCATE
                // records of the same incarnation.
                let data = std::mem::take(&mut new.data);
                let (key, now_ms) = (new.key.clone(), new.now_ms);
                self.command(Command::Create(new), None);
                let stream_id = incarnation_id(&key, now_ms);
                let json = self.meta.get(&key).is_none_or(content_is_json);
                self.place(stream_id, start, &data, location, json);
                if let Some(meta) = self.meta.get_mut(&key) {
                    meta.tail = start + data.len() as u64;
                    meta.retained = retained;
                    meta.first_record = first_record;
                    meta.fork = Some(origin);
                    meta.snapshot = snapshot.map(|s| *s);
                }
            }
            Command::SoftDelete { key, stream_id } => {
                if let Some(meta) = self.meta.get_mut(&key).filter(|m| m.stream_id == stream_id) {
                    meta.soft_deleted = true;
                }
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
                let json = self.json_of(&key, stream_id);
                let records = self.place(stream_id, start, &data, location, json);
                if let Some(p) = &producer {
                    let range = WriteRange {
                        start,
                        end: start + data.len() as u64,
                        records,
                        // Known once the index is rebuilt (`restore_ranges`).
                        records_next: None,
                    };
                    let entry = self.ranges.entry((stream_id, p.id.clone())).or_default();
                    if entry.0 != p.epoch {
                        *entry = (p.epoch, RecentWrites::default());
                    }
                    entry.1.record(p.seq, range);
                }
                let Some(meta) = self.meta.get_mut(&key).filter(|m| m.stream_id == stream_id)
                else {
                    return;
                };
                meta.tail = meta.tail.max(start + data.len() as u64);
                if stream_seq.is_some() {
                    meta.stream_seq = stream_seq;
                }
                if close && !meta.closed {
                    meta.closed = true;
                    meta.closed_by = producer.clone();
                }
                meta.last_write_ms = now_ms;
                meta.logged_access_ms = meta.logged_access_ms.max(now_ms);
                let slots = self.producer_slots.entry(key).or_default();
                record_producer(meta, slots, producer);
            }
            Command::Close {
                key,
                stream_id,
                producer,
                now_ms,
            } => {
                let Some(meta) = self.meta.get_mut(&key).filter(|m| m.stream_id == stream_id)
                else {
                    return;
                };
                meta.logged_access_ms = meta.logged_access_ms.max(now_ms);
                if !meta.closed {
                    meta.closed = true;
                    meta.closed_by = producer.clone();
                }
                let slots = self.producer_slots.entry(key).or_default();
                record_producer(meta, slots, producer);
            }
            Command::Retain {
                key,
                stream_id,
                offset,
                first_record,
            } => {
                let meta = self.meta.get_mut(&key).filter(|m| m.stream_id == stream_id);
                if let Some(meta) = meta.filter(|m| offset > m.retained) {
                    meta.retained = offset;
                    meta.first_record = first_record;
                }
            }
            Command::Snapshot {
                key,
                stream_id,
                snapshot,
            } => {
                if let Some(meta) = self.meta.get_mut(&key).filter(|m| m.stream_id == stream_id) {
                    meta.snapshot = Some(snapshot);
                }
            }
            Command::SetAttrs {
                key,
                stream_id,
                attrs,
            } => {
                if let Some(meta) = self.meta.get_mut(&key).filter(|m| m.stream_id == stream_id) {
                    meta.attrs = attrs;
                }
            }
            Command::Touch {
                key,
                stream_id,
                now_ms,
            } => {
                if let Some(meta) = self.meta.get_mut(&key).filter(|m| m.stream_id == stream_id) {
                    meta.logged_access_ms = meta.logged_access_ms.max(now_ms);
                }
            }
            Command::Delete { key, stream_id } => {
                if self
                    .meta
                    .get(&key)
                    .is_some_and(|m| m.stream_id == stream_id)
                {
                    self.meta.remove(&key);
                    self.producer_slots.remove(&key);
                }
                self.placed.remove(&stream_id);
                self.ranges.retain(|(id, _), _| *id != stream_id);
            }
        }
    }

    /// Whether incarnation `stream_id` of `key` may be a JSON stream. Data
    /// can come before its incarnation's create or image in the log (the
    /// cleaner and re-sharding copy data first): unknown, it may be, so its
    /// newlines are kept (`build` uses them only on a JSON stream). The
    /// key's current incarnation may be an older one of another kind.
    fn json_of(&self, key: &str, stream_id: u64) -> bool {
        self.meta
            .get(key)
            .filter(|m| m.stream_id == stream_id)
            .is_none_or(content_is_json)
    }

    /// Places a record's data; returns how many records (messages) it
    /// holds: one per line on JSON streams, one per non-empty append
    /// otherwise (as `table::push_data` counts them).
    fn place(
        &mut self,
        stream_id: u64,
        start: u64,
        data: &[u8],
        location: Option<Location>,
        json: bool,
    ) -> u32 {
        let newlines: Vec<u64> = match json {
            true => super::newlines::positions(data)
                .map(|i| start + i as u64 + 1)
                .collect(),
            false => Vec::new(),
        };
        let records = match json {
            true => newlines.len(),
            false => usize::from(!data.is_empty()),
        };
        if let Some(location) = location.filter(|_| !data.is_empty()) {
            self.placed.entry(stream_id).or_default().add(
                start,
                data.len() as u64,
                location,
                &newlines,
            );
        }
        u32::try_from(records).expect("an append's records fit u32")
    }

    /// The table recovery leaves: every stream with its extents and
    /// metadata. `Err` names a stream whose data is not all there.
    pub fn finish(
        mut self,
        cache_budget: u64,
        now_ms: u64,
    ) -> Result<(Table, BTreeMap<String, u64>), String> {
        let mut table = Table::with_cache_budget(cache_budget);
        for (key, meta) in std::mem::take(&mut self.meta) {
            let mut pieces = self.placed.remove(&meta.stream_id).unwrap_or_default();
            pieces.sort();
            let trimmed = self.trimmed_ordinals(&meta, &pieces);
            let access = recovered_access(&meta, now_ms, self.legacy_access);
            let mut stream =
                build(meta, pieces, access).map_err(|e| format!("stream {key}: {e}"))?;
            self.restore_ranges(&mut stream, &trimmed);
            table.restore(key, stream);
        }
        Ok((table, self.registry))
    }
}

impl Rebuild {
    /// Gives each producer the ranges of its latest appends whose records
    /// the log still holds.
    /// `trimmed`: ordinals of ends before the retention point, by end.
    fn restore_ranges(&self, stream: &mut Stream, trimmed: &[(u64, u64)]) {
        let trimmed_at = |end| {
            let at = trimmed.binary_search_by_key(&end, |&(e, _)| e).ok()?;
            Some(trimmed[at].1)
        };
        for (id, state) in stream.producers.iter_mut() {
            let found = self.ranges.get(&(stream.id, id.clone()));
            if let Some(&(epoch, mut recent)) = found
                && epoch == state.epoch
            {
                recent.fill_ordinals(|end| {
                    stream.messages.ordinal_at(end).or_else(|| trimmed_at(end))
                });
                state.recent = recent;
            }
        }
    }

    /// The ordinals of the producers' remembered appends that retention
    /// trimmed, while the log still holds them (`Placed::ordinals_before`).
    fn trimmed_ordinals(&self, meta: &StreamImage, pieces: &Placed) -> Vec<(u64, u64)> {
        let mut wanted: Vec<u64> = (meta.producers.iter())
            .filter_map(|p| self.ranges.get(&(meta.stream_id, p.id.clone())))
            .flat_map(|(_, recent)| recent.writes().map(|(_, range)| range.end))
            .filter(|&end| end < meta.retained)
            .collect();
        if wanted.is_empty() {
            return Vec::new();
        }
        wanted.sort_unstable();
        wanted.dedup();
        pieces.ordinals_before(&Trimmed {
            retained: meta.retained,
            first_record: meta.first_record,
            json: content_is_json(meta),
            wanted: &wanted,
        })
    }
}

fn content_is_json(meta: &StreamImage) -> bool {
    crate::protocol::content_type::is_json(&meta.content_type)
}

/// Records a producer's latest write in `meta`; `slots` indexes
/// `meta.producers` (rebuilt from it when it does not cover it).
fn record_producer(
    meta: &mut StreamImage,
    slots: &mut HashMap<String, usize>,
    producer: Option<ProducerWrite>,
) {
    let Some(p) = producer else { return };
    if slots.len() != meta.producers.len() {
        slots.clear();
        slots.extend(
            meta.producers
                .iter()
                .enumerate()
                .map(|(i, q)| (q.id.clone(), i)),
        );
    }
    match slots.get(&p.id) {
        Some(&i) => meta.producers[i] = p,
        None => {
            slots.insert(p.id.clone(), meta.producers.len());
            meta.producers.push(p);
        }
    }
}

/// A stream from its metadata and placed pieces, which must cover
/// `[0, tail)` without gaps.
/// `access`: the recovered last access and logged access.
/// `pieces` sorted.
fn build(meta: StreamImage, pieces: Placed, access: (u64, u64)) -> Result<Stream, String> {
    let json = crate::protocol::content_type::is_json(&meta.content_type);
    let mut data = StreamData::default();
    let mut messages = RecordIndex::starting_at(meta.first_record, meta.retained);
    // Data wholly before the retention point may be gone (the cleaner
    // reclaims it); from there on it must cover the stream without gaps.
    let mut covered = meta.retained;
    let mut located = false;
    for piece in pieces.pieces() {
        let Piece { start, .. } = piece;
        if start >= meta.tail {
            break;
        }
        if start + piece.len <= meta.retained {
            continue;
        }
        let gap = match located {
            true => start != covered,
            false => start > covered || start + piece.len <= covered,
        };
        if gap {
            return Err(format!(
                "data missing between offsets {covered} and {start}"
            ));
        }
        let (segment, pos) = piece.location;
        data.push_recovered(Extent {
            start,
            len: piece.len,
            segment,
            pos,
        });
        located = true;
        match json {
            true => piece
                .newlines
                .iter()
                .filter(|&&end| end > meta.retained)
                .for_each(|&end| messages.push(end)),
            false => messages.push(start + piece.len),
        }
        covered = start + piece.len;
    }
    if covered != meta.tail.max(meta.retained) {
        return Err(format!(
            "data ends at {covered}, the stream at {}",
            meta.tail
        ));
    }
    // Reads and HEAD count records up to the tail: a log whose records
    // disagree on where the messages end (damage that kept the checksums)
    // is refused here rather than trusted.
    if messages.ordinal_at(meta.tail).is_none() {
        return Err(format!("the tail {} ends no message", meta.tail));
    }
    let producers = meta
        .producers
        .iter()
        .map(|p| {
            (
                p.id.clone(),
                ProducerState {
                    epoch: p.epoch,
                    last_seq: p.seq,
                    recent: RecentWrites::default(),
                },
            )
        })
        .collect();
    let (last_access_ms, logged_access_ms) = access;
    Ok(Stream {
        id: meta.stream_id,
        json,
        ttl_secs: meta.ttl_secs,
        expires_at: meta.expires_at,
        expires_at_ms: meta.expires_at_ms,
        created_at_ms: meta.created_at_ms,
        last_access_ms,
        logged_access_ms,
        last_write_ms: meta.last_write_ms,
        closed: meta.closed,
        closed_by: meta.closed_by.map(Box::new),
        data: data.recovered_to(meta.tail),
        messages,
        first_record: meta.first_record,
        stream_seq: meta.stream_seq,
        producers,
        visible: true,
        visible_tail: meta.tail,
        visible_closed: meta.closed,
        attrs: meta.attrs,
        snapshot: meta.snapshot.map(Box::new),
        retained: meta.retained,
        content_type: meta.content_type,
        fork: meta.fork.map(Box::new),
        soft_deleted: meta.soft_deleted,
    })
}

/// The latest access the log tells of (older images lack the field: the
/// creation and the last write are logged accesses too).
fn logged_access(meta: &StreamImage) -> u64 {
    meta.logged_access_ms
        .max(meta.last_write_ms)
        .max(meta.created_at_ms)
}

/// A recovered stream's last access and logged access. Unlogged reads
/// came less than a tenth of its TTL window after `logged_access`
/// (`protocol::access_record`); a fifth leaves the last one's record room
/// to commit. So the last access is put there, never past `now_ms`: a
/// stream idle past its TTL by a fifth of it before a crash stays expired,
/// and a stream in use is not expired by the crash. A legacy log bounds
/// nothing: the window starts again at the restart.
fn recovered_access(meta: &StreamImage, now_ms: u64, legacy: bool) -> (u64, u64) {
    let logged = logged_access(meta);
    match (meta.ttl_secs, legacy) {
        (_, true) => (now_ms, now_ms),
        (Some(ttl), false) => {
            let bound = logged.saturating_add(ttl.saturating_mul(200));
            (bound.min(now_ms), logged)
        }
        (None, false) => (now_ms, logged),
    }
}

/// Bytes of producer rings an IMAGE may carry with `segment_bytes` long
/// segments: a quarter of one.
pub fn ring_budget(segment_bytes: u64) -> u64 {
    segment_bytes / 4
}

/// The image of a live stream's current (head) metadata, for the cleaner
/// and re-sharding. The producers' rings go in only while they take at
/// most `ring_budget` bytes: an image is one log record, which must fit a
/// segment (`Config::producer_limits` keeps the rest of it within half).
pub fn image_of(key: &str, stream: &Stream, ring_budget: u64) -> StreamImage {
    let rings_fit = stream.producers.len() as u64 * codec::MAX_RING_BYTES <= ring_budget;
    StreamImage {
        key: key.to_string(),
        stream_id: stream.id,
        content_type: stream.content_type.clone(),
        ttl_secs: stream.ttl_secs,
        expires_at: stream.expires_at.clone(),
        expires_at_ms: stream.expires_at_ms,
        created_at_ms: stream.created_at_ms,
        last_write_ms: stream.last_write_ms,
        logged_access_ms: stream.logged_access_ms,
        closed: stream.closed,
        closed_by: stream.closed_by.as_deref().cloned(),
        stream_seq: stream.stream_seq.clone(),
        producers: stream
            .producers
            .iter()
            .map(|(id, s)| ProducerWrite {
                id: id.clone(),
                epoch: s.epoch,
                seq: s.last_seq,
            })
            .collect(),
        // The same map iterated again: the same order as `producers`.
        recent: match rings_fit {
            true => stream.producers.values().map(|s| s.recent).collect(),
            false => Vec::new(),
        },
        tail: stream.head_tail(),
        attrs: stream.attrs.clone(),
        snapshot: stream.snapshot.as_deref().cloned(),
        retained: stream.retained,
        first_record: stream.first_record,
        fork: stream.fork.as_deref().cloned(),
        soft_deleted: stream.soft_deleted,
    }
}

/// Decodes a record and replays it (the data location follows from where
/// the record is and where its payload puts the data).
pub fn replay_record(
    rebuild: &mut Rebuild,
    kind: u8,
    payload: &[u8],
    record_at: Location,
) -> Result<(), String> {
    let entry = codec::decode(kind, payload).map_err(|e| e.to_string())?;
    let location = codec::data_offset(&entry).map(|offset| {
        (
            record_at.0,
            record_at.1 + (crate::log::format::HEADER_BYTES + offset) as u64,
        )
    });
    rebuild.replay(entry, location);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(content_type: &str, now_ms: u64) -> Entry {
        Entry::Stream(Command::plain_create("k", content_type, b"", now_ms))
    }

    #[test]
    fn data_logged_before_its_incarnation_keeps_its_records() {
        // A text stream's key re-created as JSON; the cleaner copied the
        // new incarnation's first append ahead of its create, while the
        // old incarnation was still the key's.
        let (old, new) = (incarnation_id("k", 1), incarnation_id("k", 2));
        let mut rebuild = Rebuild::default();
        rebuild.replay(create("text/plain", 1), None);
        let relocated = Entry::Relocate {
            key: "k".into(),
            stream_id: new,
            start: 0,
            data: b"1\n2\n3\n".to_vec(),
        };
        rebuild.replay(relocated, Some((1, 0)));
        let delete = Command::Delete {
            key: "k".into(),
            stream_id: old,
        };
        rebuild.replay(Entry::Stream(delete), None);
        rebuild.replay(create("application/json", 2), None);
        let append = Command::Append {
            key: "k".into(),
            stream_id: new,
            start: 6,
            data: b"4\n".to_vec().into(),
            producer: None,
            stream_seq: None,
            close: false,
            now_ms: 3,
        };
        rebuild.replay(Entry::Stream(append), Some((1, 64)));
        let (table, _) = rebuild.finish(u64::MAX, 4).unwrap();
        let stream = table.get("k").unwrap();
        assert_eq!(stream.tail(), 8);
        assert_eq!(stream.messages.next(), 4, "one record per line");
    }

    #[test]
    fn a_json_fork_whose_data_ends_mid_message_is_refused() {
        // Checksum-valid but inconsistent: the FORK's own data does not
        // end on a line end, so no record ends at the stream's tail.
        let fork = Command::Fork {
            new: NewStream::plain("k", "application/json", b"1\n2", 1),
            start: 0,
            origin: crate::stream::command::ForkOrigin {
                source: "s".into(),
                source_id: 1,
                offset: 0,
                sub: 0,
                own_lifetime: false,
            },
            retained: 0,
            first_record: 0,
            snapshot: None,
        };
        let mut rebuild = Rebuild::default();
        rebuild.replay(Entry::Stream(fork), Some((1, 0)));
        let refused = rebuild.finish(u64::MAX, 2).map(|_| ()).unwrap_err();
        assert!(refused.contains("ends no message"), "{refused}");
    }

    #[test]
    fn recovery_bounds_a_ttl_streams_last_access_by_the_logged_one() {
        let recovered = |touched_at: Option<u64>, legacy: bool, now_ms: u64| {
            let mut rebuild = Rebuild::default();
            if legacy {
                rebuild.legacy_access();
            }
            let mut create = Command::plain_create("k", "text/plain", b"", 1_000);
            if let Command::Create(NewStream { ttl_secs, .. }) = &mut create {
                *ttl_secs = Some(10);
            }
            rebuild.replay(Entry::Stream(create), None);
            if let Some(now_ms) = touched_at {
                let stream_id = incarnation_id("k", 1_000);
                let touch = Command::Touch {
                    key: "k".into(),
                    stream_id,
                    now_ms,
                };
                rebuild.replay(Entry::Stream(touch), None);
            }
            let (table, _) = rebuild.finish(u64::MAX, now_ms).unwrap();
            let stream = table.get("k").unwrap();
            (stream.last_access_ms, stream.logged_access_ms)
        };
        // A fifth of the 10 s window past the latest logged access, never
        // past the restart; a legacy log begins the window again.
        assert_eq!(recovered(None, false, 60_000), (3_000, 1_000));
        assert_eq!(recovered(Some(7_000), false, 60_000), (9_000, 7_000));
        assert_eq!(recovered(Some(7_000), false, 8_000), (8_000, 7_000));
        assert_eq!(recovered(Some(7_000), true, 60_000), (60_000, 60_000));
    }
}
