//! Where a stream's bytes are (issue 3 "Bounded memory"): every committed
//! append has an extent in the log (segment, file position), and a suffix
//! of the stream is cached in memory as one chunk per append. Uncommitted
//! appends live only in the cache (they have no location yet) and are
//! never evicted; committed chunks are evicted oldest first by the table's
//! budget, after which reads of them go to the segments.

use std::collections::VecDeque;

use bytes::Bytes;

use super::bitpack::Column;
use super::chunked::{Chunked, Pack};

/// The log location of one committed append's bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Extent {
    /// Stream offset of the first byte.
    pub start: u64,
    pub len: u64,
    pub segment: u64,
    /// File position of the first byte in the segment.
    pub pos: u64,
}

impl Extent {
    pub fn end(&self) -> u64 {
        self.start + self.len
    }
}

/// An extent as the index keeps it, one per committed append: 16 bytes.
/// Its length is not stored: appends are located contiguously, so an
/// extent ends where the next begins (the last at `located_to`).
/// `Config::check` bounds segments to 4 GiB, so a position fits 32 bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Located {
    start: u64,
    segment: u32,
    pos: u32,
}

/// An extent's memory before its chunk is packed.
const _: () = assert!(std::mem::size_of::<Located>() == 16);
/// A slot of the extents' chunks (one or more a stream) stays the size of a
/// `Vec`: the packed columns (three here) are boxed.
const _: () = assert!(super::chunked::slot_bytes::<Located>() <= 32);

/// A full chunk of extents, packed (`chunked::Pack`) as one bit-packed
/// column per field: starts rise by the appends' sizes, segment numbers
/// stay put for long runs, positions rise through a segment, so an extent
/// takes a few bytes instead of 16.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PackedExtents {
    start: Column,
    segment: Column,
    pos: Column,
}

impl Pack for Located {
    type Packed = PackedExtents;

    fn pack(values: &[Located]) -> Option<PackedExtents> {
        let column = |field: fn(&Located) -> u64| {
            Column::pack(&values.iter().map(field).collect::<Vec<u64>>())
        };
        Some(PackedExtents {
            start: column(|l| l.start)?,
            segment: column(|l| u64::from(l.segment))?,
            pos: column(|l| u64::from(l.pos))?,
        })
    }

    fn packed_len(packed: &PackedExtents) -> usize {
        packed.pos.len()
    }

    fn packed_get(packed: &PackedExtents, index: usize) -> Located {
        Located {
            start: packed.start.get(index),
            // Packed from u32 fields: they come back as they went in.
            segment: packed.segment.get(index) as u32,
            pos: packed.pos.get(index) as u32,
        }
    }

    fn packed_set(packed: &mut PackedExtents, index: usize, value: Located) -> bool {
        // Only the start can fail to pack (u32 fields spread at most 2^33),
        // so a refusal leaves every column as it was.
        packed.start.set(index, value.start)
            && packed.segment.set(index, u64::from(value.segment))
            && packed.pos.set(index, u64::from(value.pos))
    }

    fn packed_bytes(packed: &PackedExtents) -> u64 {
        packed.start.bytes() + packed.segment.bytes() + packed.pos.bytes()
    }

    fn packed_decode(packed: &PackedExtents, from: usize, to: usize, out: &mut Vec<Located>) {
        let column = |c: &Column| {
            let mut values = Vec::with_capacity(to - from);
            c.decode_into(from, to, &mut values);
            values
        };
        let (start, segment, pos) = (
            column(&packed.start),
            column(&packed.segment),
            column(&packed.pos),
        );
        out.extend((0..to - from).map(|i| Located {
            start: start[i],
            segment: segment[i] as u32,
            pos: pos[i] as u32,
        }));
    }
}

impl Located {
    fn new(start: u64, segment: u64, pos: u64) -> Located {
        Located {
            start,
            // 2^32 segments of at least 64 KiB each: 256 TiB per shard.
            segment: u32::try_from(segment).expect("segment numbers stay below 2^32"),
            pos: u32::try_from(pos).expect("segments are at most 4 GiB (Config::check)"),
        }
    }

