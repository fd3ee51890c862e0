//! The recovery decision table (`src/log/recovery.rs`), one test per row,
//! against real segment files: logs are written by the real `Appender`, then
//! damaged with std::fs, then recovered with `DirectStorage`. The last tests
//! run `rill repair` on a damaged data dir.

use std::future::Future;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command as Process, Output};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};

use rill::log::aligned::BLOCK;
use rill::log::appender::{Appender, LogEnd};
use rill::log::format::{self, FLAG_BATCH_END, HEADER_BYTES};
use rill::log::recovery::{self, Recovered, RecoveryError};
use rill::log::storage::DirectStorage;
use rill::stream::Command;
use rill::stream::codec::{self, Entry};

/// Segment size of the one-segment tests (the appender never rolls).
const BIG: u64 = 1 << 20;
/// Segment size of the tests that roll over several segments.
const SMALL: u64 = 64 << 10;

/// A unique scratch directory, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!(
            "rill-recovery-table-{tag}-{}-{n}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn run<F: Future>(fut: F) -> F::Output {
    monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
        .enable_timer()
        .build()
        .unwrap()
        .block_on(fut)
}

/// One log record as the tests model it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Rec {
    seq: u64,
    kind: u8,
    payload: Vec<u8>,
}

impl Rec {
    fn framed_len(&self) -> u64 {
        format::framed_len(self.payload.len()) as u64
    }
}

/// Record `seq` whose payload is exactly `len` bytes (when `len` is not 0):
/// seq 1 creates stream `t/log`, the others create stream `t/{seq}` with
/// filler data, but every third seq of length 0 is a bucket create. So the records replay
/// into a real `Table` (the server accepts them too).
fn rec_of_len(seq: u64, len: usize) -> Rec {
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
        Entry::Stream(Command::Create {
            key,
            content_type,
            ttl_secs: None,
            expires_at: None,
            expires_at_ms: None,
            closed: false,
            data: filler(fixed),
            now_ms,
            attrs: Vec::new(),
        })
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
        Entry::Stream(Command::Create {
            data: filler(fixed),
            key,
            content_type,
            ttl_secs: None,
            expires_at: None,
            expires_at_ms: None,
            closed: false,
            now_ms,
            attrs: Vec::new(),
        })
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
fn recs(seqs: std::ops::Range<u64>) -> Vec<Rec> {
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
fn recs_of_len(seqs: std::ops::Range<u64>, len: usize) -> Vec<Rec> {
    seqs.map(|seq| rec_of_len(seq, len)).collect()
}

/// The framed batch, its last record marked with the batch-end flag.
fn frame(batch: &[Rec]) -> Vec<u8> {
    let mut out = frame_unmarked(batch);
    let last = batch.last().expect("a batch has records");
    let at = out.len() - last.framed_len() as usize;
    format::set_flags(&mut out[at..], FLAG_BATCH_END);
    out
}

/// The framed records without any batch-end flag (an incomplete batch).
fn frame_unmarked(batch: &[Rec]) -> Vec<u8> {
    let mut out = Vec::new();
    for rec in batch {
        format::encode(rec.kind, rec.seq, &rec.payload, &mut out);
    }
    out
}

/// What `recover` hands to `apply`: (kind, payload) in order.
type Replayed = Vec<(u8, Vec<u8>)>;

/// The replay of these batches, in order.
fn replayed(batches: &[&[Rec]]) -> Replayed {
    batches
        .iter()
        .flat_map(|batch| batch.iter().map(|r| (r.kind, r.payload.clone())))
        .collect()
}

fn bytes_of(batches: &[&[Rec]]) -> u64 {
    batches
        .iter()
        .flat_map(|b| b.iter())
        .map(Rec::framed_len)
        .sum()
}

/// Where appending continues, as recovery hands it to `Appender::open`.
struct OpenAt {
    end: Option<LogEnd>,
    tail: Vec<u8>,
    scrub_to: Option<u64>,
}

impl OpenAt {
    const EMPTY: OpenAt = OpenAt {
        end: None,
        tail: Vec::new(),
        scrub_to: None,
    };

    fn from(recovered: &Recovered) -> OpenAt {
        OpenAt {
            end: recovered.end,
            tail: recovered.tail.clone(),
            scrub_to: recovered.scrub_to,
        }
    }
}

/// Opens the log in `dir` at `at`, appends each framed batch with a sync,
/// and returns where each batch starts and ends.
fn append(
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
        spans
    })
}

