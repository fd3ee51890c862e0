//! Message boundaries and record ordinals (extensions §6.1): where every
//! retained message of a stream ends, and which ordinal it has. On JSON
//! streams a message is one normalized record (one line of the canonical
//! bytes); on other streams it is one append, which is what snapshots and
//! retention align to (§2.2).
//!
//! Ordinals never move: the index starts at `base`, the ordinal of the first
//! message it knows, which begins at offset `origin`. Retention drops whole
//! messages from the front (advancing both); new messages are pushed at the
//! back; an uncommitted tail is taken back by `truncate`. The index is dense
//! (one end per retained message: 8 bytes, 4 once its chunk is full and
//! packed), kept in chunks, and counted against the shard's index budget
//! (`budget.rs`).

use super::chunked::Chunked;

/// Retained message ends with their ordinals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecordIndex {
    /// Ordinal of the message that `ends[0]` ends.
    base: u64,
    /// Offset where message `base` starts.
    origin: u64,
    /// End offset of messages `base..base + ends.len()`, ascending.
    ends: Chunked<u64>,
}

impl RecordIndex {
    /// An index whose first message is `base`, starting at `origin`.
    pub fn starting_at(base: u64, origin: u64) -> RecordIndex {
        RecordIndex {
            base,
            origin,
            ends: Chunked::default(),
        }
    }

    /// Memory the message ends take (packed in full chunks).
    pub fn index_bytes(&self) -> u64 {
        self.ends.bytes()
    }

    /// The next ordinal (the record tail N of the head state).
    pub fn next(&self) -> u64 {
        self.base + self.ends.len() as u64
    }

    /// Where the last known message ends (`origin` when none).
    pub fn end(&self) -> u64 {
        self.ends.last().unwrap_or(self.origin)
    }

    /// Records that a message ends at `end`.
    pub fn push(&mut self, end: u64) {
        assert!(end > self.end(), "message ends ascend");
        self.ends.push(end);
    }

    /// `push` of each of `ends` (one append's messages), in one pass.
    pub fn extend(&mut self, ends: impl IntoIterator<Item = u64>) {
        let mut last = self.end();
        self.ends.extend(ends.into_iter().inspect(|&end| {
            assert!(end > last, "message ends ascend");
            last = end;
        }));
    }

    /// Takes back messages so that `next` ordinals remain (undo of an
    /// uncommitted write).
    pub fn truncate(&mut self, next: u64) {
        assert!(next >= self.base, "retained messages cannot be taken back");
        self.ends.truncate((next - self.base) as usize);
    }

    /// Forgets the messages that end at or before `offset` (a boundary
    /// retention moved to): their ordinals stay used.
    pub fn drop_before(&mut self, offset: u64) {
        let dead = self.ends.partition_point(|&end| end <= offset);
        if dead == 0 {
            return;
        }
        self.base += dead as u64;
        self.origin = self.ends.get(dead - 1).expect("dead entries exist");
        self.ends.drop_front(dead);
    }

    /// The ordinal of the message that starts at `offset`, if `offset` is a
    /// known boundary (the end of the last message gives `next`).
    pub fn ordinal_at(&self, offset: u64) -> Option<u64> {
        if offset == self.origin {
            return Some(self.base);
        }
        let at = self.ends.partition_point(|&end| end < offset);
        (self.ends.get(at) == Some(offset)).then(|| self.base + at as u64 + 1)
    }

    /// The offset where message `ordinal` starts (`end()` for `next`).
    pub fn offset_of(&self, ordinal: u64) -> Option<u64> {
        let index = ordinal.checked_sub(self.base)?;
        match index {
            0 => Some(self.origin),
            i => self.ends.get(i as usize - 1),
        }
    }

    /// Whether `offset` is a known message boundary.
    pub fn is_boundary(&self, offset: u64) -> bool {
        self.ordinal_at(offset).is_some()
    }

    /// The ordinal of the first message ending after `offset`.
    pub fn first_ending_after(&self, offset: u64) -> u64 {
        self.base + self.ends.partition_point(|&end| end <= offset) as u64
    }

    /// End offsets of the messages in `(start, end]`.
    pub fn ends_in(&self, start: u64, end: u64) -> Vec<u64> {
        let from = self.ends.partition_point(|&e| e <= start);
        let to = self.ends.partition_point(|&e| e <= end);
        self.ends.range(from, to.max(from)).collect()
    }

    /// The end of the last whole message inside `(start, limit]`.
    pub fn last_end_within(&self, start: u64, limit: u64) -> Option<u64> {
        let to = self.ends.partition_point(|&e| e <= limit);
        let end = self.ends.get(to.checked_sub(1)?)?;
        (end > start).then_some(end)
    }

    /// The end of the first message ending after `offset`.
    pub fn first_end_after(&self, offset: u64) -> Option<u64> {
        let at = self.ends.partition_point(|&end| end <= offset);
        self.ends.get(at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(ends: &[u64]) -> RecordIndex {
        let mut index = RecordIndex::default();
        for &end in ends {
            index.push(end);
        }
        index
    }

    #[test]
    fn ordinals_map_to_boundaries_both_ways() {
        let i = index(&[6, 9, 11]);
        assert_eq!(i.next(), 3);
        assert_eq!(
            (0..=3).map(|r| i.offset_of(r)).collect::<Vec<_>>(),
            [Some(0), Some(6), Some(9), Some(11)]
        );
        assert_eq!(i.offset_of(4), None);
        assert_eq!(i.ordinal_at(9), Some(2));
        assert_eq!(i.ordinal_at(7), None);
        assert_eq!(i.first_ending_after(6), 1);
        assert_eq!(i.ends_in(0, 10), &[6, 9]);
        assert_eq!(i.last_end_within(6, 10), Some(9));
        assert_eq!(i.first_end_after(11), None);
    }

    #[test]
    fn extend_is_push_of_each_and_keeps_ends_ascending() {
        let mut i = index(&[6]);
        i.extend([9, 11]);
        assert_eq!((i.next(), i.end(), i.ordinal_at(9)), (3, 11, Some(2)));
        let backwards = std::panic::catch_unwind(move || i.extend([12, 12]));
        assert!(backwards.is_err(), "a repeated end is refused");
    }

    #[test]
    fn retention_keeps_surviving_ordinals() {
        let mut i = index(&[6, 9, 11]);
        i.drop_before(9);
        assert_eq!(
            (i.next(), i.ordinal_at(9), i.offset_of(3)),
            (3, Some(2), Some(11))
        );
        assert_eq!(i.offset_of(1), None);
        assert!(!i.is_boundary(6));
        i.truncate(2);
        assert_eq!((i.next(), i.end()), (2, 9));
        i.push(20);
        assert_eq!(i.ordinal_at(20), Some(3));
    }
}