    fn with_end(self, end: u64) -> Extent {
        debug_assert!(end >= self.start);
        Extent {
            start: self.start,
            len: end - self.start,
            segment: u64::from(self.segment),
            pos: u64::from(self.pos),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamData {
    /// End of the decided data (durable or not).
    tail: u64,
    /// Cached suffix `[cache_start, tail)`, one chunk per append, shared
    /// (without a copy) with the responses that send it.
    chunks: VecDeque<(u64, Bytes)>,
    /// Located appends, ascending and contiguous up to `located_to`
    /// (those wholly before the retention point may be dropped).
    extents: Chunked<Located>,
    /// Where located data ends.
    located_to: u64,
}

impl StreamData {
    /// Adds the next extent recovery rebuilt (in offset order, each
    /// starting where the previous ended): in the log, not cached.
    pub fn push_recovered(&mut self, extent: Extent) {
        assert!(self.chunks.is_empty(), "recovered data is not cached");
        assert!(
            self.extents.is_empty() || extent.start == self.located_to,
            "recovered extents are contiguous"
        );
        self.extents
            .push(Located::new(extent.start, extent.segment, extent.pos));
        self.located_to = extent.end();
        self.tail = extent.end();
    }

    /// The data recovery rebuilt, ending at `tail` (all of it located:
    /// with no extents, retention dropped everything before `tail`).
    pub fn recovered_to(mut self, tail: u64) -> StreamData {
        assert!(
            self.extents.is_empty() || self.located_to == tail,
            "recovered extents reach the tail"
        );
        self.tail = tail;
        self.located_to = tail;
        self
    }

    pub fn tail(&self) -> u64 {
        self.tail
    }

    /// Where the cached suffix starts (`tail` when nothing is cached).
    pub fn cache_start(&self) -> u64 {
        self.chunks.front().map_or(self.tail, |(start, _)| *start)
    }

    pub fn cached_bytes(&self) -> u64 {
        self.tail - self.cache_start()
    }

    /// Where located data ends: bytes before it can be read from the log.
    pub fn located_end(&self) -> u64 {
        self.located_to
    }

    /// Forgets where bytes wholly before `offset` are (retention made
    /// them unreadable), so the cleaner reclaims them.
    pub fn drop_before(&mut self, offset: u64) {
        let dead = self.ending_by(offset);
        self.extents.drop_front(dead);
    }

    /// Where the bytes still readable begin: the start of the first kept
    /// extent or of the cache, whichever is lower. It lies below
    /// `retained` only while a response pins those bytes (`pins.rs`).
    pub fn readable_from(&self) -> u64 {
        let located = self.extents_at(0..1).next().map(|e| e.start);
        located.map_or(self.cache_start(), |start| start.min(self.cache_start()))
    }

    /// The number of leading extents that end at or before `offset`.
    fn ending_by(&self, offset: u64) -> usize {
        // Extent i ends where extent i + 1 starts; the last at located_to.
        let starting_by = self.extents.partition_point(|l| l.start <= offset);
        match starting_by {
            0 => 0,
            n if n < self.extents.len() => n - 1,
            n if self.located_to <= offset => n,
            n => n - 1,
        }
    }

    /// Appends decided bytes (cached until committed and evicted).
    pub fn push(&mut self, data: Bytes) {
        if data.is_empty() {
            return;
        }
        let start = self.tail;
        self.tail += data.len() as u64;
        // A stream written once keeps one cached chunk.
        super::chunked::push_back_sparing(&mut self.chunks, (start, data));
    }

    /// Takes back decided bytes down to `len` (an append boundary that is
    /// not located yet).
    pub fn truncate(&mut self, len: u64) {
        assert!(
            len >= self.located_end(),
            "committed data cannot be taken back"
        );
        while self.chunks.back().is_some_and(|(start, _)| *start >= len) {
            self.chunks.pop_back();
        }
        self.tail = len;
    }

    /// Records where the append starting at `start` landed in the log.
    pub fn locate(&mut self, start: u64, len: u64, segment: u64, pos: u64) {
        assert_eq!(start, self.located_end(), "appends are located in order");
        assert!(start + len <= self.tail);
        self.extents.push(Located::new(start, segment, pos));
        self.located_to = start + len;
    }

    /// Drops the oldest cached chunk if it is located; returns its size.
    pub fn evict_front(&mut self) -> Option<u64> {
        let (start, bytes) = self.chunks.front()?;
        if start + bytes.len() as u64 > self.located_end() {
            return None;
        }
        let len = bytes.len() as u64;
        self.chunks.pop_front();
        Some(len)
    }

    /// Copies the cached part of `[start, end)` into `out`; `start` must be
    /// at or after `cache_start()`.
    pub fn copy_cached(&self, start: u64, end: u64, out: &mut Vec<u8>) {
        for (bytes, range) in self.cached_parts(start, end) {
            out.extend_from_slice(&bytes[range]);
        }
    }

    /// The cached part of `[start, end)` as shared slices of the cache's
    /// chunks (no copy); `start` must be at or after `cache_start()`.
    pub fn cached_slices(&self, start: u64, end: u64) -> Vec<Bytes> {
        self.cached_parts(start, end)
            .map(|(bytes, range)| bytes.slice(range))
            .collect()
    }

    /// Whether every cached chunk of `[start, end)` but the first and the
    /// last (which the range may cut) holds at least `min` bytes: stops at
    /// the first that does not, so a range of many small appends costs
    /// little to rule out.
    pub fn cached_inner_chunks_at_least(&self, start: u64, end: u64, min: usize) -> bool {
        let mut lens = self.cached_parts(start, end).map(|(_, range)| range.len());
        lens.next();
        let mut lens = lens.peekable();
        while let Some(len) = lens.next() {
            if len < min && lens.peek().is_some() {
                return false;
            }
        }
        true
    }

    /// The cached chunks that hold bytes of `[start, end)`, each with the
    /// range of it that lies inside.
    fn cached_parts(
        &self,
        start: u64,
        end: u64,
    ) -> impl Iterator<Item = (&Bytes, std::ops::Range<usize>)> + '_ {
        assert!(start >= self.cache_start() && end <= self.tail && start <= end);
        let first = self
            .chunks
            .partition_point(|(s, b)| s + b.len() as u64 <= start);
        self.chunks
            .range(first..)
            .take_while(move |(chunk_start, _)| *chunk_start < end)
            .map(move |(chunk_start, bytes)| {
                let from = start.saturating_sub(*chunk_start) as usize;
                let to = (end - chunk_start).min(bytes.len() as u64) as usize;
                (bytes, from..to)
            })
    }

    /// The extents that hold bytes of `[start, end)`.
    pub fn extents_in(&self, start: u64, end: u64) -> Vec<Extent> {
        let first = self.ending_by(start);
        let last = self.extents.partition_point(|e| e.start < end);
        self.extents_at(first..last.max(first)).collect()
    }

    /// Extents `range` (clamped) with their lengths, decoded in one pass:
    /// each ends where the next starts, the last at `located_to`.
    fn extents_at(&self, range: std::ops::Range<usize>) -> impl Iterator<Item = Extent> + '_ {
        let end = range.end.min(self.extents.len());
        let mut located = self.extents.range(range.start, end + 1).peekable();
        std::iter::from_fn(move || {
            let this = located.next()?;
            let until = located.peek().map_or(self.located_to, |next| next.start);
            Some(this.with_end(until))
        })
        .take(end.saturating_sub(range.start))
    }

    /// Moves the extent starting at `start` (the cleaner copied it).
    pub fn relocate(&mut self, start: u64, segment: u64, pos: u64) -> bool {
        let at = self.extents.partition_point(|e| e.start < start);
        match self.extents.get(at).filter(|e| e.start == start) {
            Some(_) => self.extents.set(at, Located::new(start, segment, pos)),
            None => false,
        }
    }

    /// Memory the extents take (packed in full chunks).
    pub fn index_bytes(&self) -> u64 {
        self.extents.bytes()
    }

    /// The located extents whose bytes are in `segment`.
    /// The extents in `segment` among the (at most) `count` from `from`
    /// on, and where the next scan would begin (None when these were the
    /// last): a scan a part at a time that stays right while retention
    /// drops extents from the front. A position is an offset and how many
    /// extents starting there come before it (empty appends share a start).
    pub fn extents_in_segment_from(
        &self,
        segment: u64,
        from: (u64, usize),
        count: usize,
    ) -> (Vec<Extent>, Option<(u64, usize)>) {
        let first = self.extents.partition_point(|e| e.start < from.0) + from.1;
        let first = first.min(self.extents.len());
        let end = first.saturating_add(count).min(self.extents.len());
        let found = self.extents_at(first..end).filter(|e| e.segment == segment);
        let next = self.extents.get(end).map(|next| {
            let before = self.extents.partition_point(|e| e.start < next.start);
            (next.start, end - before)
        });
        (found.collect(), next)
    }

    /// Every located extent in `segment` in one pass: the model the tests
    /// check `extents_in_segment_from`'s parts against (the cleaner scans
    /// a part at a time).
    #[cfg(test)]
    pub fn extents_in_segment(&self, segment: u64) -> impl Iterator<Item = Extent> + '_ {
        self.extents_at(0..self.extents.len())
            .filter(move |e| e.segment == segment)
    }