/// Runs recovery on `dir`, returning its result and what it replayed.
fn recover(dir: &Path, segment_bytes: u64) -> (Result<Recovered, RecoveryError>, Replayed) {
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

fn recover_ok(dir: &Path, segment_bytes: u64) -> (Recovered, Replayed) {
    match recover(dir, segment_bytes) {
        (Ok(recovered), got) => (recovered, got),
        (Err(e), _) => panic!("recovery failed: {e}"),
    }
}

fn recover_err(dir: &Path, segment_bytes: u64) -> (RecoveryError, Replayed) {
    match recover(dir, segment_bytes) {
        (Ok(r), _) => panic!("recovery succeeded: end {:?}, report {:?}", r.end, r.report),
        (Err(e), got) => (e, got),
    }
}

fn seg_path(dir: &Path, segment: u64) -> PathBuf {
    dir.join(format!("{segment:020}.seg"))
}

/// Segment files in `dir` (what `report.segments` counts; the appender may
/// have preallocated a spare).
fn seg_count(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_str().unwrap().ends_with(".seg")
        })
        .count()
}

fn write_at(dir: &Path, at: LogEnd, bytes: &[u8]) {
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(seg_path(dir, at.segment))
        .unwrap();
    file.write_all_at(bytes, at.pos).unwrap();
    file.sync_all().unwrap();
}

fn read_at(dir: &Path, at: LogEnd, len: usize) -> Vec<u8> {
    let file = std::fs::File::open(seg_path(dir, at.segment)).unwrap();
    let mut buf = vec![0; len];
    file.read_exact_at(&mut buf, at.pos).unwrap();
    buf
}

/// Flips the first payload byte of the record at `at`.
fn damage_payload(dir: &Path, at: LogEnd) {
    let pos = LogEnd {
        segment: at.segment,
        pos: at.pos + HEADER_BYTES as u64,
    };
    let byte = read_at(dir, pos, 1)[0];
    write_at(dir, pos, &[byte ^ 0x5a]);
}

fn plus(at: LogEnd, bytes: u64) -> LogEnd {
    LogEnd {
        segment: at.segment,
        pos: at.pos + bytes,
    }
}

