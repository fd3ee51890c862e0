//! Reads of stream bytes for responses (issue 3 "Bounded memory"): the
//! cached suffix is copied from memory; older bytes are read from the log's
//! segment files through io_uring with aligned O_DIRECT reads.

use std::cell::RefCell;
use std::collections::HashMap;
use std::io;
use std::rc::Rc;

use super::Shard;
use crate::log::aligned::{AlignedBuf, BLOCK};
use crate::log::storage::{DirectFile, DirectStorage, SegmentFile, Storage};
use crate::metrics::Counter;
use crate::stream::data::Extent;

/// Open segment files for reading, by index (bounded; reopened on demand).
pub struct Segments {
    storage: Rc<DirectStorage>,
    files: RefCell<HashMap<u64, Rc<DirectFile>>>,
}

const MAX_OPEN_SEGMENTS: usize = 64;

impl Segments {
    pub fn new(storage: Rc<DirectStorage>) -> Segments {
        Segments {
            storage,
            files: RefCell::default(),
        }
    }

    async fn file(&self, segment: u64) -> io::Result<Rc<DirectFile>> {
        if let Some(file) = self.files.borrow().get(&segment) {
            return Ok(file.clone());
        }
        let file = Rc::new(self.storage.open(segment).await?);
        let mut files = self.files.borrow_mut();
        if files.len() >= MAX_OPEN_SEGMENTS {
            files.clear();
        }
        files.insert(segment, file.clone());
        Ok(file)
    }

    /// Appends `len` bytes at `pos` of `segment` to `out`.
    pub async fn read_range(
        &self,
        segment: u64,
        pos: u64,
        len: u64,
        out: &mut Vec<u8>,
    ) -> io::Result<()> {
        self.read(segment, pos, len, out).await
    }

    async fn read(&self, segment: u64, pos: u64, len: u64, out: &mut Vec<u8>) -> io::Result<()> {
        let file = self.file(segment).await?;
        let from = pos - pos % BLOCK as u64;
        let to = (pos + len).next_multiple_of(BLOCK as u64);
        let (result, buf) = file
            .read_at(AlignedBuf::with_capacity((to - from) as usize), from)
            .await;
        let n = result? as u64;
        let skip = pos - from;
        if n < skip + len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!("segment {segment} ends before byte {}", pos + len),
            ));
        }
        out.extend_from_slice(&buf.as_slice()[skip as usize..(skip + len) as usize]);
        Ok(())
    }

    /// The shard's log directory.
    pub fn dir(&self) -> &std::path::Path {
        self.storage.dir()
    }

    /// Indexes of the segment files on disk.
    pub fn on_disk(&self) -> io::Result<Vec<u64>> {
        self.storage.list()
    }

    /// Forgets open handles of a removed segment.
    pub fn forget(&self, segment: u64) {
        self.files.borrow_mut().remove(&segment);
    }
}

/// Times one fetch follows its data to new segments before giving up.
const MAX_MOVES: u32 = 64;

/// Why bytes could not be fetched.
#[derive(Debug)]
pub enum FetchError {
    /// The stream was deleted or replaced meanwhile.
    Gone,
    /// Retention passed the read while it was served: the bytes before
    /// `retained` are no longer the stream's.
    Trimmed {
        retained: u64,
    },
    Io(io::Error),
}

/// The bytes `[start, end)` of the stream `key` (incarnation `id`).
/// Uncached bytes come from the log; eviction running meanwhile only moves
/// the boundary, so the loop reads from the log until the rest is cached.
pub async fn fetch(
    shard: &Shard,
    key: &str,
    id: u64,
    start: u64,
    end: u64,
) -> Result<Vec<u8>, FetchError> {
    fetch_above(shard, key, id, (start, end), |s| s.retained).await
}

/// Pins a stream incarnation's log locations from an offset on, for one
/// response that announced a whole body (`stream::pins`); the floor moves
/// up as the response fetches, and the pin ends when this drops.
pub struct ReadPin<'a> {
    shard: &'a Shard,
    key: String,
    id: u64,
    token: u64,
}

impl<'a> ReadPin<'a> {
    pub fn new(shard: &'a Shard, key: &str, id: u64, from: u64) -> ReadPin<'a> {
        let token = shard.table.borrow_mut().pin_reads(id, from);
        ReadPin {
            shard,
            key: key.to_string(),
            id,
            token,
        }
    }

    pub fn shard(&self) -> &'a Shard {
        self.shard
    }

    /// The pinned incarnation.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// The response no longer reads bytes before `floor`.
    pub fn advance(&self, floor: u64) {
        let mut table = self.shard.table.borrow_mut();
        table.advance_pin(&self.key, self.id, self.token, floor);
    }

    /// `fetch` for the pinned response: bytes that retention passed after
    /// it began are still served. Nothing before `start` is read again.
    pub async fn fetch(&self, start: u64, end: u64) -> Result<Vec<u8>, FetchError> {
        self.advance(start);
        let readable = |s: &crate::stream::state::Stream| s.data.readable_from();
        fetch_above(self.shard, &self.key, self.id, (start, end), readable).await
    }
}

impl Drop for ReadPin<'_> {
    fn drop(&mut self) {
        let mut table = self.shard.table.borrow_mut();
        table.unpin_reads(&self.key, self.id, self.token);
    }
}

