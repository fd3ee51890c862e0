//! A growable sequence stored in fixed-size chunks, for the per-stream
//! indexes that grow by one entry per append or record (extents, message
//! ends). A single `Vec` of millions of entries is copied whole each time
//! it doubles, stalling the shard for hundreds of milliseconds; chunks
//! never move. Entries are dropped from the front (retention) and taken
//! back from the back (a rolled-back write).
//!
//! A chunk that fills up is *packed* (`Pack`, bit-packed columns from
//! `bitpack`), which takes a long stream's index from 8-16 bytes an entry
//! to a few bits (issue 4: the index is what bounds retained appends). A
//! packed chunk is read in place; changing an entry that no longer fits
//! the packing unpacks that chunk for good.

use std::collections::VecDeque;

use super::bitpack::Column;

/// Entries per chunk: a stream's last chunk stays plain (8 or 16 bytes an
/// entry) until it fills, so this bounds what each stream keeps unpacked.
const CHUNK: usize = 1024;

/// How a chunk of entries is stored compactly.
pub trait Pack: Copy {
    type Packed: Clone + std::fmt::Debug + PartialEq + Eq;
    /// The packed form of `values` (not empty), if they fit it.
    fn pack(values: &[Self]) -> Option<Self::Packed>;
    fn packed_len(packed: &Self::Packed) -> usize;
    fn packed_get(packed: &Self::Packed, index: usize) -> Self;
    /// Replaces entry `index` (the packed form may change size); false
    /// (nothing changed) when it does not fit.
    fn packed_set(packed: &mut Self::Packed, index: usize, value: Self) -> bool;
    /// Memory the packed form takes.
    fn packed_bytes(packed: &Self::Packed) -> u64;
    /// Entries `from..to` appended to `out` (a sequential scan).
    fn packed_decode(packed: &Self::Packed, from: usize, to: usize, out: &mut Vec<Self>);
}

/// A chunk is a slot of every stream's index: the packed form (several
/// columns) is boxed so that a slot stays the size of a `Vec`.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Chunk<T: Pack> {
    Plain(Vec<T>),
    Packed(Box<T::Packed>),
}

/// What one chunk slot of a `Chunked<T>` takes (every stream has some).
pub(super) const fn slot_bytes<T: Pack>() -> usize {
    std::mem::size_of::<Chunk<T>>()
}

const _: () = assert!(slot_bytes::<u64>() <= 32);

/// `push_back` onto a per-stream deque that takes room for just one slot at
/// first, not the four a deque starts with: most streams never need a
/// second (100,000 idle streams).
pub(super) fn push_back_sparing<T>(deque: &mut VecDeque<T>, value: T) {
    if deque.capacity() == 0 {
        deque.reserve_exact(1);
    }
    deque.push_back(value);
}

impl<T: Pack> Chunk<T> {
    fn len(&self) -> usize {
        match self {
            Chunk::Plain(values) => values.len(),
            Chunk::Packed(packed) => T::packed_len(packed),
        }
    }

    fn get(&self, index: usize) -> T {
        match self {
            Chunk::Plain(values) => values[index],
            Chunk::Packed(packed) => T::packed_get(packed, index),
        }
    }

    fn last(&self) -> Option<T> {
        self.len().checked_sub(1).map(|i| self.get(i))
    }

    /// Entries `from..to`, decoded in one pass.
    fn slice(&self, from: usize, to: usize) -> Vec<T> {
        match self {
            Chunk::Plain(values) => values[from..to].to_vec(),
            Chunk::Packed(packed) => {
                let mut out = Vec::with_capacity(to - from);
                T::packed_decode(packed, from, to, &mut out);
                out
            }
        }
    }

    fn bytes(&self) -> u64 {
        match self {
            Chunk::Plain(values) => (values.len() * std::mem::size_of::<T>()) as u64,
            Chunk::Packed(packed) => T::packed_bytes(packed),
        }
    }

    /// The entries as a plain vector, to change them freely.
    fn unpacked(&mut self) -> &mut Vec<T> {
        if let Chunk::Packed(_) = self {
            *self = Chunk::Plain(self.slice(0, self.len()));
        }
        match self {
            Chunk::Plain(values) => values,
            Chunk::Packed(_) => unreachable!("unpacked above"),
        }
    }

    /// Packs a plain chunk when its entries fit.
    fn packed(self) -> Chunk<T> {
        match &self {
            Chunk::Plain(values) if !values.is_empty() => {
                T::pack(values).map_or(self, |packed| Chunk::Packed(Box::new(packed)))
            }
            _ => self,
        }
    }