/// The partial block of the file at `end`, as `Recovered::tail` must hold it.
fn partial_block(dir: &Path, end: LogEnd) -> Vec<u8> {
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

// ---------------------------------------------------------------------------
// Row: valid record, seq = expected -> replay (when its batch is complete).

#[test]
fn clean_log_replays_every_record_and_appending_continues() {
    let tmp = TempDir::new("clean");
    let (a, b, c) = (recs(1..4), recs(4..5), recs(5..12));
    let spans = append(
        &tmp.0,
        BIG,
        OpenAt::EMPTY,
        &[frame(&a), frame(&b), frame(&c)],
    );
    let end = spans[2].1;

    let (recovered, got) = recover_ok(&tmp.0, BIG);
    assert_eq!(got, replayed(&[&a, &b, &c]));
    assert_eq!(recovered.end, Some(end));
    assert_eq!(recovered.tail, partial_block(&tmp.0, end));
    assert_eq!(recovered.next_seq, 12);
    assert_eq!(recovered.scrub_to, None);
    let report = &recovered.report;
    assert_eq!(report.segments, 1);
    assert_eq!(report.records, 11);
    assert_eq!(report.bytes, bytes_of(&[&a, &b, &c]));
    assert_eq!(report.duplicates, 0);
    assert_eq!(report.torn, None);

    // Appending after reopening continues right after the old data.
    let d = recs(12..15);
    let spans = append(&tmp.0, BIG, OpenAt::from(&recovered), &[frame(&d)]);
    assert_eq!(spans[0].0, end);
    let (again, got) = recover_ok(&tmp.0, BIG);
    assert_eq!(got, replayed(&[&a, &b, &c, &d]));
    assert_eq!(again.end, Some(spans[0].1));
    assert_eq!(again.next_seq, 15);
    assert_eq!(again.report.records, 14);
    assert_eq!(again.report.torn, None);
}

#[test]
fn empty_log_starts_at_seq_one() {
    let tmp = TempDir::new("empty");
    let (recovered, got) = recover_ok(&tmp.0, BIG);
    assert!(got.is_empty());
    assert_eq!(recovered.end, None);
    assert!(recovered.tail.is_empty());
    assert_eq!(recovered.next_seq, 1);
    assert_eq!(recovered.scrub_to, None);
    assert_eq!(recovered.report.segments, 0);
    assert_eq!(recovered.report.torn, None);

    // A preallocated, never written segment is the same empty log.
    let a = recs(1..3);
    append(&tmp.0, BIG, OpenAt::EMPTY, &[]);
    let (recovered, got) = recover_ok(&tmp.0, BIG);
    assert!(got.is_empty());
    assert_eq!(recovered.end, Some(LogEnd { segment: 1, pos: 0 }));
    assert_eq!(recovered.next_seq, 1);
    assert_eq!(recovered.report.segments, 1);
    append(&tmp.0, BIG, OpenAt::from(&recovered), &[frame(&a)]);
    let (_, got) = recover_ok(&tmp.0, BIG);
    assert_eq!(got, replayed(&[&a]));
}

// ---------------------------------------------------------------------------
// Row: zero-filled space -> end of this segment's data; next segment.

#[test]
fn zero_filled_space_ends_a_segment_and_the_scan_continues() {
    let tmp = TempDir::new("rollover");
    // Batches of ~10 KiB: six fit a 64 KiB segment, the seventh rolls over
    // and leaves ~4 KiB of zeros at the end of the segment.
    let batches: Vec<Vec<Rec>> = (0..20u64)
        .map(|i| {
            let mut batch = recs_of_len(i * 3 + 1..i * 3 + 3, 5000);
            batch.push(rec_of_len(i * 3 + 3, 0));
            batch
        })
        .collect();
    let framed: Vec<Vec<u8>> = batches.iter().map(|b| frame(b)).collect();
    let spans = append(&tmp.0, SMALL, OpenAt::EMPTY, &framed);
    let last = spans.last().unwrap().1;
    assert!(last.segment >= 4, "only {} segments", last.segment);
    for pair in spans.windows(2) {
        let ((_, end), (start, _)) = (pair[0], pair[1]);
        if start.segment != end.segment {
            let gap = (SMALL - end.pos) as usize;
            assert!(gap >= 8, "segment {} has no zero-filled end", end.segment);
            assert!(read_at(&tmp.0, end, gap).iter().all(|&b| b == 0));
        }
    }

    let (recovered, got) = recover_ok(&tmp.0, SMALL);
    let all: Vec<&[Rec]> = batches.iter().map(Vec::as_slice).collect();
    assert_eq!(got, replayed(&all));
    assert_eq!(recovered.end, Some(last));
    assert_eq!(recovered.tail, partial_block(&tmp.0, last));
    assert_eq!(recovered.next_seq, 61);
    assert_eq!(recovered.scrub_to, None);
    let report = &recovered.report;
    assert_eq!(report.segments, seg_count(&tmp.0));
    assert_eq!(report.records, 60);
    assert_eq!(report.bytes, bytes_of(&all));
    assert_eq!(report.duplicates, 0);
    assert_eq!(report.torn, None);

    // And appending continues in the last segment.
    let more = recs(61..63);
    let spans = append(&tmp.0, SMALL, OpenAt::from(&recovered), &[frame(&more)]);
    assert_eq!(spans[0].0, last);
    let (again, got) = recover_ok(&tmp.0, SMALL);
    assert_eq!(got.len(), 62);
    assert_eq!(got[60..], replayed(&[&more])[..]);
    assert_eq!(again.next_seq, 63);
}

// ---------------------------------------------------------------------------
// Row: records after the last batch-end mark, then zeros/EOF -> torn tail.

#[test]
fn incomplete_last_batch_is_torn_and_its_seqs_are_reused() {
    let tmp = TempDir::new("incomplete");
    let (a, b) = (recs(1..4), recs(4..7));
    let spans = append(&tmp.0, BIG, OpenAt::EMPTY, &[frame(&a), frame(&b)]);
    let end = spans[1].1;
    // A batch of which only the first records landed: no batch-end flag.
    let torn = recs(7..10);
    write_at(&tmp.0, end, &frame_unmarked(&torn));

    let (recovered, got) = recover_ok(&tmp.0, BIG);
    assert_eq!(got, replayed(&[&a, &b]));
    assert_eq!(recovered.end, Some(end));
    assert_eq!(recovered.tail, partial_block(&tmp.0, end));
    assert_eq!(recovered.next_seq, 7, "the dropped batch's seqs are reused");
    assert_eq!(recovered.scrub_to, Some(BIG));
    let report = &recovered.report;
    assert_eq!(report.segments, 1);
    assert_eq!(report.records, 6);
    // `bytes` counts every valid record scanned, the dropped ones too.
    assert_eq!(report.bytes, bytes_of(&[&a, &b, &torn]));
    assert_eq!(report.duplicates, 0);
    assert_eq!(report.torn, Some((end, 3)));

    // The new batch reuses seqs 7.. and nothing of the torn one survives.
    let c = recs(7..9);
    let spans = append(&tmp.0, BIG, OpenAt::from(&recovered), &[frame(&c)]);
    assert_eq!(spans[0].0, end);
    let (again, got) = recover_ok(&tmp.0, BIG);
    assert_eq!(got, replayed(&[&a, &b, &c]));
    assert_eq!(again.report.torn, None);
    assert_eq!(again.report.duplicates, 0);
    assert_eq!(again.next_seq, 9);
}

// ---------------------------------------------------------------------------
// Row: damaged record, and no complete batch anywhere after it -> torn tail.

#[test]
fn damaged_last_batch_is_torn_and_reopening_scrubs_it() {
    let tmp = TempDir::new("damaged-tail");
    let (a, b, c) = (recs(1..4), recs(4..6), recs(6..10));
    let spans = append(
        &tmp.0,
        BIG,
        OpenAt::EMPTY,
        &[frame(&a), frame(&b), frame(&c)],
    );
    let c_start = spans[2].0;
    // Damage the last record of the last batch (its batch-end record).
    let last_rec = plus(c_start, bytes_of(&[&c[..3]]));
    damage_payload(&tmp.0, last_rec);

    let (recovered, got) = recover_ok(&tmp.0, BIG);
    assert_eq!(got, replayed(&[&a, &b]));
    assert_eq!(recovered.end, Some(c_start));
    assert_eq!(recovered.tail, partial_block(&tmp.0, c_start));
    assert_eq!(recovered.next_seq, 6);
    assert_eq!(recovered.scrub_to, Some(BIG));
    let report = &recovered.report;
    assert_eq!(report.segments, 1);
    assert_eq!(report.records, 5);
    assert_eq!(report.bytes, bytes_of(&[&a, &b, &c[..3]]));
    assert_eq!(report.duplicates, 0);
    // The three intact records of the batch are dropped with it.
    assert_eq!(report.torn, Some((c_start, 3)));

    // Reopening zeroes the torn batch; a new (shorter) batch reuses its seqs
    // and a second recovery sees exactly the old and the new records.
    let d = recs(6..7);
    let spans = append(&tmp.0, BIG, OpenAt::from(&recovered), &[frame(&d)]);
    assert_eq!(spans[0].0, c_start);
    let d_end = spans[0].1;
    let rest = (c_start.pos + bytes_of(&[&c]) - d_end.pos) as usize;
    assert!(read_at(&tmp.0, d_end, rest).iter().all(|&b| b == 0));
    let (again, got) = recover_ok(&tmp.0, BIG);
    assert_eq!(got, replayed(&[&a, &b, &d]));
    assert_eq!(again.end, Some(d_end));
    assert_eq!(again.next_seq, 7);
    assert_eq!(again.scrub_to, None);
    assert_eq!(again.report.records, 6);
    assert_eq!(again.report.duplicates, 0);
    assert_eq!(again.report.torn, None);
}

// ---------------------------------------------------------------------------
// Row: damaged record, and a complete batch after it -> corrupt.

fn assert_corrupt_message(err: &RecoveryError, path: &Path, pos: u64) {
    let RecoveryError::Corrupt {
        path: got_path,
        pos: got_pos,
        ..
    } = err
    else {
        panic!("not Corrupt: {err:?}");
    };
    assert_eq!((got_path.as_path(), *got_pos), (path, pos));
    let text = err.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains(&format!("at byte {pos}")), "{text}");
    assert!(text.contains("rill repair"), "{text}");
}

