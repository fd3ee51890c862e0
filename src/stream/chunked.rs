//! A growable sequence stored in fixed-size chunks, for the per-stream
//! indexes that grow by one entry per append or record (extents, message
//! ends). A single `Vec` of millions of entries is copied whole each time
//! it doubles, stalling the shard for hundreds of milliseconds; chunks
//! never move. Entries are dropped from the front (retention) and taken
//! back from the back (a rolled-back write).

use std::collections::VecDeque;

/// Entries per chunk.
const CHUNK: usize = 4096;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunked<T> {
    /// Every chunk is full except the first (drained from the front) and
    /// the last (being filled); none is empty.
    chunks: VecDeque<Vec<T>>,
    len: usize,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Chunked {
            chunks: VecDeque::new(),
            len: 0,
        }
    }
}

impl<T: Copy> Chunked<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn push(&mut self, value: T) {
        match self.chunks.back_mut() {
            Some(last) if last.len() < CHUNK => last.push(value),
            // A chunk grows like a Vec up to CHUNK entries (a stream of a
            // few appends keeps a few entries, not a whole chunk); the
            // copies a doubling makes stay within one chunk.
            _ => self.chunks.push_back(vec![value]),
        }
        self.len += 1;
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
            self.chunks[chunk][at]
        })
    }

    pub fn get_mut(&mut self, index: usize) -> Option<&mut T> {
        if index >= self.len {
            return None;
        }
        let (chunk, at) = self.locate(index);
        Some(&mut self.chunks[chunk][at])
    }

    pub fn last(&self) -> Option<T> {
        self.chunks.back().and_then(|c| c.last().copied())
    }

    /// Keeps the first `len` entries.
    pub fn truncate(&mut self, len: usize) {
        while self.len > len {
            let last = self
                .chunks
                .back_mut()
                .expect("len counts the chunks' entries");
            let drop = (self.len - len).min(last.len());
            last.truncate(last.len() - drop);
            self.len -= drop;
            if last.is_empty() {
                self.chunks.pop_back();
            }
        }
    }

    /// Drops the first `count` entries.
    pub fn drop_front(&mut self, count: usize) {
        let mut left = count.min(self.len);
        self.len -= left;
        while left > 0 {
            let first = self
                .chunks
                .front_mut()
                .expect("len counts the chunks' entries");
            if first.len() <= left {
                left -= first.len();
                self.chunks.pop_front();
            } else {
                first.drain(..left);
                first.shrink_to_fit();
                left = 0;
            }
        }
    }

    /// The number of leading entries for which `pred` holds (entries must
    /// be partitioned: `pred` true, then false).
    pub fn partition_point(&self, pred: impl Fn(&T) -> bool) -> usize {
        let full = self.chunks.partition_point(|c| c.last().is_some_and(&pred));
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

    /// The entries at `start..end` (clamped), in order.
    pub fn range(&self, start: usize, end: usize) -> impl Iterator<Item = T> + '_ {
        let end = end.min(self.len);
        let start = start.min(end);
        let (first_chunk, at) = match start < self.len {
            true => self.locate(start),
            false => (self.chunks.len(), 0),
        };
        self.chunks
            .range(first_chunk.min(self.chunks.len())..)
            .enumerate()
            .flat_map(move |(i, c)| c[if i == 0 { at } else { 0 }..].iter().copied())
            .take(end - start)
    }

    pub fn iter(&self) -> impl Iterator<Item = T> + '_ {
        self.chunks.iter().flat_map(|c| c.iter().copied())
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

    #[test]
    fn behaves_like_a_vec_across_chunks() {
        let n = 3 * CHUNK as u64 + 17;
        let mut c = filled(n);
        let mut v: Vec<u64> = (0..n).collect();
        assert_eq!(c.len(), v.len());
        assert_eq!(c.partition_point(|&x| x < 5000), 5000);
        assert_eq!(
            c.partition_point(|_| true),
            c.len(),
            "the last chunk is short"
        );
        assert_eq!(c.range(4090, 4100).collect::<Vec<_>>(), v[4090..4100]);
        c.drop_front(4100);
        v.drain(..4100);
        assert_eq!(
            (c.get(0), c.get(c.len() - 1)),
            (Some(v[0]), v.last().copied())
        );
        assert_eq!(c.partition_point(|&x| x < 9000), 9000 - 4100);
        c.truncate(c.len() - CHUNK - 3);
        v.truncate(v.len() - CHUNK - 3);
        c.push(99_999);
        v.push(99_999);
        assert_eq!(c.iter().collect::<Vec<_>>(), v);
        assert_eq!(c.range(1, 5).collect::<Vec<_>>(), v[1..5]);
        assert_eq!(c.range(c.len(), c.len() + 3).count(), 0);
        *c.get_mut(2).unwrap() = 7;
        assert_eq!(c.get(2), Some(7));
        c.drop_front(c.len());
        assert!(c.is_empty() && c.last().is_none());
        c.push(1);
        assert_eq!(c.iter().collect::<Vec<_>>(), [1]);
    }
}
