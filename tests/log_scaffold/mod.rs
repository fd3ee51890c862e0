//! Log scaffolding shared by `recovery_table.rs` and `repair.rs`: writes
//! real segment files through the real `Appender`, damages them with
//! std::fs, and recovers them with `DirectStorage`.
#![allow(dead_code)]
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use rill::log::aligned::BLOCK;
use rill::log::appender::{Appender, LogEnd};
use rill::log::format::{self, FLAG_BATCH_END, HEADER_BYTES};
use rill::log::recovery::{self, Recovered, RecoveryError};
use rill::log::storage::DirectStorage;
use rill::stream::codec::{self, Entry};
use rill::stream::{Command, NewStream};

/// Segment size of the one-segment tests (the appender never rolls).
pub const BIG: u64 = 1 << 20;
/// Segment size of the tests that roll over several segments.
pub const SMALL: u64 = 64 << 10;

// The scratch directory and the runtime are the in-process harness's.
#[path = "../inproc/mod.rs"]
mod inproc;
pub use inproc::{TempDir, run};

/// One log record as the tests model it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rec {
    pub seq: u64,
    pub kind: u8,
    pub payload: Vec<u8>,
}

impl Rec {
    pub fn framed_len(&self) -> u64 {
        format::framed_len(self.payload.len()) as u64
    }
}

/// Record `seq` whose payload is exactly `len` bytes (when `len` is not 0):
/// seq 1 creates stream `t/log`, the others create stream `t/{seq}` with
/// filler data, but every third seq of length 0 is a bucket create. So the records replay
/// into a real `Table` (the server accepts them too).
pub fn rec_of_len(seq: u64, len: usize) -> Rec {
    let key = "t/log".to_string();
    let now_ms = 1_700_000_000_000 + seq;
    let filler = |fixed: usize| -> Vec<u8> {
        let data_len = len.max(fixed + 1) - fixed;
        (0..data_len)
            .map(|i| (seq as usize * 31 + i) as u8)
            .collect()
    };
    let entry = if seq == 1 {
        let content_type = "application/octet-stream".to_string();
        // key, content type, three option tags, closed, data length, now_ms,
        // attrs length.
        let fixed = 4 + key.len() + 4 + content_type.len() + 3 + 1 + 4 + 8 + 4;
        Entry::Stream(Command::Create(NewStream {
            key,
            content_type,
            ttl_secs: None,
            expires_at: None,
            expires_at_ms: None,
            closed: false,
            data: filler(fixed),
            now_ms,
            attrs: Vec::new(),
        }))
    } else if len == 0 && seq.is_multiple_of(3) {
        Entry::BucketCreate {
            bucket: format!("bucket-{seq}"),
            created_at_ms: now_ms,
        }
    } else {
        // Its own stream, so records stay self-contained: any subset of
        // seqs replays consistently (an append would need every earlier
        // record's length for its start offset).
        let key = format!("t/{seq}");
        let content_type = "text/plain".to_string();
        let fixed = 4 + key.len() + 4 + content_type.len() + 3 + 1 + 4 + 8 + 4;
        Entry::Stream(Command::Create(NewStream {
            data: filler(fixed),
            key,
            content_type,
            ttl_secs: None,
            expires_at: None,
            expires_at_ms: None,
            closed: false,
            now_ms,
            attrs: Vec::new(),
        }))
    };
    let mut payload = Vec::new();
    let kind = codec::encode(&entry, &mut payload);
    assert!(
        len == 0 || payload.len() == len,
        "{} != {len}",
        payload.len()
    );
    Rec { seq, kind, payload }
}

/// Records `seqs`, small (payload sizes vary with the seq).
pub fn recs(seqs: std::ops::Range<u64>) -> Vec<Rec> {
    seqs.map(|seq| {
        rec_of_len(
            seq,
            if seq % 2 == 0 {
                0
            } else {
                60 + (seq as usize % 7) * 9
            },
        )
    })
    .collect()
}

/// Records `seqs`, each with a payload of `len` bytes.
pub fn recs_of_len(seqs: std::ops::Range<u64>, len: usize) -> Vec<Rec> {
    seqs.map(|seq| rec_of_len(seq, len)).collect()
}

/// The framed batch, its last record marked with the batch-end flag.
pub fn frame(batch: &[Rec]) -> Vec<u8> {
    let mut out = frame_unmarked(batch);
    let last = batch.last().expect("a batch has records");
    let at = out.len() - last.framed_len() as usize;
    format::set_flags(&mut out[at..], FLAG_BATCH_END);
    out
}

/// The framed records without any batch-end flag (an incomplete batch).
pub fn frame_unmarked(batch: &[Rec]) -> Vec<u8> {
    let mut out = Vec::new();
    for rec in batch {
        format::encode(rec.kind, rec.seq, &rec.payload, &mut out);
    }
    out
}

/// What `recover` hands to `apply`: (kind, payload) in order.
pub type Replayed = Vec<(u8, Vec<u8>)>;

/// The replay of these batches, in order.
pub fn replayed(batches: &[&[Rec]]) -> Replayed {
    batches
        .iter()
        .flat_map(|batch| batch.iter().map(|r| (r.kind, r.payload.clone())))
        .collect()
}