#[test]
fn damaged_record_before_a_complete_batch_is_corrupt() {
    let tmp = TempDir::new("damaged-middle");
    let (a, b, c) = (recs(1..4), recs(4..6), recs(6..8));
    let spans = append(
        &tmp.0,
        BIG,
        OpenAt::EMPTY,
        &[frame(&a), frame(&b), frame(&c)],
    );
    let damaged = plus(spans[1].0, b[0].framed_len());
    damage_payload(&tmp.0, damaged);

    let (err, got) = recover_err(&tmp.0, BIG);
    assert_corrupt_message(&err, &seg_path(&tmp.0, 1), damaged.pos);
    let RecoveryError::Corrupt { reason, .. } = &err else {
        unreachable!()
    };
    assert_eq!(reason, "checksum mismatch");
    // Only the batches before the damage were replayed.
    assert_eq!(got, replayed(&[&a]));
}

#[test]
fn damage_in_an_older_segment_with_complete_batches_later_is_corrupt() {
    let tmp = TempDir::new("damaged-older");
    let batches: Vec<Vec<Rec>> = (0..14u64)
        .map(|i| recs_of_len(i * 2 + 1..i * 2 + 3, 5000))
        .collect();
    let framed: Vec<Vec<u8>> = batches.iter().map(|b| frame(b)).collect();
    let spans = append(&tmp.0, SMALL, OpenAt::EMPTY, &framed);
    assert!(spans.last().unwrap().1.segment >= 3);
    // The last batch of segment 1: nothing complete after it in that file,
    // so only the complete batches of segment 2 make it corrupt.
    let last_in_1 = spans.iter().rposition(|(s, _)| s.segment == 1).unwrap();
    let damaged = spans[last_in_1].0;
    damage_payload(&tmp.0, damaged);

    let (err, got) = recover_err(&tmp.0, SMALL);
    assert_corrupt_message(&err, &seg_path(&tmp.0, 1), damaged.pos);
    let before: Vec<&[Rec]> = batches[..last_in_1].iter().map(Vec::as_slice).collect();
    assert_eq!(got, replayed(&before));
}