    /// The number of leading entries for which `pred` holds.
    fn partition_point(&self, pred: impl Fn(&T) -> bool) -> usize {
        match self {
            Chunk::Plain(values) => values.partition_point(pred),
            Chunk::Packed(packed) => {
                let (mut low, mut high) = (0, T::packed_len(packed));
                while low < high {
                    let mid = low + (high - low) / 2;
                    match pred(&T::packed_get(packed, mid)) {
                        true => low = mid + 1,
                        false => high = mid,
                    }
                }
                low
            }
        }
    }
}

/// Equal when the entries are (`PartialEq` below), however they are stored.
#[derive(Clone, Debug)]
pub struct Chunked<T: Pack> {
    /// Every chunk is full except the first (drained from the front) and
    /// the last (being filled); none is empty. All but the last are packed
    /// when their entries fit.
    chunks: VecDeque<Chunk<T>>,
    len: usize,
    /// What the chunks take: always `Chunk::bytes` summed.
    bytes: u64,
}

impl<T: Pack + PartialEq> PartialEq for Chunked<T> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl<T: Pack + Eq> Eq for Chunked<T> {}

impl<T: Pack> Default for Chunked<T> {
    fn default() -> Self {
        Chunked {
            chunks: VecDeque::new(),
            len: 0,
            bytes: 0,
        }
    }
}

impl<T: Pack> Chunked<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Memory the entries take, packed or not.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    pub fn push(&mut self, value: T) {
        match self.chunks.back_mut() {
            Some(Chunk::Plain(last)) if last.len() < CHUNK => last.push(value),
            // A chunk grows like a Vec up to CHUNK entries (a stream of a
            // few appends keeps a few entries, not a whole chunk); the
            // copies a doubling makes stay within one chunk.
            _ => {
                if let Some(full) = self.chunks.pop_back() {
                    self.bytes -= full.bytes();
                    let full = full.packed();
                    self.bytes += full.bytes();
                    self.chunks.push_back(full);
                }
                // Most streams never fill a chunk.
                push_back_sparing(&mut self.chunks, Chunk::Plain(vec![value]));
            }
        }
        self.len += 1;
        self.bytes += std::mem::size_of::<T>() as u64;
    }

    /// `push` of every value, filling the last plain chunk a run at a time
    /// (an append of millions of JSON records paid a chunk check each).
    pub fn extend(&mut self, values: impl IntoIterator<Item = T>) {
        let mut values = values.into_iter().peekable();
        while values.peek().is_some() {
            match self.chunks.back_mut() {
                Some(Chunk::Plain(last)) if last.len() < CHUNK => {
                    let before = last.len();
                    last.extend(values.by_ref().take(CHUNK - before));
                    let added = last.len() - before;
                    self.len += added;
                    self.bytes += (added * std::mem::size_of::<T>()) as u64;
                }
                _ => self.push(values.next().expect("peeked")),
            }
        }
    }

    /// (chunk, position in it) of entry `index`.
    fn locate(&self, index: usize) -> (usize, usize) {
        debug_assert!(index < self.len);
        let first = self.chunks[0].len();
        match index < first {
            true => (0, index),
            false => (1 + (index - first) / CHUNK, (index - first) % CHUNK),
        }
    }

    pub fn get(&self, index: usize) -> Option<T> {
        (index < self.len).then(|| {
            let (chunk, at) = self.locate(index);
            self.chunks[chunk].get(at)
        })
    }

    /// Replaces entry `index`; false when there is none.
    pub fn set(&mut self, index: usize, value: T) -> bool {
        if index >= self.len {
            return false;
        }
        let (at_chunk, at) = self.locate(index);
        let chunk = &mut self.chunks[at_chunk];
        let before = chunk.bytes();
        let stored = match chunk {
            Chunk::Packed(packed) => T::packed_set(packed, at, value),
            Chunk::Plain(_) => false,
        };
        if !stored {
            chunk.unpacked()[at] = value;
        }
        self.bytes = self.bytes - before + chunk.bytes();
        true
    }

    pub fn last(&self) -> Option<T> {
        self.chunks.back().and_then(Chunk::last)
    }

    /// Keeps the first `len` entries.
    pub fn truncate(&mut self, len: usize) {
        while self.len > len {
            let mut last = self
                .chunks
                .pop_back()
                .expect("len counts the chunks' entries");
            self.bytes -= last.bytes();
            let drop = (self.len - len).min(last.len());
            self.len -= drop;
            if drop < last.len() {
                let values = last.unpacked();
                values.truncate(values.len() - drop);
                self.bytes += last.bytes();
                self.chunks.push_back(last);
            }
        }
    }

    /// Drops the first `count` entries.
    pub fn drop_front(&mut self, count: usize) {
        let mut left = count.min(self.len);
        self.len -= left;
        while left > 0 {
            let mut first = self
                .chunks
                .pop_front()
                .expect("len counts the chunks' entries");
            self.bytes -= first.bytes();
            if first.len() <= left {
                left -= first.len();
                continue;
            }
            let values = first.unpacked();
            values.drain(..left);
            left = 0;
            // A drained full chunk packs again; the last stays plain, with
            // its capacity for the entries still to come.
            let first = match self.chunks.is_empty() {
                true => first,
                false => match first.packed() {
                    Chunk::Plain(mut values) => {
                        values.shrink_to_fit();
                        Chunk::Plain(values)
                    }
                    packed => packed,
                },
            };
            self.bytes += first.bytes();
            self.chunks.push_front(first);
        }
    }

    /// The number of leading entries for which `pred` holds (entries must
    /// be partitioned: `pred` true, then false).
    pub fn partition_point(&self, pred: impl Fn(&T) -> bool) -> usize {
        let full = self
            .chunks
            .partition_point(|c| c.last().is_some_and(|last| pred(&last)));
        // Only the first and the last chunk may be short.
        let before: usize = match full {
            0 => 0,
            n if n == self.chunks.len() => self.len,
            n => self.chunks[0].len() + (n - 1) * CHUNK,
        };
        let within = self
            .chunks
            .get(full)
            .map_or(0, |c| c.partition_point(&pred));
        before + within
    }

    /// The entries at `start..end` (clamped), in order, each chunk's part
    /// decoded in one pass.
    pub fn range(&self, start: usize, end: usize) -> impl Iterator<Item = T> + '_ {
        let end = end.min(self.len);
        let start = start.min(end);
        let (first_chunk, first_at) = match start < end {
            true => self.locate(start),
            false => (self.chunks.len(), 0),
        };
        let mut left = end - start;
        self.chunks
            .range(first_chunk..)
            .enumerate()
            .map_while(move |(i, chunk)| {
                let from = if i == 0 { first_at } else { 0 };
                let to = chunk.len().min(from + left);
                left -= to - from;
                (to > from).then(|| chunk.slice(from, to))
            })
            .flatten()
    }

    pub fn iter(&self) -> impl Iterator<Item = T> + '_ {
        self.range(0, self.len)
    }
}