pub fn bytes_of(batches: &[&[Rec]]) -> u64 {
    batches
        .iter()
        .flat_map(|b| b.iter())
        .map(Rec::framed_len)
        .sum()
}

/// Where appending continues, as recovery hands it to `Appender::open`.
pub struct OpenAt {
    pub end: Option<LogEnd>,
    pub tail: Vec<u8>,
    pub scrub_to: Option<u64>,
}

impl OpenAt {
    pub const EMPTY: OpenAt = OpenAt {
        end: None,
        tail: Vec::new(),
        scrub_to: None,
    };

    pub fn from(recovered: &Recovered) -> OpenAt {
        OpenAt {
            end: recovered.end,
            tail: recovered.tail.clone(),
            scrub_to: recovered.scrub_to,
        }
    }
}

/// Opens the log in `dir` at `at`, appends each framed batch with a sync,
/// and returns where each batch starts and ends.
pub fn append(
    dir: &Path,
    segment_bytes: u64,
    at: OpenAt,
    batches: &[Vec<u8>],
) -> Vec<(LogEnd, LogEnd)> {
    run(async {
        let storage = Rc::new(DirectStorage::new(dir).unwrap());
        let mut appender = Appender::open(storage, segment_bytes, at.end, at.tail, at.scrub_to)
            .await
            .unwrap();
        let mut spans = Vec::new();
        for batch in batches {
            let before = appender.end();
            appender.append(batch, true).await.unwrap();
            let after = appender.end();
            let start = if after.segment == before.segment {
                before
            } else {
                LogEnd {
                    segment: after.segment,
                    pos: 0,
                }
            };
            assert_eq!(after.pos - start.pos, batch.len() as u64);
            spans.push((start, after));
        }
        // monoio closes a dropped file through the ring: let it happen
        // before the runtime goes. A leaked descriptor would keep its
        // segment's lock, and `rill repair` of this dir would wait for it
        // as for a dead server's writes (`log::handover`). That includes
        // the next segment's zero-fill, which may still be running on a
        // busy machine.
        appender.settle().await;
        drop(appender);
        monoio::time::sleep(std::time::Duration::from_millis(20)).await;
        spans
    })
}

/// Runs recovery on `dir`, returning its result and what it replayed.
pub fn recover(dir: &Path, segment_bytes: u64) -> (Result<Recovered, RecoveryError>, Replayed) {
    run(async {
        let storage = DirectStorage::new(dir).unwrap();
        let mut got = Vec::new();
        let result = recovery::recover(&storage, segment_bytes, |kind, payload, _| {
            got.push((kind, payload.to_vec()));
            Ok(())
        })
        .await;
        (result, got)
    })
}

pub fn recover_ok(dir: &Path, segment_bytes: u64) -> (Recovered, Replayed) {
    match recover(dir, segment_bytes) {
        (Ok(recovered), got) => (recovered, got),
        (Err(e), _) => panic!("recovery failed: {e}"),
    }
}

pub fn recover_err(dir: &Path, segment_bytes: u64) -> (RecoveryError, Replayed) {
    match recover(dir, segment_bytes) {
        (Ok(r), _) => panic!("recovery succeeded: end {:?}, report {:?}", r.end, r.report),
        (Err(e), got) => (e, got),
    }
}

pub fn seg_path(dir: &Path, segment: u64) -> PathBuf {
    dir.join(format!("{segment:020}.seg"))
}

/// Segment files in `dir` (what `report.segments` counts; the appender may
/// have preallocated a spare).
pub fn seg_count(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_str().unwrap().ends_with(".seg")
        })
        .count()
}

pub fn write_at(dir: &Path, at: LogEnd, bytes: &[u8]) {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(seg_path(dir, at.segment))
        .unwrap();
    file.write_all_at(bytes, at.pos).unwrap();
    file.sync_all().unwrap();
}

pub fn read_at(dir: &Path, at: LogEnd, len: usize) -> Vec<u8> {
    let file = std::fs::File::open(seg_path(dir, at.segment)).unwrap();
    let mut buf = vec![0; len];
    file.read_exact_at(&mut buf, at.pos).unwrap();
    buf
}

/// Flips the first payload byte of the record at `at`.
pub fn damage_payload(dir: &Path, at: LogEnd) {
    let pos = LogEnd {
        segment: at.segment,
        pos: at.pos + HEADER_BYTES as u64,
    };
    let byte = read_at(dir, pos, 1)[0];
    write_at(dir, pos, &[byte ^ 0x5a]);
}

pub fn plus(at: LogEnd, bytes: u64) -> LogEnd {
    LogEnd {
        segment: at.segment,
        pos: at.pos + bytes,
    }
}

/// The partial block of the file at `end`, as `Recovered::tail` must hold it.
pub fn partial_block(dir: &Path, end: LogEnd) -> Vec<u8> {
    let start = end.pos - end.pos % BLOCK as u64;
    read_at(
        dir,
        LogEnd {
            segment: end.segment,
            pos: start,
        },
        (end.pos - start) as usize,
    )
}