// ---------------------------------------------------------------------------
// Row: valid record, seq > expected -> corrupt: records are missing.

#[test]
fn sequence_gap_before_a_complete_batch_is_corrupt() {
    let tmp = TempDir::new("gap");
    let (a, gap, c) = (recs(1..4), recs(5..7), recs(7..9));
    let spans = append(
        &tmp.0,
        BIG,
        OpenAt::EMPTY,
        &[frame(&a), frame(&gap), frame(&c)],
    );

    let (err, got) = recover_err(&tmp.0, BIG);
    assert_corrupt_message(&err, &seg_path(&tmp.0, 1), spans[1].0.pos);
    assert!(err.to_string().contains("expected 4, found 5"), "{err}");
    assert_eq!(got, replayed(&[&a]));
}

// ---------------------------------------------------------------------------
// Row: valid record, seq < expected -> duplicate: skip.

#[test]
fn duplicates_are_skipped_and_counted() {
    let tmp = TempDir::new("duplicates");
    let (a, b) = (recs(1..4), recs(4..6));
    // Batch `a` written twice, then the next batch.
    let spans = append(
        &tmp.0,
        BIG,
        OpenAt::EMPTY,
        &[frame(&a), frame(&a), frame(&b)],
    );

    let (recovered, got) = recover_ok(&tmp.0, BIG);
    assert_eq!(got, replayed(&[&a, &b]));
    assert_eq!(recovered.end, Some(spans[2].1));
    assert_eq!(recovered.next_seq, 6);
    assert_eq!(recovered.scrub_to, None);
    let report = &recovered.report;
    assert_eq!(report.segments, 1);
    assert_eq!(report.records, 5);
    assert_eq!(report.bytes, bytes_of(&[&a, &a, &b]));
    assert_eq!(report.duplicates, 3);
    assert_eq!(report.torn, None);
}