/// Offsets (message ends) pack as a bit-packed column (`bitpack`).
impl Pack for u64 {
    type Packed = Column;

    fn pack(values: &[u64]) -> Option<Column> {
        Column::pack(values)
    }

    fn packed_len(packed: &Column) -> usize {
        packed.len()
    }

    fn packed_get(packed: &Column, index: usize) -> u64 {
        packed.get(index)
    }

    fn packed_set(packed: &mut Column, index: usize, value: u64) -> bool {
        packed.set(index, value)
    }

    fn packed_bytes(packed: &Column) -> u64 {
        packed.bytes()
    }

    fn packed_decode(packed: &Column, from: usize, to: usize, out: &mut Vec<u64>) {
        packed.decode_into(from, to, out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn filled(n: u64) -> Chunked<u64> {
        let mut c = Chunked::default();
        (0..n).for_each(|v| c.push(v));
        c
    }

    /// What the chunks take, summed afresh.
    fn recount(c: &Chunked<u64>) -> u64 {
        c.chunks.iter().map(Chunk::bytes).sum()
    }

    #[test]
    fn behaves_like_a_vec_across_chunks() {
        let n = 3 * CHUNK as u64 + 17;
        let mut c = filled(n);
        let mut v: Vec<u64> = (0..n).collect();
        assert_eq!(c.len(), v.len());
        let (c1, c2) = (CHUNK as u64, 2 * CHUNK as u64);
        assert_eq!(c.partition_point(|&x| x < c1 + 904), CHUNK + 904);
        assert_eq!(
            c.partition_point(|_| true),
            c.len(),
            "the last chunk is short"
        );
        let across = CHUNK - 6..CHUNK + 4;
        assert_eq!(
            c.range(across.start, across.end).collect::<Vec<_>>(),
            v[across]
        );
        c.drop_front(CHUNK + 4);
        v.drain(..CHUNK + 4);
        assert_eq!(
            (c.get(0), c.get(c.len() - 1)),
            (Some(v[0]), v.last().copied())
        );
        assert_eq!(c.partition_point(|&x| x < c2 + 808), CHUNK + 804);
        c.truncate(c.len() - CHUNK - 3);
        v.truncate(v.len() - CHUNK - 3);
        c.push(99_999);
        v.push(99_999);
        assert_eq!(c.iter().collect::<Vec<_>>(), v);
        assert_eq!(c.range(1, 5).collect::<Vec<_>>(), v[1..5]);
        assert_eq!(c.range(c.len(), c.len() + 3).count(), 0);
        assert!(c.set(2, 7) && !c.set(c.len(), 7));
        assert_eq!(c.get(2), Some(7));
        assert_eq!(c.bytes(), recount(&c));
        c.drop_front(c.len());
        assert!(c.is_empty() && c.last().is_none());
        assert_eq!(c.bytes(), 0);
        c.push(1);
        assert_eq!(c.iter().collect::<Vec<_>>(), [1]);
    }

    #[test]
    fn extend_is_push_of_each() {
        // Runs that end inside a chunk, fill one exactly, and span several.
        for runs in [
            vec![5, 10],
            vec![CHUNK, CHUNK],
            vec![3, 2 * CHUNK + 7, 1, CHUNK - 4],
        ] {
            let (mut pushed, mut extended) = (Chunked::default(), Chunked::default());
            let mut next = 0u64;
            for run in runs {
                let values: Vec<u64> = (next..next + run as u64).collect();
                next += run as u64;
                values.iter().for_each(|&v| pushed.push(v));
                extended.extend(values);
            }
            assert_eq!(
                extended.iter().collect::<Vec<_>>(),
                pushed.iter().collect::<Vec<_>>()
            );
            assert_eq!(
                (extended.len(), extended.bytes()),
                (pushed.len(), pushed.bytes())
            );
            assert_eq!(extended.bytes(), recount(&extended));
            assert_eq!(extended.chunks.len(), pushed.chunks.len(), "packed alike");
        }
    }

    #[test]
    fn full_chunks_are_packed_and_counted() {
        let n = 4 * CHUNK as u64;
        let c = filled(n);
        // Three packed chunks (a line: no bits at all), the last plain.
        let line: Vec<u64> = (0..CHUNK as u64).collect();
        let packed = Column::pack(&line).expect("packs").bytes();
        assert!(packed < CHUNK as u64 / 4, "{packed} bytes");
        assert_eq!(c.bytes(), 3 * packed + 8 * CHUNK as u64);
        assert_eq!(c.bytes(), recount(&c));
        assert!(matches!(c.chunks[0], Chunk::Packed(_)));
        assert!(matches!(c.chunks[3], Chunk::Plain(_)));
        assert_eq!(c.iter().collect::<Vec<_>>(), (0..n).collect::<Vec<_>>());
        assert_eq!(c.partition_point(|&x| x < n - 45), n as usize - 45);
    }

    #[test]
    fn entries_that_do_not_fit_unpack_their_chunk() {
        // Residuals past 64 bits (bitpack): the chunk stays plain.
        let wild = |i: u64| if i.is_multiple_of(2) { u64::MAX } else { 0 };
        let mut wide = Chunked::default();
        (0..=CHUNK as u64).for_each(|i| wide.push(wild(i)));
        assert!(matches!(wide.chunks[0], Chunk::Plain(_)));
        assert_eq!(wide.get(CHUNK - 2), Some(u64::MAX));
        // A packed entry set out of reach unpacks its chunk, and counts.
        let mut c = filled(2 * CHUNK as u64);
        assert!(c.set(0, u64::MAX));
        assert!(matches!(c.chunks[0], Chunk::Plain(_)));
        assert_eq!((c.get(0), c.get(1)), (Some(u64::MAX), Some(1)));
        assert_eq!(c.bytes(), recount(&c));
        // Truncating into a packed chunk, and draining one, keep the count.
        let mut c = filled(3 * CHUNK as u64);
        c.truncate(CHUNK + 5);
        assert_eq!(c.bytes(), recount(&c));
        assert_eq!(c.last(), Some(CHUNK as u64 + 4));
        c.drop_front(3);
        assert_eq!((c.get(0), c.bytes()), (Some(3), recount(&c)));
        assert!(matches!(c.chunks[0], Chunk::Packed(_)), "repacked");
        // Equality is of the entries, packed or not.
        let (a, mut b) = (filled(CHUNK as u64 + 1), filled(CHUNK as u64 + 1));
        assert!(b.set(0, u64::MAX) && b.set(0, 0));
        assert!(matches!(b.chunks[0], Chunk::Plain(_)));
        assert_eq!(a, b);
    }

    /// Every stream has two of these: a short one holds one chunk slot,
    /// not the four a deque starts with (each slot was 48-128 bytes while
    /// the packed form lived inline: 100,000 idle streams took 212 MiB).
    #[test]
    fn a_short_index_takes_one_chunk_slot() {
        let c = filled(3);
        assert_eq!(c.chunks.capacity(), 1);
        assert_eq!(filled(CHUNK as u64 + 1).chunks.len(), 2);
    }
}

#[cfg(test)]
#[path = "chunked_prop.rs"]
pub(crate) mod prop;
