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

use super::aligned::BLOCK;
use super::appender::LogEnd;
use super::format::{self, Decoded, FLAG_BATCH_END, RECORD_ALIGN, Record};
use super::segment_reader::{self, SegmentReader};
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
/// starts at or after `from` in the segment `reader` reads.
async fn complete_batch_after<F: SegmentFile>(
    reader: &mut SegmentReader<F>,
    from: u64,
) -> io::Result<bool> {
    let mut pos = from.next_multiple_of(RECORD_ALIGN as u64);
    loop {
        reader.fill_record(pos).await?;
        let rest = reader.from(pos);
        if rest.len() < format::HEADER_BYTES {
            return Ok(false);
        }
        if let Decoded::Record { record, .. } = format::decode(rest)
            && record.flags & FLAG_BATCH_END != 0
        {
            return Ok(true);
        }
        pos += RECORD_ALIGN as u64;
    }
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
    for &index in &segments {
        let mut reader = SegmentReader::open(storage, index).await?;
        scan.report.segments += 1;
        if let Some((at, reason)) = &damage {
            if complete_batch_after(&mut reader, 0).await? {
                return Err(corrupt(storage, at.segment, at.pos, reason));
            }
            continue;
        }
        if let Some((pos, reason)) = scan_segment(&mut scan, index, &mut reader, &mut apply).await?
        {
            if complete_batch_after(&mut reader, pos + RECORD_ALIGN as u64).await? {
                return Err(corrupt(storage, index, pos, &reason));
            }
            let at = LogEnd {
                segment: index,
                pos,
            };
            damage = Some((at, reason));
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
    let (tail, scrub_to) = match end {
        Some(end) => (
            segment_reader::block_before(storage, end.segment, end.pos).await?,
            torn.then(|| scrub_end(storage, end.segment, segment_bytes))
                .transpose()?,
        ),
        None => (Vec::new(), None),
    };
    if torn && let Some(end) = end {
        scan.report.torn = Some((end, dropped));
    }
    scan.report.elapsed = started.elapsed();
    Ok(Recovered {
        end,
        tail,
        next_seq,
        scrub_to,
        report: scan.report,
    })
}

/// Where zeroing after a torn tail in `segment` stops: the end of its file,
/// which may be longer than `segment_bytes` if it was written under a
/// larger setting, so no torn bytes stay behind for a later scan.
fn scrub_end<S: Storage>(storage: &S, segment: u64, segment_bytes: u64) -> io::Result<u64> {
    let len = std::fs::metadata(storage.path(segment))?.len();
    Ok(segment_bytes.max(len.next_multiple_of(BLOCK as u64)))
}

fn corrupt<S: Storage>(storage: &S, segment: u64, pos: u64, reason: &str) -> RecoveryError {
    RecoveryError::Corrupt {
        path: storage.path(segment),
        pos,
        reason: reason.to_string(),
    }
}

/// Scans one segment; returns the position and reason of a damaged record.
async fn scan_segment<F: SegmentFile>(
    scan: &mut Scan,
    index: u64,
    reader: &mut SegmentReader<F>,
    apply: &mut impl FnMut(u8, &[u8], LogEnd) -> Result<(), String>,
) -> Result<Option<(u64, String)>, RecoveryError> {
    let mut pos = 0usize;
    loop {
        reader.fill_record(pos as u64).await?;
        let rest = reader.from(pos as u64);
        let record = match format::decode(rest) {
            Decoded::Record { record, framed_len } => (record, framed_len),
            Decoded::End => return Ok(None),
            Decoded::Incomplete if rest.is_empty() => return Ok(None),
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
