//! Where recovery found each piece of a stream's bytes (issue 3
//! "Recovery"), kept compact: recovery holds one entry per retained append
//! of every stream until it builds them, so an entry is 32 bytes in one
//! vector (a map of owned pieces took ~200 bytes per append at its peak).
//! Pieces arrive in log order, which is not offset order once the cleaner
//! or a fork relocated some: they are sorted when the stream is built, and
//! of pieces at the same offset the one logged last wins.

/// Where a record's data bytes are: (segment, file position).
pub type Location = (u64, u64);

/// One piece as recovery reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece<'a> {
    pub start: u64,
    pub len: u64,
    pub location: Location,
    /// JSON message ends inside the piece (absolute offsets).
    pub newlines: &'a [u64],
}

#[derive(Clone, Copy, Debug)]
struct Entry {
    start: u64,
    /// Where this piece's newlines begin in `Placed::newlines`.
    newlines_from: u64,
    len: u32,
    segment: u32,
    pos: u32,
    newline_count: u32,
}

const _: () = assert!(std::mem::size_of::<Entry>() == 32);

/// A stream's placed pieces, in the order they were logged.
#[derive(Debug, Default)]
pub struct Placed {
    entries: Vec<Entry>,
    /// The JSON message ends of every piece, concatenated.
    newlines: Vec<u64>,
}

impl Placed {
    /// Adds a piece; a later piece at the same start replaces it.
    pub fn add(&mut self, start: u64, len: u64, location: Location, newlines: &[u64]) {
        // An append is at most a body (`--max-body-bytes`) and segments are
        // at most 4 GiB (`Config::check`): lengths and places fit 32 bits.
        let narrow = |v: u64, what: &str| {
            u32::try_from(v).unwrap_or_else(|_| panic!("a piece's {what} fits 32 bits"))
        };
        self.entries.push(Entry {
            start,
            newlines_from: self.newlines.len() as u64,
            len: narrow(len, "length"),
            segment: narrow(location.0, "segment"),
            pos: narrow(location.1, "position"),
            newline_count: narrow(newlines.len() as u64, "newline count"),
        });
        self.newlines.extend_from_slice(newlines);
    }

    /// Puts the pieces in offset order, keeping the last logged of each
    /// start only.
    pub fn sort(&mut self) {
        // Stable: pieces at one start stay in log order; reversed, the
        // last logged comes first, which is the one `dedup` keeps.
        self.entries.sort_by_key(|e| e.start);
        self.entries.reverse();
        self.entries.dedup_by_key(|e| e.start);
        self.entries.reverse();
    }

    /// The pieces, in offset order once `sort` ran.
    pub fn pieces(&self) -> impl Iterator<Item = Piece<'_>> {
        self.entries.iter().map(|e| {
            let from = e.newlines_from as usize;
            Piece {
                start: e.start,
                len: u64::from(e.len),
                location: (u64::from(e.segment), u64::from(e.pos)),
                newlines: &self.newlines[from..from + e.newline_count as usize],
            }
        })
    }
}

/// The record ordinals of message ends before a stream's retention point,
/// for `wanted` ends (sorted): retention renumbers nothing (extensions
/// §6.1), so an end's ordinal is the first retained one less the message
/// ends after it up to the retention point, known while the log still
/// holds every piece in between. What a deduplicated producer retry of a
/// trimmed append answers after a restart (§6.3).
pub struct Trimmed<'a> {
    pub retained: u64,
    pub first_record: u64,
    pub json: bool,
    pub wanted: &'a [u64],
}

impl Placed {
    /// [`Trimmed`]'s ordinals, as (end, ordinal) in order of end; the
    /// pieces sorted.
    pub fn ordinals_before(&self, trimmed: &Trimmed<'_>) -> Vec<(u64, u64)> {
        let Trimmed {
            retained, wanted, ..
        } = *trimmed;
        // `run` counts the message ends of the contiguous pieces seen last;
        // `found` holds each wanted end's count within that run.
        let (mut run, mut last, mut found) = (0u64, None, Vec::new());
        let mut reached = false;
        for piece in self.pieces().take_while(|p| p.start < retained) {
            let piece_end = piece.start + piece.len;
            if last.is_some_and(|covered| covered != piece.start) {
                (run, found) = (0, Vec::new());
            }
            last = Some(piece_end);
            let ends = match trimmed.json {
                true => piece.newlines,
                false => std::slice::from_ref(&piece_end),
            };
            for &end in ends.iter().take_while(|&&end| end <= retained) {
                run += 1;
                reached = end == retained;
                if wanted.binary_search(&end).is_ok() {
                    found.push((end, run));
                }
            }
        }
        // The run must reach the retention point, whose ordinal is known.
        if !reached {
            return Vec::new();
        }
        let first = trimmed.first_record;
        found
            .into_iter()
            .filter_map(|(end, at)| Some((end, first.checked_sub(run - at)?)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sorted_by_start_with_the_last_logged_piece_winning() {
        let mut placed = Placed::default();
        placed.add(10, 5, (2, 4096), &[12, 15]);
        placed.add(0, 10, (1, 0), &[]);
        placed.add(10, 5, (7, 8192), &[15]);
        placed.add(15, 1, (2, 4101), &[16]);
        placed.sort();
        let got: Vec<(u64, u64, Location, Vec<u64>)> = placed
            .pieces()
            .map(|p| (p.start, p.len, p.location, p.newlines.to_vec()))
            .collect();
        assert_eq!(
            got,
            [
                (0, 10, (1, 0), vec![]),
                (10, 5, (7, 8192), vec![15]),
                (15, 1, (2, 4101), vec![16]),
            ]
        );
    }

    #[test]
    fn trimmed_ends_count_back_from_the_first_retained_record() {
        let trimmed = |placed: &Placed, retained, json, wanted: &[u64]| {
            let first_record = 10;
            placed.ordinals_before(&Trimmed {
                retained,
                first_record,
                json,
                wanted,
            })
        };
        // Byte messages 0..4, 4..6, 6..9: retained from 9 (ordinal 10).
        let mut bytes = Placed::default();
        for (start, len) in [(0, 4), (4, 2), (6, 3), (9, 5)] {
            bytes.add(start, len, (1, start), &[]);
        }
        bytes.sort();
        assert_eq!(trimmed(&bytes, 9, false, &[4, 6]), [(4, 8), (6, 9)]);
        assert_eq!(trimmed(&bytes, 6, false, &[4]), [(4, 9)]);
        // A retention point that ends no message is no anchor.
        assert_eq!(trimmed(&bytes, 5, false, &[4]), []);
        // JSON: a piece holding several records, retained inside it.
        let mut json = Placed::default();
        json.add(0, 4, (1, 0), &[2, 4]);
        json.add(4, 6, (1, 4), &[6, 8, 10]);
        json.sort();
        assert_eq!(
            trimmed(&json, 8, true, &[2, 4, 6]),
            [(2, 7), (4, 8), (6, 9)]
        );
        // A piece missing in between: only ends after the gap count.
        let mut gapped = Placed::default();
        gapped.add(0, 4, (1, 0), &[]);
        gapped.add(6, 3, (1, 6), &[]);
        gapped.sort();
        assert_eq!(trimmed(&gapped, 9, false, &[4]), []);
        assert_eq!(trimmed(&gapped, 9, false, &[9]), [(9, 10)]);
    }
}
