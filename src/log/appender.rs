//! The write side of one shard's log (issue 3 "The log", "Group commit"):
//! batches of framed records go to the current segment through one aligned
//! O_DIRECT write that starts at the block holding the end of the data (the
//! partial last block is kept in memory and written again), then one data
//! sync. Segments are preallocated (zero-filled) ahead of need, in the
//! background, so commits overwrite blocks that were already written.
//!
//! A batch never spans segments: when it does not fit, the log moves to the
//! next segment first (the old one ends with zeros). After a failed write or
//! sync the written range is scrubbed back to zeros, so a restart cannot
//! resurrect records whose writers were told they failed; until a scrub
//! succeeds the appender refuses writes.

use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use super::aligned::{AlignedBuf, BLOCK};
use super::storage::{PREALLOC_CHUNK, SegmentFile, Storage};

/// Where the data of the log ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LogEnd {
    pub segment: u64,
    pub pos: u64,
}

pub struct Appender<S: Storage + 'static> {
    storage: Rc<S>,
    segment_bytes: u64,
    segment: u64,
    file: S::File,
    /// End of the data in the current segment.
    write_pos: u64,
    /// The bytes of the partial block `[block_start, write_pos)`.
    tail: Vec<u8>,
    /// The next segment, being preallocated in the background.
    spare: Option<monoio::task::JoinHandle<io::Result<()>>>,
    /// A failed batch left bytes in `[from, to)` that a scrub must zero.
    dirty: Option<(u64, u64)>,
    written_unsynced: bool,
    /// How long each data sync took, until `take_sync_times` (metrics).
    sync_times: Vec<Duration>,
    /// The last batch's write buffer, reused by the next: allocating a
    /// fresh zeroed, aligned buffer per commit made the allocator fault in
    /// (and the kernel zero) new pages on the hot path.
    buffer: Option<AlignedBuf>,
}

/// Sync times kept for a caller that never takes them (re-sharding).
const MAX_SYNC_TIMES: usize = 64;

fn block_start(pos: u64) -> u64 {
    pos - pos % BLOCK as u64
}

