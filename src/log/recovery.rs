//! Recovery (issue 3 "Recovery"): scans a shard's segments in order,
//! validates every record, replays committed batches through the caller's
//! `apply`, and decides what the end of the log is.
//!
//! Decision table (each row has a test):
//!
//! | found at position P                                     | decision                                   |
//! |---------------------------------------------------------|--------------------------------------------|
//! | valid record, seq = expected                            | replay (when its batch is complete)        |
//! | valid record, seq < expected                            | duplicate (a cleaner copy): skip           |
//! | valid record, seq > expected, first in its segment      | a cleaned segment was removed: continue    |
//! | valid record, seq > expected, inside a segment          | corrupt: records are missing               |
//! | zero-filled space                                       | end of this segment's data; next segment   |
//! | records after the last batch-end mark, then zeros/EOF   | torn tail: never acknowledged, dropped     |
//! | damaged record, and no complete batch anywhere after it | torn tail: truncate at the last batch end  |
//! | damaged record, and a complete batch after it           | corrupt: refuse to start (file, position, `rill repair`) |
//! | file shorter than a record it holds                     | same as a damaged record                   |
//!
//! A batch is the unit of group commit: its last record carries the
//! batch-end flag, so a batch counts only if it was written whole.

use std::io;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use super::aligned::{AlignedBuf, BLOCK};
use super::appender::LogEnd;
use super::format::{self, Decoded, FLAG_BATCH_END, RECORD_ALIGN, Record};
use super::storage::{SegmentFile, Storage};

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    pub segments: usize,
    pub records: u64,
    pub bytes: u64,
    pub duplicates: u64,
    /// Records of an incomplete last batch that were dropped, and where.
    pub torn: Option<(LogEnd, u64)>,
    pub elapsed: Duration,
}

/// The state recovery leaves the log in.
pub struct Recovered {
    /// Where appending continues (`None`: the log has no segment yet).
    pub end: Option<LogEnd>,
    /// The partial block at `end`.
    pub tail: Vec<u8>,
    /// The first sequence number not used yet.
    pub next_seq: u64,
    /// Bytes after `end` in its segment that must be zeroed before use.
    pub scrub_to: Option<u64>,
    pub report: Report,
}

#[derive(Debug)]
pub enum RecoveryError {
    Io(io::Error),
    /// A damaged or inconsistent record before the tail.
    Corrupt {
        path: PathBuf,
        pos: u64,
        reason: String,
    },
}

impl std::fmt::Display for RecoveryError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecoveryError::Io(e) => write!(f, "I/O error while recovering the log: {e}"),
            RecoveryError::Corrupt { path, pos, reason } => write!(
                f,
                "corrupt record in {} at byte {pos}: {reason}. Records after it were committed, so \
                 rill will not guess. `rill repair --data-dir DIR` shows what truncating the log \
                 there would lose and, with --yes, does it",
                path.display()
            ),
        }
    }
}

impl From<io::Error> for RecoveryError {
    fn from(e: io::Error) -> Self {
        RecoveryError::Io(e)
    }
}

/// One segment's bytes, read whole (to the end of its file) through
/// io_uring. `size_hint` is the configured segment size; a segment written
/// under another `--segment-bytes` is as long as it was then, and all of
/// it must be read: stopping at the configured size cut acknowledged
/// records off as a torn tail.
pub async fn read_segment<S: Storage>(
    storage: &S,
    index: u64,
    size_hint: u64,
) -> io::Result<Vec<u8>> {
    let file = storage.open(index).await?;
    let mut data = Vec::with_capacity(size_hint as usize);
    let chunk = 4 << 20;
    loop {
        let (result, buf) = file
            .read_at(AlignedBuf::with_capacity(chunk), data.len() as u64)
            .await;
        let n = result?;
        data.extend_from_slice(&buf.as_slice()[..n]);
        // A read of nothing is the end, and so is one ending off a block
        // boundary (direct reads return whole blocks but at the end of a
        // file). A short read of whole blocks is no proof of it: stopping
        // there would make a torn tail of what follows.
        if n == 0 || !n.is_multiple_of(BLOCK) {
            return Ok(data);
        }
    }
}

/// The scan state across segments.
struct Scan {
    expected: Option<u64>,
    /// Records of the batch being read, not yet known to be complete.
    batch: Vec<(Vec<u8>, u8, u64, LogEnd)>,
    /// Where that batch starts.
    batch_start: Option<LogEnd>,
    /// Where the last complete batch ended.
    committed_end: Option<LogEnd>,
    report: Report,
}

impl Scan {
    /// Where appending must continue, given where damage was found.
    fn cut(&self, damage: Option<LogEnd>) -> Option<LogEnd> {
        self.batch_start.or(damage).or(self.committed_end)
    }
}

/// Whether any complete batch (a valid record with the batch-end flag)
/// starts after `from` in `data`.
fn complete_batch_after(data: &[u8], from: usize) -> bool {
    let mut pos = from.next_multiple_of(RECORD_ALIGN);
    while pos + format::HEADER_BYTES <= data.len() {
        if let Decoded::Record { record, .. } = format::decode(&data[pos..])
            && record.flags & FLAG_BATCH_END != 0
        {
            return true;
        }
        pos += RECORD_ALIGN;
    }
    false
}