    /// Bytes located in each segment by the extents at `range` (clamped),
    /// added to `live`. Extents mostly come in runs of one segment (append
    /// order), so the map is touched once per run.
    pub fn count_live_range(
        &self,
        range: std::ops::Range<usize>,
        live: &mut std::collections::HashMap<u64, u64>,
    ) {
        let mut run: Option<(u64, u64)> = None;
        for e in self.extents_at(range) {
            run = match run {
                Some((segment, bytes)) if segment == e.segment => Some((segment, bytes + e.len)),
                Some((segment, bytes)) => {
                    *live.entry(segment).or_default() += bytes;
                    Some((e.segment, e.len))
                }
                None => Some((e.segment, e.len)),
            };
        }
        if let Some((segment, bytes)) = run {
            *live.entry(segment).or_default() += bytes;
        }
    }

    /// How many extents (located appends) are kept.
    pub fn extent_count(&self) -> usize {
        self.extents.len()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    /// A stream written once caches one chunk: room for one, not four.
    #[test]
    fn one_cached_append_takes_one_slot() {
        let mut d = StreamData::default();
        d.push(b"x".to_vec().into());
        assert_eq!(d.chunks.capacity(), 1);
    }

    #[test]
    fn only_the_ends_of_a_range_may_cut_small_chunks() {
        let mut d = StreamData::default();
        for len in [10, 100, 100, 10] {
            d.push(vec![b'x'; len].into());
        }
        assert!(d.cached_inner_chunks_at_least(0, 220, 100));
        assert!(
            d.cached_inner_chunks_at_least(105, 220, 100),
            "cut first and last"
        );
        assert!(!d.cached_inner_chunks_at_least(0, 220, 101));
        assert!(
            d.cached_inner_chunks_at_least(5, 110, 101),
            "no inner chunk"
        );
    }

    #[test]
    fn cached_reads_span_chunks() {
        let mut d = StreamData::default();
        d.push(b"hello".to_vec().into());
        d.push(b" world".to_vec().into());
        let mut out = Vec::new();
        d.copy_cached(3, 9, &mut out);
        assert_eq!(out, b"lo wor");
        assert_eq!((d.tail(), d.cache_start()), (11, 0));
        let slices = d.cached_slices(3, 9);
        assert_eq!(
            slices,
            vec![Bytes::from_static(b"lo"), Bytes::from_static(b" wor")]
        );
        assert!(d.cached_slices(5, 5).is_empty());
        assert_eq!(d.cached_slices(5, 11), vec![Bytes::from_static(b" world")]);
    }

    #[test]
    fn only_located_chunks_are_evicted() {
        let mut d = StreamData::default();
        d.push(b"abc".to_vec().into());
        d.push(b"def".to_vec().into());
        assert_eq!(d.evict_front(), None);
        d.locate(0, 3, 1, 4096);
        assert_eq!(d.evict_front(), Some(3));
        assert_eq!(d.evict_front(), None);
        assert_eq!(d.cache_start(), 3);
        assert_eq!(
            d.extents_in(0, 2),
            [Extent {
                start: 0,
                len: 3,
                segment: 1,
                pos: 4096
            }]
        );
        assert!(d.extents_in(3, 6).is_empty());
    }

    /// The extents a plain list keeps, for comparison.
    fn model_in(model: &[Extent], start: u64, end: u64) -> Vec<Extent> {
        let first = model.partition_point(|e| e.end() <= start);
        let last = model.partition_point(|e| e.start < end);
        model[first..last.max(first)].to_vec()
    }

    #[test]
    fn a_long_streams_extents_take_a_few_bytes_each() {
        // 256-byte appends of one stream among about twenty others: its
        // positions rise by ~20 records between appends, 64 MiB segments.
        let mut d = StreamData::default();
        let mut model: Vec<Extent> = Vec::new();
        let (mut start, mut segment, mut pos, mut noise) = (0, 1, 0, 12_345u64);
        for _ in 0..100_000 {
            noise ^= noise << 13;
            noise ^= noise >> 7;
            noise ^= noise << 17;
            pos += (19 + noise % 3) * 320;
            if pos >= 64 << 20 {
                (segment, pos) = (segment + 1, 0);
            }
            d.push(vec![b'x'; 256].into());
            d.locate(start, 256, segment, pos);
            model.push(Extent {
                start,
                len: 256,
                segment,
                pos,
            });
            start += 256;
        }
        // 16 bytes an extent plain, 10 as packed before bit packing.
        let count = model.len() as f64;
        let per_extent = |d: &StreamData| d.index_bytes() as f64 / count;
        let packed = per_extent(&d);
        assert!(packed < 4.0, "{packed} bytes an extent");
        // The cleaner moving segment 2's run elsewhere: same answers, and
        // the packing tightens again behind it.
        let mut moved_to = 0;
        for e in model.iter_mut().filter(|e| e.segment == 2) {
            (e.segment, e.pos) = (9, moved_to);
            moved_to += 320;
            assert!(d.relocate(e.start, e.segment, e.pos));
        }
        assert!(moved_to > 0, "segment 2 had extents");
        assert_eq!(d.extents_in(0, start), model);
        let moved = per_extent(&d);
        assert!(moved <= packed, "{moved} bytes an extent after the move");
    }

    #[test]
    fn compact_extents_answer_like_a_list_of_whole_ones() {
        // Lengths 0..7 (empty appends included), in segments that roll.
        let mut d = StreamData::default();
        let mut model: Vec<Extent> = Vec::new();
        let mut start = 0;
        for i in 0..5000u64 {
            let len = i % 7;
            let (segment, pos) = (1 + i / 900, (i % 900) * 64);
            d.push(vec![b'x'; len as usize].into());
            d.locate(start, len, segment, pos);
            model.push(Extent {
                start,
                len,
                segment,
                pos,
            });
            start += len;
        }
        assert_eq!(d.extent_count(), model.len());
        for (from, to) in [
            (0, 1),
            (0, start),
            (5, 5),
            (6, 20),
            (start - 3, start),
            (start, start + 9),
        ] {
            assert_eq!(
                d.extents_in(from, to),
                model_in(&model, from, to),
                "{from}..{to}"
            );
        }
        let in_three: Vec<Extent> = model.iter().filter(|e| e.segment == 3).copied().collect();
        assert_eq!(d.extents_in_segment(3).collect::<Vec<_>>(), in_three);
        // A part at a time, from offsets, finds the same.
        let (mut parts, mut from) = (Vec::new(), Some((0, 0)));
        while let Some(at) = from {
            let (found, next) = d.extents_in_segment_from(3, at, 333);
            parts.extend(found);
            from = next;
        }
        assert_eq!(parts, in_three);
        let (mut live, mut expected) = (HashMap::new(), HashMap::new());
        d.count_live_range(10..2000, &mut live);
        model[10..2000]
            .iter()
            .for_each(|e| *expected.entry(e.segment).or_default() += e.len);
        assert_eq!(live, expected);
        // Relocating one keeps its length and its neighbours'.
        let moved = model[4000];
        assert!(d.relocate(moved.start, 77, 4096));
        model[4000] = Extent {
            segment: 77,
            pos: 4096,
            ..moved
        };
        let around = (model[3999].start, model[4001].end());
        assert_eq!(
            d.extents_in(around.0, around.1),
            model_in(&model, around.0, around.1)
        );
        // A move past what the packed chunk's segments reach unpacks it.
        let far = model[100];
        assert!(d.relocate(far.start, 1 << 20, 8192));
        model[100] = Extent {
            segment: 1 << 20,
            pos: 8192,
            ..far
        };
        assert_eq!(d.extents_in(0, start), model_in(&model, 0, start));
        // Dropping before an offset keeps every extent that ends after it.
        for cut in [0, 1, 12_345, start - 1, start] {
            let mut d = d.clone();
            d.drop_before(cut);
            let kept: Vec<Extent> = model.iter().filter(|e| e.end() > cut).copied().collect();
            assert_eq!(d.extent_count(), kept.len(), "cut at {cut}");
            assert_eq!(d.extents_in(0, start + 1), kept, "cut at {cut}");
        }
    }

    #[test]
    fn truncate_takes_back_unlocated_appends() {
        let mut d = StreamData::default();
        d.push(b"abc".to_vec().into());
        d.locate(0, 3, 1, 0);
        d.push(b"def".to_vec().into());
        d.truncate(3);
        assert_eq!((d.tail(), d.cache_start()), (3, 0));
    }
}

#[cfg(test)]
#[path = "data_prop.rs"]
mod prop;