impl<S: Storage + 'static> Appender<S> {
    /// Opens the log for appending at `end` (from recovery), whose partial
    /// block holds `tail`. A log without segments starts at segment 1.
    /// `scrub_to`: recovery found a torn tail; the segment is zeroed from
    /// the partial block up to there before anything is written.
    pub async fn open(
        storage: Rc<S>,
        segment_bytes: u64,
        end: Option<LogEnd>,
        tail: Vec<u8>,
        scrub_to: Option<u64>,
    ) -> io::Result<Self> {
        assert!(segment_bytes >= 2 * BLOCK as u64 && segment_bytes.is_multiple_of(BLOCK as u64));
        let end = match end {
            Some(end) => end,
            None => {
                storage.preallocate(1, segment_bytes).await?;
                LogEnd { segment: 1, pos: 0 }
            }
        };
        assert_eq!(
            tail.len() as u64,
            end.pos - block_start(end.pos),
            "tail must be the partial block"
        );
        let file = storage.open(end.segment).await?;
        let mut appender = Appender {
            storage,
            segment_bytes,
            segment: end.segment,
            file,
            write_pos: end.pos,
            tail,
            spare: None,
            dirty: scrub_to.map(|to| (block_start(end.pos), to.max(block_start(end.pos)))),
            written_unsynced: false,
            sync_times: Vec::new(),
            buffer: None,
        };
        appender.scrub().await?;
        appender.prepare_spare();
        Ok(appender)
    }

    pub fn end(&self) -> LogEnd {
        LogEnd {
            segment: self.segment,
            pos: self.write_pos,
        }
    }

    /// The most bytes one batch may carry: a whole empty segment.
    pub fn max_batch_bytes(&self) -> u64 {
        self.segment_bytes
    }

    /// Starts preallocating (zero-filling) the next segment once the
    /// current one is an eighth full: under sustained writes a roll that
    /// finds no spare stalls every commit for the whole zero-fill (tail
    /// latency spikes of a few hundred ms were seen starting at half).
    fn prepare_spare(&mut self) {
        if self.spare.is_some() || self.write_pos < self.segment_bytes / 8 {
            return;
        }
        let storage = self.storage.clone();
        let (next, bytes) = (self.segment + 1, self.segment_bytes);
        let exists = storage.list().map(|l| l.contains(&next)).unwrap_or(false);
        self.spare = Some(monoio::spawn(async move {
            if exists {
                Ok(())
            } else {
                storage.preallocate(next, bytes).await
            }
        }));
    }

    /// Waits for a background preallocation to end, so that nothing of the
    /// log is in flight once the appender is dropped (a runtime that ends
    /// with the zero-fill pending leaks its file, and with it the file's
    /// lock: `log::handover`).
    pub async fn settle(&mut self) {
        if let Some(spare) = self.spare.take() {
            let _ = spare.await;
        }
    }

    /// Moves to the next segment (waiting for its preallocation).
    async fn roll(&mut self) -> io::Result<()> {
        self.sync().await?;
        // A background preallocation that failed may have failed long ago
        // (the disk was full then): try again now rather than report it.
        // After a failure no spare is kept, so the next roll retries too.
        let ready = match self.spare.take() {
            Some(handle) => handle.await.is_ok(),
            None => false,
        };
        if !ready {
            let next = self.segment + 1;
            if !self.storage.list()?.contains(&next) {
                self.storage.preallocate(next, self.segment_bytes).await?;
            }
        }
        self.file = self.storage.open(self.segment + 1).await?;
        self.segment += 1;
        self.write_pos = 0;
        self.tail.clear();
        self.prepare_spare();
        Ok(())
    }

    /// Writes `records` (whole framed records) after the data and, when
    /// `sync`, makes them durable. On error nothing of the batch may count:
    /// the caller rolls back everything it had not seen committed.
    /// Returns where the first record landed.
    pub async fn append(&mut self, records: &[u8], sync: bool) -> io::Result<LogEnd> {
        // `Commits::enqueue` refuses a record larger than a segment, and a
        // batch is cut at a segment's worth: this is a last defence, failing
        // the batch as a write error would, rather than an assert.
        if records.len() as u64 > self.segment_bytes {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a record larger than a segment",
            ));
        }
        self.scrub().await?;
        if self.write_pos + records.len() as u64 > self.segment_bytes {
            self.roll().await?;
        }
        let landed = self.end();
        let start = block_start(self.write_pos);
        let mut buf = match self.buffer.take() {
            Some(mut kept) => {
                kept.clear();
                kept
            }
            None => AlignedBuf::with_capacity(self.tail.len() + records.len()),
        };
        buf.extend_from_slice(&self.tail);
        buf.extend_from_slice(records);
        let end = start + buf.len() as u64;
        let new_tail = buf.as_slice()[(block_start(end) - start) as usize..].to_vec();
        buf.pad_to_block();
        let written = start + buf.len() as u64;
        let (mut result, back) = self.write_all(buf, start).await;
        self.buffer = back.filter(|b| super::worth_keeping(b.capacity(), b.len()));
        if result.is_ok() {
            // A write-through segment made the batch durable already.
            self.written_unsynced = !self.file.write_through();
            if sync {
                result = self.sync().await;
            }
        }
        if let Err(e) = result {
            // Scrub now, before the writers hear of the failure, so a
            // restart cannot replay what they were told failed. If the
            // scrub fails too, the next append retries it first.
            self.dirty = Some((start, written));
            let _ = self.scrub().await;
            return Err(e);
        }
        self.tail = new_tail;
        self.write_pos = end;
        self.prepare_spare();
        Ok(landed)
    }

    /// Writes all of `buf` at `pos`; gives the buffer back for reuse.
    async fn write_all(
        &self,
        mut buf: AlignedBuf,
        mut pos: u64,
    ) -> (io::Result<()>, Option<AlignedBuf>) {
        loop {
            let total = buf.len();
            let (result, back) = self.file.write_at(buf, pos).await;
            let n = match result {
                Ok(n) => n,
                Err(e) => return (Err(e), None),
            };
            if n == total {
                return (Ok(()), Some(back));
            }
            if n == 0 || n % BLOCK != 0 {
                let short = format!("short write: {n} of {total} bytes");
                return (Err(io::Error::new(io::ErrorKind::WriteZero, short)), None);
            }
            let mut rest = AlignedBuf::with_capacity(total - n);
            rest.extend_from_slice(&back.as_slice()[n..]);
            buf = rest;
            pos += n as u64;
        }
    }

    /// Makes every write so far durable.
    pub async fn sync(&mut self) -> io::Result<()> {
        if self.written_unsynced {
            self.sync_data().await?;
            self.written_unsynced = false;
        }
        Ok(())
    }

    /// One data sync of the current segment, timed.
    async fn sync_data(&mut self) -> io::Result<()> {
        let began = Instant::now();
        let result = self.file.sync_data().await;
        if self.sync_times.len() < MAX_SYNC_TIMES {
            self.sync_times.push(began.elapsed());
        }
        result
    }

    /// How long each data sync since the last call took.
    pub fn take_sync_times(&mut self) -> Vec<Duration> {
        std::mem::take(&mut self.sync_times)
    }

    /// Zeroes what a failed batch may have left behind (keeping the data
    /// before `write_pos`), and syncs. Errors leave the appender refusing.
    async fn scrub(&mut self) -> io::Result<()> {
        let Some((from, to)) = self.dirty else {
            return Ok(());
        };
        debug_assert_eq!(from, block_start(self.write_pos));
        // In parts: the rest of a segment can be GiBs, and one buffer of it
        // made a start after a torn tail peak at that much memory.
        let part = (to - from).min(PREALLOC_CHUNK as u64) as usize;
        let mut buf = AlignedBuf::with_capacity(part);
        let mut pos = from;
        while pos < to {
            let len = (to - pos).min(part as u64) as usize;
            buf.clear();
            buf.resize_zeroed(len);
            if pos == from {
                buf.as_mut_slice()[..self.tail.len()].copy_from_slice(&self.tail);
            }
            let (result, back) = self.write_all(buf, pos).await;
            result?;
            buf = back.expect("a whole write gives its buffer back");
            pos += len as u64;
        }
        self.sync_data().await?;
        self.dirty = None;
        self.written_unsynced = false;
        Ok(())
    }
}
