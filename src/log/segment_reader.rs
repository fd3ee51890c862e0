//! Forward reads of one segment file through a bounded window (issue 3
//! "Recovery"; STATUS Next 12): recovery scans a segment `WINDOW_BYTES` at
//! a time, keeping only what a record that spans two reads needs, so a
//! restart's memory does not grow with cores × `--segment-bytes`.
//!
//! The window holds the file's bytes `[start, start + window.len())`; the
//! next read always begins at its end, which stays `BLOCK`-aligned until
//! the file ends (direct reads return whole blocks except at the end).

use std::io;

use super::aligned::{AlignedBuf, BLOCK};
use super::format;
use super::storage::{SegmentFile, Storage};

/// Bytes asked of the file in one read.
pub const WINDOW_BYTES: usize = 4 << 20;

pub struct SegmentReader<F> {
    file: F,
    window: Vec<u8>,
    /// File position of `window[0]`.
    start: u64,
    /// The file has been read to its end.
    ended: bool,
    /// The read buffer, kept between reads.
    spare: Option<AlignedBuf>,
}

impl<F: SegmentFile> SegmentReader<F> {
    /// Opens segment `index`; nothing is read yet.
    pub async fn open<S: Storage<File = F>>(storage: &S, index: u64) -> io::Result<Self> {
        Ok(Self {
            file: storage.open(index).await?,
            window: Vec::new(),
            start: 0,
            ended: false,
            spare: None,
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
        let at = ((pos - self.start) as usize).min(self.window.len());
        &self.window[at..]
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
        if pos > self.start + self.window.len() as u64 {
            self.window.clear();
            self.start = pos - pos % BLOCK as u64;
        }
        while !self.ended && self.start + (self.window.len() as u64) < pos + len {
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

    /// Drops the bytes before `keep_from` and reads the next
    /// `WINDOW_BYTES` of the file onto the window.
    async fn read_more(&mut self, keep_from: u64) -> io::Result<()> {
        let drop = ((keep_from.max(self.start) - self.start) as usize).min(self.window.len());
        self.window.drain(..drop);
        self.start += drop as u64;
        let next = self.start + self.window.len() as u64;
        debug_assert!(next.is_multiple_of(BLOCK as u64), "reads stay aligned");
        let mut buf = self
            .spare
            .take()
            .unwrap_or_else(|| AlignedBuf::with_capacity(WINDOW_BYTES));
        buf.clear();
        let (result, buf) = self.file.read_at(buf, next).await;
        let n = result?;
        self.window.extend_from_slice(&buf.as_slice()[..n]);
        self.spare = Some(buf);
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