/// Duplicates at the very end of the log: appending must continue after
/// them, or a new batch that ends on a block boundary leaves the rest of
/// the duplicate copy behind it, and the next recovery finds a broken
/// record followed by a complete (duplicate) batch.
#[test]
fn duplicates_at_the_tail_are_not_overwritten_in_part() {
    let tmp = TempDir::new("duplicate-tail");
    let a = recs_of_len(1..4, 1000);
    let a_len = bytes_of(&[&a]);
    let spans = append(&tmp.0, BIG, OpenAt::EMPTY, &[frame(&a), frame(&a)]);
    let dup_end = spans[1].1;

    let (recovered, got) = recover_ok(&tmp.0, BIG);
    assert_eq!(got, replayed(&[&a]));
    assert_eq!(recovered.report.duplicates, 3);
    assert_eq!(recovered.end, Some(dup_end), "append after the duplicates");
    assert_eq!(recovered.next_seq, 4);

    // A batch that would end exactly at the block boundary if appended
    // after the first copy.
    let b = vec![rec_of_len(4, BLOCK - a_len as usize - HEADER_BYTES)];
    append(&tmp.0, BIG, OpenAt::from(&recovered), &[frame(&b)]);
    let (again, got) = recover_ok(&tmp.0, BIG);
    assert_eq!(got, replayed(&[&a, &b]));
    assert_eq!(again.report.duplicates, 3);
    assert_eq!(again.next_seq, 5);
}

// ---------------------------------------------------------------------------
// Row: file shorter than a record it holds -> same as a damaged record.

#[test]
fn last_segment_truncated_mid_record_is_a_torn_tail() {
    let tmp = TempDir::new("truncated");
    let batches: Vec<Vec<Rec>> = (0..14u64)
        .map(|i| recs_of_len(i * 2 + 1..i * 2 + 3, 5000))
        .collect();
    let framed: Vec<Vec<u8>> = batches.iter().map(|b| frame(b)).collect();
    let spans = append(&tmp.0, SMALL, OpenAt::EMPTY, &framed);
    let (last_start, last_end) = *spans.last().unwrap();
    // Drop any preallocated spare so the truncated file is the last one.
    for index in last_end.segment + 1..last_end.segment + 3 {
        let _ = std::fs::remove_file(seg_path(&tmp.0, index));
    }
    // Cut the file in the middle of the last batch's second record.
    let cut = last_start.pos + batches[13][0].framed_len() + 100;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(seg_path(&tmp.0, last_end.segment))
        .unwrap();
    file.set_len(cut).unwrap();
    drop(file);

    let (recovered, got) = recover_ok(&tmp.0, SMALL);
    let kept: Vec<&[Rec]> = batches[..13].iter().map(Vec::as_slice).collect();
    assert_eq!(got, replayed(&kept));
    assert_eq!(recovered.end, Some(last_start));
    assert_eq!(recovered.tail, partial_block(&tmp.0, last_start));
    assert_eq!(recovered.next_seq, 27);
    assert_eq!(recovered.scrub_to, Some(SMALL));
    let report = &recovered.report;
    assert_eq!(report.segments, last_end.segment as usize);
    assert_eq!(report.records, 26);
    assert_eq!(report.bytes, bytes_of(&kept) + batches[13][0].framed_len());
    assert_eq!(report.duplicates, 0);
    assert_eq!(report.torn, Some((last_start, 1)));

    // Reopening restores the segment's length and appending works.
    let c = recs(27..29);
    append(&tmp.0, SMALL, OpenAt::from(&recovered), &[frame(&c)]);
    let len = std::fs::metadata(seg_path(&tmp.0, last_end.segment))
        .unwrap()
        .len();
    assert_eq!(len, SMALL);
    let (again, got) = recover_ok(&tmp.0, SMALL);
    assert_eq!(got.len(), 28);
    assert_eq!(got[26..], replayed(&[&c])[..]);
    assert_eq!(again.report.torn, None);
    assert_eq!(again.next_seq, 29);
}