/// `fetch`, refusing positions below `floor` of the stream.
async fn fetch_above(
    shard: &Shard,
    key: &str,
    id: u64,
    (start, end): (u64, u64),
    floor: impl Fn(&crate::stream::state::Stream) -> u64,
) -> Result<Vec<u8>, FetchError> {
    let mut out = Vec::with_capacity((end - start) as usize);
    let mut pos = start;
    // A segment found missing, and how often data moved under this read.
    let mut missing: Option<(u64, io::Error)> = None;
    let mut moves = 0;
    let mut from_log = 0;
    while pos < end {
        let (extents, to) = {
            let table = shard.table.borrow();
            let stream = table
                .get(key)
                .filter(|s| s.id == id)
                .ok_or(FetchError::Gone)?;
            // Extents before `retained` are dropped: reading on would
            // return the bytes after them short and shifted.
            if pos < floor(stream) {
                let retained = stream.retained;
                return Err(FetchError::Trimmed { retained });
            }
            let cached_from = stream.data.cache_start();
            if cached_from <= pos {
                stream.data.copy_cached(pos, end, &mut out);
                break;
            }
            let to = cached_from.min(end);
            (stream.data.extents_in(pos, to).to_vec(), to)
        };
        // A segment still named after it was found missing is really gone.
        if let Some((segment, e)) = missing.take()
            && extents.iter().any(|x| x.segment == segment)
        {
            return Err(FetchError::Io(e));
        }
        for run in runs(&extents, pos, to) {
            match read_run(&shard.segments, run, pos, to, &mut out).await {
                Ok(()) => {}
                // The cleaner moved the data and removed its segment since
                // the extents were read: read them again, as long as they
                // moved (a long read under a busy cleaner may see many).
                Err(e) if e.kind() == io::ErrorKind::NotFound && moves < MAX_MOVES => {
                    out.truncate((pos - start) as usize);
                    moves += 1;
                    missing = Some((run[0].segment, e));
                    break;
                }
                Err(e) => return Err(FetchError::Io(e)),
            }
        }
        if missing.is_some() {
            continue;
        }
        from_log += to - pos;
        pos = to;
    }
    debug_assert_eq!(out.len() as u64, end - start);
    count_fetch(shard, end - start, from_log);
    Ok(out)
}

/// A fetch of `len` bytes, `from_log` of them read from the segments: a
/// cache hit when none were (empty fetches are not reads).
fn count_fetch(shard: &Shard, len: u64, from_log: u64) {
    debug_assert!(from_log <= len);
    let counter = match (len, from_log) {
        (0, _) => return,
        (_, 0) => Counter::CacheHits,
        _ => Counter::CacheMisses,
    };
    shard.metrics.add(counter, 1);
    shard.metrics.add(Counter::LogReadBytes, from_log);
}

/// Extents read together: same segment, each within `RUN_GAP_BYTES` of the
/// previous one's end, the whole span at most `RUN_SPAN_BYTES`. A stream's
/// appends lie close together in the log (between other streams' records),
/// so one larger sequential read replaces many 4 KiB ones.
const RUN_GAP_BYTES: u64 = 64 << 10;
const RUN_SPAN_BYTES: u64 = 1 << 20;

fn runs(extents: &[Extent], from: u64, to: u64) -> Vec<&[Extent]> {
    let wanted: Vec<usize> = (0..extents.len())
        .filter(|&i| extents[i].start.max(from) < extents[i].end().min(to))
        .collect();
    let mut out = Vec::new();
    let mut first = match wanted.first() {
        Some(&i) => i,
        None => return out,
    };
    for pair in wanted.windows(2) {
        let (prev, next) = (&extents[pair[0]], &extents[pair[1]]);
        let head = &extents[first];
        let joins = next.segment == head.segment
            && next.pos >= prev.pos + prev.len
            && next.pos - (prev.pos + prev.len) <= RUN_GAP_BYTES
            && next.pos + next.len - head.pos <= RUN_SPAN_BYTES;
        if !joins {
            out.push(&extents[first..pair[1]]);
            first = pair[1];
        }
    }
    out.push(&extents[first..=*wanted.last().expect("not empty")]);
    out
}

/// Reads one run's span once and appends the parts inside `[from, to)`.
async fn read_run(
    segments: &Segments,
    run: &[Extent],
    from: u64,
    to: u64,
    out: &mut Vec<u8>,
) -> io::Result<()> {
    let (first, last) = (&run[0], &run[run.len() - 1]);
    if run.len() == 1 {
        return read_extent(segments, first, from, to, out).await;
    }
    let span_start = first.pos;
    let mut span = Vec::with_capacity((last.pos + last.len - span_start) as usize);
    segments
        .read(
            first.segment,
            span_start,
            last.pos + last.len - span_start,
            &mut span,
        )
        .await?;
    for extent in run {
        let lo = extent.start.max(from);
        let hi = extent.end().min(to);
        if lo < hi {
            let at = (extent.pos - span_start + (lo - extent.start)) as usize;
            out.extend_from_slice(&span[at..at + (hi - lo) as usize]);
        }
    }
    Ok(())
}

/// The part of `extent` inside `[from, to)`.
async fn read_extent(
    segments: &Segments,
    extent: &Extent,
    from: u64,
    to: u64,
    out: &mut Vec<u8>,
) -> io::Result<()> {
    let lo = extent.start.max(from);
    let hi = extent.end().min(to);
    if lo >= hi {
        return Ok(());
    }
    segments
        .read(
            extent.segment,
            extent.pos + (lo - extent.start),
            hi - lo,
            out,
        )
        .await
}
