//! The recovery decision table (`src/log/recovery.rs`), one test per row,
//! against real segment files: logs are written by the real `Appender`, then
//! damaged with std::fs, then recovered with `DirectStorage` (helpers in
//! `log_scaffold`; `rill repair` is tested in `repair.rs`).

use std::path::Path;

use rill::log::aligned::BLOCK;
use rill::log::appender::LogEnd;
use rill::log::format::HEADER_BYTES;
use rill::log::recovery::RecoveryError;
use rill::log::segment_reader::WINDOW_BYTES;

mod log_scaffold;

use log_scaffold::*;

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

/// A segment written under a larger `--segment-bytes` is read whole by a
/// recovery configured smaller: its records past the smaller size replay,
/// the torn batch after them is zeroed to the end of the file, and the log
/// goes on in a new segment (a scan limited to the configured size cut
/// acknowledged records off, or left torn bytes that refused the next start).
#[test]
fn a_segment_larger_than_configured_is_read_and_scrubbed_whole() {
    let tmp = TempDir::new("larger-segment");
    let (a, b) = (recs_of_len(1..40, 2000), recs_of_len(40..42, 2000));
    let spans = append(&tmp.0, BIG, OpenAt::EMPTY, &[frame(&a), frame(&b)]);
    let end = spans[1].1;
    assert!(end.segment == 1 && end.pos > SMALL, "past the smaller size");
    write_at(&tmp.0, end, &frame_unmarked(&recs_of_len(42..44, 2000)));

    let (recovered, got) = recover_ok(&tmp.0, SMALL);
    assert_eq!(got, replayed(&[&a, &b]));
    assert_eq!((recovered.end, recovered.next_seq), (Some(end), 42));
    assert_eq!(recovered.scrub_to, Some(BIG), "to the end of its file");

    let c = recs_of_len(42..43, 100);
    let spans = append(&tmp.0, SMALL, OpenAt::from(&recovered), &[frame(&c)]);
    assert_eq!(spans[0].0, LogEnd { segment: 2, pos: 0 }, "rolled over");
    let (again, got) = recover_ok(&tmp.0, SMALL);
    assert_eq!(got, replayed(&[&a, &b, &c]));
    assert_eq!((again.report.torn, again.next_seq), (None, 43));
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

/// The appender reuses one write buffer across batches: a small batch after
/// a large one must still leave zeros after its end in its last block, not
/// the larger batch's bytes (recovery reads zeros as the end of the data).
#[test]
fn a_small_batch_after_a_large_one_pads_its_block_with_zeros() {
    let dir = TempDir::new("reused-buffer");
    let (large, small) = (recs_of_len(1..4, 3 * BLOCK), recs_of_len(4..5, 100));
    let spans = append(&dir.0, BIG, OpenAt::EMPTY, &[frame(&large), frame(&small)]);
    let end = spans[1].1;
    let to_block_end = BLOCK - (end.pos as usize % BLOCK);
    let after = read_at(&dir.0, end, to_block_end);
    assert!(after.iter().all(|&b| b == 0), "stale bytes after the data");
    let (recovered, replayed) = recover_ok(&dir.0, BIG);
    assert_eq!(recovered.end, Some(end));
    assert_eq!(replayed, self::replayed(&[&large, &small]));
}

// ---------------------------------------------------------------------------
// Recovery reads a segment through a window of `WINDOW_BYTES` (STATUS Next
// 12): records span the window's edges, and the decisions above look past
// the window they are made in.

/// Segment size of the window tests: several windows.
const WINDOWS: u64 = 4 * WINDOW_BYTES as u64;
/// Records of this size straddle window edges.
const STRADDLING: usize = 700 << 10;

#[test]
fn records_spanning_read_windows_replay_and_a_torn_batch_past_them_drops() {
    let tmp = TempDir::new("windows-torn");
    let (a, b) = (recs_of_len(1..4, STRADDLING), recs_of_len(4..9, STRADDLING));
    let spans = append(&tmp.0, WINDOWS, OpenAt::EMPTY, &[frame(&a), frame(&b)]);
    let end = spans[1].1;
    assert!(
        end.pos > WINDOW_BYTES as u64,
        "the log goes past one window"
    );
    let torn = recs_of_len(9..12, STRADDLING);
    write_at(&tmp.0, end, &frame_unmarked(&torn));

    let (recovered, got) = recover_ok(&tmp.0, WINDOWS);
    assert_eq!(got, replayed(&[&a, &b]));
    assert_eq!(recovered.end, Some(end));
    assert_eq!(recovered.tail, partial_block(&tmp.0, end));
    assert_eq!(recovered.next_seq, 9);
    assert_eq!(recovered.scrub_to, Some(WINDOWS));
    assert_eq!(recovered.report.torn, Some((end, 3)));
    assert_eq!(recovered.report.bytes, bytes_of(&[&a, &b, &torn]));
}

#[test]
fn damage_in_one_window_with_a_complete_batch_in_a_later_one_is_corrupt() {
    let tmp = TempDir::new("windows-corrupt");
    let a = recs_of_len(1..3, STRADDLING);
    // One record: the damaged batch's own end is not the complete batch.
    let b = recs_of_len(3..4, STRADDLING);
    let c = recs_of_len(4..14, STRADDLING);
    let spans = append(
        &tmp.0,
        WINDOWS,
        OpenAt::EMPTY,
        &[frame(&a), frame(&b), frame(&c)],
    );
    assert!(
        spans[1].1.pos < WINDOW_BYTES as u64,
        "the damage is in the first window"
    );
    assert!(
        spans[2].1.pos > 2 * WINDOW_BYTES as u64,
        "the complete batch ends in a later one"
    );
    let damaged = spans[1].0;
    damage_payload(&tmp.0, damaged);

    let (err, got) = recover_err(&tmp.0, WINDOWS);
    assert_corrupt_message(&err, &seg_path(&tmp.0, 1), damaged.pos);
    assert_eq!(got, replayed(&[&a]));
}