// ---------------------------------------------------------------------------
// `rill repair`.

/// A data dir laid out like the server's, with one shard.
fn data_dir(tag: &str) -> (TempDir, PathBuf) {
    let tmp = TempDir::new(tag);
    std::fs::write(tmp.0.join("rill.meta"), "format=1\nshards=1\n").unwrap();
    let shard = tmp.0.join("shard-00");
    std::fs::create_dir_all(&shard).unwrap();
    (tmp, shard)
}

fn rill(args: &[&str]) -> Output {
    Process::new(env!("CARGO_BIN_EXE_rill"))
        .args(args)
        .output()
        .unwrap()
}

fn text(output: &Output) -> String {
    format!(
        "status {:?}\nstdout:\n{}\nstderr:\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Every file under `dir` (but the lock file, which any opener creates)
/// with its length and a hash of its bytes.
fn snapshot(dir: &Path) -> Vec<(PathBuf, usize, u64)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.file_name().unwrap() != "LOCK" {
                let bytes = std::fs::read(&path).unwrap();
                let hash = xxhash_rust::xxh3::xxh3_64(&bytes);
                files.push((path, bytes.len(), hash));
            }
        }
    }
    files.sort();
    files
}

/// A shard log over four segments with damage in the last batch of
/// segment 2; returns the batches, the damaged position and its batch.
fn damaged_shard(shard: &Path) -> (Vec<Vec<Rec>>, LogEnd, usize) {
    let batches: Vec<Vec<Rec>> = (0..20u64)
        .map(|i| recs_of_len(i * 2 + 1..i * 2 + 3, 5000))
        .collect();
    let framed: Vec<Vec<u8>> = batches.iter().map(|b| frame(b)).collect();
    let spans = append(shard, SMALL, OpenAt::EMPTY, &framed);
    assert!(spans.last().unwrap().1.segment >= 4);
    let first_in_2 = spans.iter().position(|(s, _)| s.segment == 2).unwrap();
    // The second record of the second batch of segment 2.
    let batch = first_in_2 + 1;
    let damaged = plus(spans[batch].0, batches[batch][0].framed_len());
    damage_payload(shard, damaged);
    (batches, damaged, batch)
}

