//! Forward reads of one segment file through a bounded window (issue 3
//! "Recovery"; STATUS Next 12): recovery scans a segment `WINDOW_BYTES` at
//! a time, keeping only what a record that spans two reads needs, so a
//! restart's memory does not grow with cores × `--segment-bytes`.
//!
//! The window holds the file's bytes `[base, base + window.len())`, read
//! straight into it: `base` and the window's length stay `BLOCK`-aligned
//! until the file ends (direct reads return whole blocks except at the
//! end), so each read lands in place, after what is kept.

use std::io;

use super::aligned::{AlignedBuf, BLOCK};
use super::format;
use super::storage::{SegmentFile, Storage};

/// Bytes asked of the file in one read.
pub const WINDOW_BYTES: usize = 4 << 20;

pub struct SegmentReader<F> {
    file: F,
    window: AlignedBuf,
    /// File position of `window[0]`.
    base: u64,
    /// The first position callers may still ask for: bytes before it go
    /// at the next read.
    start: u64,
    /// The file has been read to its end.
    ended: bool,
}

impl<F: SegmentFile> SegmentReader<F> {
    /// Opens segment `index`; nothing is read yet.
    pub async fn open<S: Storage<File = F>>(storage: &S, index: u64) -> io::Result<Self> {
        Ok(Self {
            file: storage.open(index).await?,
            window: AlignedBuf::with_capacity(BLOCK),
            base: 0,
            start: 0,
            ended: false,
        })
    }

    /// The bytes read so far from file position `pos` on (empty past them).
    /// `pos` must not be before the window (`read_more` dropped those).
    pub fn from(&self, pos: u64) -> &[u8] {
        assert!(
            pos >= self.start,
            "{pos} was dropped (window at {})",
            self.start
        );
        let at = ((pos - self.base) as usize).min(self.window.len());
        &self.window.as_slice()[at..]
    }

    /// Makes the record at `pos` whole in the window when the file holds
    /// it: reads on while `format::decode` would answer `Incomplete`, or
    /// less than a record header is there, and the file goes on. Bytes
    /// before `pos` are dropped.
    pub async fn fill_record(&mut self, pos: u64) -> io::Result<()> {
        let wants_more =
            |rest: &[u8]| rest.len() < format::HEADER_BYTES || !format::decidable(rest);
        while !self.ended && wants_more(self.from(pos)) {
            self.read_more(pos).await?;
        }
        Ok(())
    }

    /// The file's bytes `[pos, pos + len)`; bytes before `pos` are dropped,
    /// and a `pos` past what was read skips the bytes in between unread.
    /// Positions asked must not go backwards.
    pub async fn range(&mut self, pos: u64, len: u64) -> io::Result<&[u8]> {
        if pos > self.base + self.window.len() as u64 {
            self.window.clear();
            self.base = pos - pos % BLOCK as u64;
            self.start = self.base;
        }
        while !self.ended && self.base + (self.window.len() as u64) < pos + len {
            self.read_more(pos).await?;
        }
        let from = self.from(pos);
        if (from.len() as u64) < len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("the segment ends before byte {}", pos + len),
            ));
        }
        Ok(&from[..len as usize])
    }

    /// Drops the whole blocks before `keep_from` and reads the next part of
    /// the file onto the window: what room it has, and a window more only
    /// when what is kept (a record larger than the room) leaves under half.
    async fn read_more(&mut self, keep_from: u64) -> io::Result<()> {
        self.start = keep_from.max(self.start);
        let before = (self.start - self.base) as usize;
        let drop = (before - before % BLOCK).min(self.window.len());
        self.window.drain_front(drop);
        self.base += drop as u64;
        let next = self.base + self.window.len() as u64;
        assert!(next.is_multiple_of(BLOCK as u64), "reads stay aligned");
        if self.window.capacity() - self.window.len() < WINDOW_BYTES / 2 {
            self.window.reserve(WINDOW_BYTES);
        }
        let window = std::mem::replace(&mut self.window, AlignedBuf::with_capacity(BLOCK));
        let had = window.len();
        let (result, window) = self.file.read_after(window, next).await;
        self.window = window;
        let n = result?;
        debug_assert_eq!(self.window.len(), had + n);
        // A read of nothing is the end, and so is one ending off a block
        // boundary (direct reads return whole blocks but at the end of a
        // file). A short read of whole blocks is no proof of it: stopping
        // there would make a torn tail of what follows.
        if n == 0 || !n.is_multiple_of(BLOCK) {
            self.ended = true;
        }
        Ok(())
    }
}

/// The bytes of segment `index` from the start of the block holding `pos`
/// up to `pos`: the partial block appending continues after.
pub async fn block_before<S: Storage>(storage: &S, index: u64, pos: u64) -> io::Result<Vec<u8>> {
    let block_start = pos - pos % BLOCK as u64;
    let wanted = (pos - block_start) as usize;
    if wanted == 0 {
        return Ok(Vec::new());
    }
    let file = storage.open(index).await?;
    let (result, buf) = file
        .read_at(AlignedBuf::with_capacity(BLOCK), block_start)
        .await;
    let n = result?;
    if n < wanted {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("segment {index} ends before byte {pos}"),
        ));
    }
    Ok(buf.as_slice()[..wanted].to_vec())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileExt;

    use super::*;
    use crate::log::storage::DirectStorage;

    fn run<F: std::future::Future>(fut: F) -> F::Output {
        monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
            .build()
            .unwrap()
            .block_on(fut)
    }

    /// Byte `i` of the test segment.
    fn byte(i: u64) -> u8 {
        (i % 251) as u8
    }

    #[test]
    fn reads_land_in_one_window_of_memory() {
        let dir = std::env::temp_dir().join(format!("rill-reader-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let size = 5 * WINDOW_BYTES as u64 + 5 * BLOCK as u64;
        run(async {
            let storage = DirectStorage::new(&dir).unwrap();
            storage.preallocate(1, size).await.unwrap();
            let file = std::fs::OpenOptions::new()
                .write(true)
                .open(storage.path(1));
            let data: Vec<u8> = (0..size).map(byte).collect();
            file.unwrap().write_all_at(&data, 0).unwrap();
            let mut reader = SegmentReader::open(&storage, 1).await.unwrap();
            let (step, len) = (300_001u64, 400_000u64);
            let mut pos = 17;
            let big = 2 * WINDOW_BYTES as u64;
            while pos + len + big <= size {
                let got = reader.range(pos, len).await.unwrap();
                assert!(
                    got.iter().zip(pos..).all(|(b, i)| *b == byte(i)),
                    "at {pos}"
                );
                assert!(reader.window.capacity() <= WINDOW_BYTES, "at {pos}");
                pos += step;
            }
            // A range past what was read skips the bytes in between.
            let mut skipping = SegmentReader::open(&storage, 1).await.unwrap();
            for at in [5, 2 * WINDOW_BYTES as u64 + 4_000, size - 10_000] {
                let got = skipping.range(at, 9_000).await.unwrap();
                assert!(got.iter().zip(at..).all(|(b, i)| *b == byte(i)), "at {at}");
            }
            // A range larger than the window grows it, and still reads.
            let got = reader.range(pos, big).await.unwrap();
            assert!(got.iter().zip(pos..).all(|(b, i)| *b == byte(i)));
            assert_eq!(got.len() as u64, big);
        });
        let _ = std::fs::remove_dir_all(&dir);
    }
}