pub async fn recover<S: Storage>(
    storage: &S,
    segment_bytes: u64,
    mut apply: impl FnMut(u8, &[u8], LogEnd) -> Result<(), String>,
) -> Result<Recovered, RecoveryError> {
    let started = Instant::now();
    let segments = storage.list()?;
    let mut scan = Scan {
        expected: None,
        batch: Vec::new(),
        batch_start: None,
        committed_end: None,
        report: Report::default(),
    };
    let mut damage: Option<(LogEnd, String)> = None;
    let mut cut_data: Vec<u8> = Vec::new();
    for &index in &segments {
        let data = read_segment(storage, index, segment_bytes).await?;
        scan.report.segments += 1;
        if let Some((at, reason)) = &damage {
            if complete_batch_after(&data, 0) {
                return Err(corrupt(storage, at.segment, at.pos, reason));
            }
            continue;
        }
        if let Some((pos, reason)) = scan_segment(&mut scan, index, &data, &mut apply)? {
            if complete_batch_after(&data, pos as usize + RECORD_ALIGN) {
                return Err(corrupt(storage, index, pos, &reason));
            }
            damage = Some((
                LogEnd {
                    segment: index,
                    pos,
                },
                reason,
            ));
        }
        if scan
            .cut(damage.as_ref().map(|d| d.0))
            .is_some_and(|cut| cut.segment == index)
        {
            cut_data = data;
        }
    }
    let first = segments.first().map(|&segment| LogEnd { segment, pos: 0 });
    let torn = damage.is_some() || !scan.batch.is_empty();
    let end = scan.cut(damage.map(|d| d.0)).or(first);
    let dropped = scan.batch.len() as u64;
    let next_seq = scan
        .batch
        .first()
        .map_or(scan.expected.unwrap_or(1), |(_, _, seq, _)| *seq);
    let tail = match end {
        Some(end) => {
            cut_data[(end.pos - end.pos % BLOCK as u64) as usize..end.pos as usize].to_vec()
        }
        None => Vec::new(),
    };
    if torn && let Some(end) = end {
        scan.report.torn = Some((end, dropped));
    }
    scan.report.elapsed = started.elapsed();
    // Zero what follows the cut up to the end of its segment's file (which
    // may be longer than `segment_bytes` if it was written under a larger
    // setting), so no torn bytes stay behind for a later scan.
    let scrub_to = torn.then(|| segment_bytes.max(cut_data.len().next_multiple_of(BLOCK) as u64));
    Ok(Recovered {
        end,
        tail,
        next_seq,
        scrub_to,
        report: scan.report,
    })
}

fn corrupt<S: Storage>(storage: &S, segment: u64, pos: u64, reason: &str) -> RecoveryError {
    RecoveryError::Corrupt {
        path: storage.path(segment),
        pos,
        reason: reason.to_string(),
    }
}

/// Scans one segment; returns the position and reason of a damaged record.
fn scan_segment(
    scan: &mut Scan,
    index: u64,
    data: &[u8],
    apply: &mut impl FnMut(u8, &[u8], LogEnd) -> Result<(), String>,
) -> Result<Option<(u64, String)>, RecoveryError> {
    let mut pos = 0usize;
    loop {
        let record = match format::decode(&data[pos..]) {
            Decoded::Record { record, framed_len } => (record, framed_len),
            Decoded::End => return Ok(None),
            Decoded::Incomplete if pos == data.len() => return Ok(None),
            Decoded::Incomplete => {
                return Ok(Some((
                    pos as u64,
                    "record runs past the end of the file".into(),
                )));
            }
            Decoded::Corrupt(reason) => return Ok(Some((pos as u64, reason.into()))),
        };
        let (record, framed_len): (Record, usize) = record;
        match scan.expected {
            Some(expected) if record.seq < expected => {
                scan.report.duplicates += 1;
                // Between batches, the log's data goes on past a duplicate:
                // appending must not start before it (a new batch would
                // overwrite part of the copy and leave the rest behind it).
                if scan.batch.is_empty() {
                    scan.committed_end = Some(LogEnd {
                        segment: index,
                        pos: (pos + framed_len) as u64,
                    });
                }
            }
            // A gap where a segment starts is a segment the cleaner removed;
            // inside a segment it means records are missing.
            Some(expected) if record.seq > expected && (pos > 0 || !scan.batch.is_empty()) => {
                return Ok(Some((
                    pos as u64,
                    format!("sequence gap: expected {expected}, found {}", record.seq),
                )));
            }
            _ => {
                scan.expected = Some(record.seq + 1);
                if scan.batch.is_empty() {
                    scan.batch_start = Some(LogEnd {
                        segment: index,
                        pos: pos as u64,
                    });
                }
                let at = LogEnd {
                    segment: index,
                    pos: pos as u64,
                };
                scan.batch
                    .push((record.payload.to_vec(), record.kind, record.seq, at));
                if record.flags & FLAG_BATCH_END != 0 {
                    commit_batch(scan, apply)?;
                    scan.batch_start = None;
                    scan.committed_end = Some(LogEnd {
                        segment: index,
                        pos: (pos + framed_len) as u64,
                    });
                }
            }
        }
        scan.report.bytes += framed_len as u64;
        pos += framed_len;
    }
}

fn commit_batch(
    scan: &mut Scan,
    apply: &mut impl FnMut(u8, &[u8], LogEnd) -> Result<(), String>,
) -> Result<(), RecoveryError> {
    for (payload, kind, seq, at) in scan.batch.drain(..) {
        apply(kind, &payload, at).map_err(|reason| RecoveryError::Corrupt {
            path: PathBuf::from("(record payload)"),
            pos: seq,
            reason: format!("record seq {seq} does not decode: {reason}"),
        })?;
        scan.report.records += 1;
    }
    Ok(())
}