#[test]
fn repair_without_yes_reports_and_changes_nothing() {
    let (tmp, shard) = data_dir("repair-dry");
    let (batches, damaged, batch) = damaged_shard(&shard);
    let before = snapshot(&tmp.0);
    let dir = tmp.0.to_str().unwrap();

    let out = rill(&["repair", "--data-dir", dir]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(1), "{all}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let seg = seg_path(&shard, 2);
    assert!(
        stdout.contains(&format!("{} at byte {}", seg.display(), damaged.pos)),
        "{all}"
    );
    assert!(stdout.contains("checksum mismatch"), "{all}");
    // What truncating would lose: every batch after the damaged one (whose
    // damaged record is its last).
    let lost_batches = batches.len() - batch - 1;
    let lost_records = lost_batches * 2;
    assert!(
        stdout.contains(&format!(
            "{lost_records} valid records in {lost_batches} complete batches"
        )),
        "{all}"
    );
    assert!(
        stdout.contains(&format!("the log keeps {} records", batch * 2)),
        "{all}"
    );
    assert!(stdout.contains("--yes"), "{all}");
    assert_eq!(snapshot(&tmp.0), before, "a dry run changes nothing");
}

#[test]
fn repair_with_yes_truncates_at_the_damage_and_the_log_recovers() {
    let (tmp, shard) = data_dir("repair-yes");
    let (batches, damaged, batch) = damaged_shard(&shard);
    let dir = tmp.0.to_str().unwrap();
    let segments = seg_count(&shard) as u64;

    let out = rill(&["repair", "--data-dir", dir, "--yes"]);
    let all = text(&out);
    assert_eq!(out.status.code(), Some(0), "{all}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let seg = seg_path(&shard, 2);
    assert!(
        stdout.contains(&format!(
            "zeroed {} from byte {}",
            seg.display(),
            damaged.pos
        )),
        "{all}"
    );
    for index in 3..=segments {
        let path = seg_path(&shard, index);
        assert!(
            stdout.contains(&format!("removed {}", path.display())),
            "{all}"
        );
        assert!(!path.exists());
    }
    assert_eq!(seg_count(&shard), 2);

    // The next start recovers up to the damaged point: the intact record
    // of the damaged batch is a torn tail.
    let (recovered, got) = recover_ok(&shard, SMALL);
    let kept: Vec<&[Rec]> = batches[..batch].iter().map(Vec::as_slice).collect();
    assert_eq!(got, replayed(&kept));
    assert_eq!(recovered.next_seq, batch as u64 * 2 + 1);
    assert_eq!(recovered.report.torn.map(|(_, n)| n), Some(1));

    // Now the data dir is clean for repair too.
    let out = rill(&["repair", "--data-dir", dir]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    // And the server starts on it.
    let out = Process::new(env!("CARGO_BIN_EXE_rill"))
        .args([
            "serve",
            "--data-dir",
            dir,
            "--cores",
            "1",
            "--listen",
            "127.0.0.1:0",
        ])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = out.id();
    let mut child = out;
    let stderr = child.stderr.take().unwrap();
    let lines = std::thread::spawn(move || {
        use std::io::BufRead;
        let mut seen = Vec::new();
        for line in std::io::BufReader::new(stderr).lines() {
            let line = line.unwrap();
            let done = line.contains("listening on");
            seen.push(line);
            if done {
                break;
            }
        }
        seen
    })
    .join()
    .unwrap();
    // SAFETY: kill(2) on the pid of the child this test started.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let _ = child.wait();
    assert!(
        lines.iter().any(|l| l.contains("listening on")),
        "server did not start: {lines:?}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.contains(&format!("recovered {} records", batch * 2))),
        "{lines:?}"
    );
}

#[test]
fn repair_on_a_clean_data_dir_exits_zero() {
    let (tmp, shard) = data_dir("repair-clean");
    let a = recs(1..6);
    append(&shard, BIG, OpenAt::EMPTY, &[frame(&a)]);
    let before = snapshot(&tmp.0);
    for args in [
        &["repair", "--data-dir"][..],
        &["repair", "--yes", "--data-dir"][..],
    ] {
        let mut args = args.to_vec();
        args.push(tmp.0.to_str().unwrap());
        let out = rill(&args);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out));
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("clean"),
            "{}",
            text(&out)
        );
    }
    assert_eq!(snapshot(&tmp.0), before);
}

#[test]
fn repair_refuses_a_data_dir_in_use() {
    let (tmp, shard) = data_dir("repair-locked");
    damaged_shard(&shard);
    let before = snapshot(&tmp.0);
    let held = rill::datadir::DataDir::open(&tmp.0).unwrap();
    let out = rill(&["repair", "--data-dir", tmp.0.to_str().unwrap(), "--yes"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("in use"),
        "{}",
        text(&out)
    );
    drop(held);
    assert_eq!(snapshot(&tmp.0), before);
}

#[test]
fn repair_usage() {
    let out = rill(&["repair", "--help"]);
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(
        help.contains("rill repair --data-dir DIR [--yes]"),
        "{help}"
    );
    let out = rill(&["--help"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("rill repair"));
    let out = rill(&["repair"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let out = rill(&[
        "repair",
        "--data-dir",
        "/nonexistent/rill-data",
        "--frobnicate",
    ]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    let missing = TempDir::new("repair-no-meta");
    let out = rill(&["repair", "--data-dir", missing.0.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("rill.meta"),
        "{}",
        text(&out)
    );
}
