//! Restart tests of the real `rill` binary, continued: offsets read back the
//! same bytes after restarts; the `interval` fsync policy keeps what it
//! acknowledged across a clean stop and a kill after the interval; another
//! `--cores` re-shards every stream; a data dir is refused while another
//! server holds it.

mod common;
mod restart_helpers;

use std::thread;
use std::time::Duration;

use common::{Conn, Server, req};
use rill::log::format::{self, Decoded};

use restart_helpers::*;

// ---- 2. offsets are stable -------------------------------------------------------

struct Tracked {
    path: String,
    ct: &'static str,
    content: Vec<u8>,
    /// Every offset the server returned, with the content length it marks.
    offsets: Vec<(String, usize)>,
}

fn chunk(stream: usize, i: usize) -> Vec<u8> {
    let len = 1 + (i * 7919 + stream * 104_729) % 12_000;
    let mut v = format!("<s{stream} i{i}>").into_bytes();
    v.extend((0..=255u8).cycle().skip(i + stream).take(len));
    v
}

fn check_offsets(s: &Server, streams: &[Tracked]) {
    for t in streams {
        for (off, pos) in &t.offsets {
            let got = read_from(s, &t.path, off);
            assert!(
                got == t.content[*pos..],
                "{}: reading from {off} gave {} bytes, expected the {} bytes after position {pos}",
                t.path,
                got.len(),
                t.content.len() - pos
            );
        }
    }
}

fn append_round(s: &Server, streams: &mut [Tracked], rounds: std::ops::Range<usize>) {
    let mut c = Conn::open(s.addr);
    for i in rounds {
        for (n, t) in streams.iter_mut().enumerate() {
            let body = chunk(n, i);
            let next = append(&mut c, &t.path, t.ct, &body);
            t.content.extend_from_slice(&body);
            t.offsets.push((next, t.content.len()));
        }
    }
}

#[test]
fn offsets_read_back_the_same_bytes_after_restart() {
    // Small segments so the logs roll over several segment files.
    let mut s = start2(&["--max-body-bytes", "65536", "--segment-bytes", "131072"]);
    put(&s, "/offsets", &[], b"");
    let mut streams: Vec<Tracked> = (0..6)
        .map(|n| {
            let (path, ct) = if n % 3 == 2 {
                (format!("/offsets/s{n}"), TEXT)
            } else {
                (format!("/v1/stream/offsets-{n}"), OCTET)
            };
            let r = put(&s, &path, &[("Content-Type", ct)], b"");
            Tracked {
                path,
                ct,
                content: Vec::new(),
                offsets: vec![(next_offset(&r), 0)],
            }
        })
        .collect();
    append_round(&s, &mut streams, 0..20);
    let before: Vec<Vec<u8>> = streams
        .iter()
        .map(|t| read_from(&s, &t.path, "-1"))
        .collect();
    for (t, b) in streams.iter().zip(&before) {
        assert_eq!(&t.content, b, "{} before the restart", t.path);
    }

    restart(&mut s, Restart::Kill);
    check_offsets(&s, &streams);
    // The tail offset is still the tail, and appends continue from it.
    for t in &streams {
        let r = get(&s, &t.path, &t.offsets.last().unwrap().0);
        expect(&r, 200, "read at the tail");
        assert!(r.body.is_empty(), "{}: data past the tail", t.path);
        assert_eq!(r.header("stream-up-to-date"), Some("true"));
        assert_eq!(next_offset(&r), t.offsets.last().unwrap().0);
    }
    append_round(&s, &mut streams, 20..23);

    restart(&mut s, Restart::Term);
    check_offsets(&s, &streams);
}

// ---- 3. fsync interval -------------------------------------------------------------

#[test]
fn fsync_interval_keeps_acknowledged_data_across_restarts() {
    let mut s = start2(&["--fsync", "interval:200"]);
    put(&s, "/lazy", &[], b"");
    let paths = [
        "/v1/stream/lazy-0",
        "/v1/stream/lazy-1",
        "/lazy/s0",
        "/lazy/s1",
    ];
    let mut content = vec![Vec::new(); paths.len()];
    for p in paths {
        put(&s, p, &[("Content-Type", OCTET)], b"");
    }
    let write = |s: &Server, content: &mut Vec<Vec<u8>>, round: usize| {
        let mut c = Conn::open(s.addr);
        for i in 0..40 {
            for (n, p) in paths.iter().enumerate() {
                let body = chunk(n, round * 1000 + i);
                append(&mut c, p, OCTET, &body[..body.len().min(3000)]);
                content[n].extend_from_slice(&body[..body.len().min(3000)]);
            }
        }
    };
    let verify = |s: &Server, content: &[Vec<u8>], what: &str| {
        for (p, want) in paths.iter().zip(content) {
            let got = read_from(s, p, "-1");
            assert!(
                &got == want,
                "{p} after {what}: {} bytes, {} acknowledged",
                got.len(),
                want.len()
            );
        }
    };

    write(&s, &mut content, 0);
    restart(&mut s, Restart::Term);
    verify(&s, &content, "a SIGTERM restart");

    write(&s, &mut content, 1);
    thread::sleep(Duration::from_millis(500));
    restart(&mut s, Restart::Kill);
    verify(&s, &content, "500 ms then a SIGKILL restart");
}

// ---- 4. another shard count ------------------------------------------------------

#[test]
fn other_core_counts_reshard_and_keep_every_stream() {
    let mut s = start2(&[]);
    put(&s, "/shards", &[], b"");
    let paths: Vec<String> = (0..12)
        .map(|i| match i % 2 {
            0 => format!("/v1/stream/shard-{i}"),
            _ => format!("/shards/s{i}"),
        })
        .collect();
    let mut expected: Vec<Vec<u8>> = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        put(
            &s,
            p,
            &[("Content-Type", TEXT)],
            format!("data {i}").as_bytes(),
        );
        expected.push(format!("data {i}").into_bytes());
    }
    // Each core count in turn: every stream readable and writable, the
    // bucket still there; SIGTERM and SIGKILL both before re-sharding.
    for (round, cores) in ["1", "3", "2", "4", "2"].iter().enumerate() {
        match round % 2 {
            0 => stop(&mut s, Restart::Term),
            _ => s.kill(),
        }
        s.restart_with(&["--cores", cores]);
        let listening = format!("shards={cores}");
        let stderr = s.stderr_once_it_says(&listening);
        assert!(stderr.contains(&listening), "{stderr}");
        assert_eq!(
            req(s.addr, "GET", "/shards", &[], b"").status,
            200,
            "bucket lost at --cores {cores}"
        );
        for (i, p) in paths.iter().enumerate() {
            assert_eq!(
                read_from(&s, p, "-1"),
                expected[i],
                "{p} at --cores {cores}"
            );
            let mut c = Conn::open(s.addr);
            let more = format!(" +{cores}");
            append(&mut c, p, TEXT, more.as_bytes());
            expected[i].extend_from_slice(more.as_bytes());
            assert_eq!(
                read_from(&s, p, "-1"),
                expected[i],
                "{p} after appending at --cores {cores}"
            );
        }
    }
}

/// A segment keeps the size it was written with: after `--segment-bytes`
/// changes (down, then up, then down) every acknowledged byte is still
/// there and the log takes new appends (a smaller setting once cut a larger
/// segment's acknowledged records off as a torn tail, or refused to start).
#[test]
fn segment_size_changes_keep_every_acknowledged_byte() {
    let sizes = ["262144", "131072", "262144", "131072"];
    let args = |size| {
        [
            "--cores",
            "1",
            "--max-body-bytes",
            "65536",
            "--segment-bytes",
            size,
        ]
    };
    let mut s = Server::start(&args(sizes[0]));
    let path = "/v1/stream/resized";
    put(&s, path, &[("Content-Type", TEXT)], b"");
    let mut expected = Vec::new();
    for (round, size) in sizes.iter().enumerate().skip(1) {
        let mut c = Conn::open(s.addr);
        for i in 0..12 {
            let body = format!("{round}:{i}:{}\n", "x".repeat(15_000)).into_bytes();
            append(&mut c, path, TEXT, &body);
            expected.extend_from_slice(&body);
        }
        match round % 2 {
            0 => stop(&mut s, Restart::Term),
            _ => s.kill(),
        }
        s.restart_with(&args(size));
        let got = read_from(&s, path, "-1");
        assert!(
            got == expected,
            "round {round}, now --segment-bytes {size}: read {} bytes of {}",
            got.len(),
            expected.len()
        );
    }
}

/// A producer's retry answers the original offset and record range (ext.
/// §6.3) also after the cleaner rewrote the segments of its appends and a
/// restart re-sharded its stream: both drop the APPEND records that had
/// told them, so the stream's image carries them.
#[test]
fn producer_receipts_survive_cleaning_and_resharding() {
    let args = |cores| {
        let small = ["--max-body-bytes", "65536", "--segment-bytes", "131072"];
        let mut args = vec!["--cores", cores, "--clean-interval-ms", "20"];
        args.extend(small);
        args
    };
    let mut s = Server::start(&args("1"));
    let json = ("Content-Type", "application/json");
    let post_seq = |s: &Server, path: &str, seq: u64| {
        let seq_text = seq.to_string();
        let headers = [
            json,
            ("Producer-Id", "p"),
            ("Producer-Epoch", "0"),
            ("Producer-Seq", seq_text.as_str()),
        ];
        let r = post(s, path, &headers, format!("{{\"v\":{seq}}}").as_bytes());
        let record = |name| r.header(name).unwrap_or("?").to_string();
        let got = (
            next_offset(&r),
            record("stream-record-start"),
            record("stream-record-next"),
        );
        (r.status, got)
    };
    let paths: Vec<String> = (0..6).map(|i| format!("/v1/stream/receipts-{i}")).collect();
    let mut originals = Vec::new();
    for path in &paths {
        put(&s, path, &[json], b"");
        let acks: Vec<_> = (0..10).map(|seq| post_seq(&s, path, seq).1).collect();
        originals.push(acks);
    }
    // Filler in the same segments, then deleted: the cleaner rewrites them.
    for k in 0..6 {
        let filler = format!("/v1/stream/filler-{k}");
        put(&s, &filler, &[("Content-Type", TEXT)], b"");
        for _ in 0..4 {
            post(&s, &filler, &[("Content-Type", TEXT)], &vec![b'z'; 60_000]);
        }
        expect(
            &req(s.addr, "DELETE", &filler, &[], b""),
            204,
            "DELETE filler",
        );
    }
    // The first segment holds the producers' appends: wait until it is
    // cleaned (copied out and removed).
    let first = s.data_dir.join("shard-00/00000000000000000001.seg");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while first.exists() {
        assert!(std::time::Instant::now() < deadline, "{}", s.stderr());
        thread::sleep(Duration::from_millis(20));
    }
    for cores in ["1", "2", "1"] {
        s.kill();
        s.restart_with(&args(cores));
        for (path, acks) in paths.iter().zip(&originals) {
            for seq in 2..10 {
                let (status, got) = post_seq(&s, path, seq);
                assert_eq!(status, 204, "{path} seq {seq} at --cores {cores}");
                assert_eq!(
                    got, acks[seq as usize],
                    "{path} seq {seq} at --cores {cores}"
                );
            }
        }
    }
}

// ---- 5. one server per data dir --------------------------------------------------

#[test]
fn second_server_on_the_same_data_dir_is_refused() {
    let s = start2(&[]);
    put(&s, "/v1/stream/mine", &[("Content-Type", TEXT)], b"first");
    let (code, out) = run_rill(&s.data_dir, &["--cores", "2"], Duration::from_secs(5));
    assert!(
        code.is_some_and(|c| c != 0),
        "a second server on the same data dir must exit nonzero, got {code:?}: {out}"
    );
    assert!(
        out.contains("in use"),
        "the message must say the data dir is in use: {out}"
    );
    // The first server is unaffected.
    let mut c = Conn::open(s.addr);
    append(&mut c, "/v1/stream/mine", TEXT, b" second");
    assert_eq!(read_from(&s, "/v1/stream/mine", "-1"), b"first second");
}

/// Re-sharding copies streams in batches that each fit a segment. A large
/// append after almost half a segment of others (at the smallest segment
/// the body limit allows) once made a batch that did not: the start with
/// the new core count was refused, every time.
#[test]
fn resharding_fits_large_appends_into_its_batches() {
    let small = ["--segment-bytes", "2228224", "--max-body-bytes", "2097152"];
    let mut s = Server::start(&[&["--cores", "2"][..], &small].concat());
    let octets = [("Content-Type", OCTET)];
    let mut expected = Vec::new();
    for i in 0..6u8 {
        let path = format!("/v1/stream/large-{i}");
        put(&s, &path, &octets, b"");
        let data = [vec![i; 1_000_000], vec![i + 100; 1_500_000]].concat();
        for piece in [&data[..1_000_000], &data[1_000_000..]] {
            expect(&post(&s, &path, &octets, piece), 204, &path);
        }
        expected.push((path, data));
    }
    stop(&mut s, Restart::Term);
    s.restart_with(&[&["--cores", "3"][..], &small].concat());
    for (path, data) in &expected {
        assert!(
            read_from(&s, path, "-1") == *data,
            "{path} after re-sharding"
        );
    }
}

// ---- 6. recovery's memory ----------------------------------------------------------

/// Segments far larger than the data: a start that read one whole would
/// show it in its peak memory.
const BIG_SEGMENT: u64 = 192 << 20;

/// One shard with `BIG_SEGMENT`s, the byte stream `path` created, and a
/// connection to append with.
fn start_with_big_segments(path: &str) -> (Server, Conn) {
    let s = Server::start(&["--cores", "1", "--segment-bytes", &BIG_SEGMENT.to_string()]);
    let r = put(&s, path, &[("Content-Type", OCTET)], b"");
    expect(&r, 201, "create");
    let conn = Conn::open(s.addr);
    (s, conn)
}

/// `path` reads back as `data`, and the server's peak memory stayed under
/// half a segment.
fn reads_back_within_half_a_segment(s: &Server, path: &str, data: &[u8], what: &str) {
    assert!(read_from(s, path, "-1") == data, "{what}: data read back");
    let peak = s.peak_rss();
    assert!(
        peak < BIG_SEGMENT / 2,
        "{what} peaked at {} MiB with {} MiB segments",
        peak >> 20,
        BIG_SEGMENT >> 20
    );
}

/// Recovery scans a segment through a bounded window (STATUS Next 12), so
/// a restart's peak memory does not grow with `--segment-bytes`: each
/// shard used to read its segments whole, preallocated zeros and all.
/// The 1 MiB appends span the window's edges, and all of them read back.
#[test]
fn recovery_does_not_hold_a_whole_segment_in_memory() {
    let (mut s, mut conn) = start_with_big_segments("/v1/stream/big");
    let mut written = Vec::new();
    for i in 0..12u8 {
        let body: Vec<u8> = (0..(1 << 20) + 3 * i as usize)
            .map(|j| (j % 253) as u8 ^ i)
            .collect();
        append(&mut conn, "/v1/stream/big", OCTET, &body);
        written.extend_from_slice(&body);
    }
    drop(conn);

    restart(&mut s, Restart::Kill);
    reads_back_within_half_a_segment(&s, "/v1/stream/big", &written, "a restart");
}

/// A start that finds a torn tail zeroes the rest of its segment in parts
/// (crash probe, session 21: one buffer of the rest peaked at a segment's
/// size, 1 GiB with 1 GiB segments, after a power loss).
#[test]
fn a_torn_tail_is_scrubbed_in_bounded_memory() {
    let (mut s, mut conn) = start_with_big_segments("/v1/stream/torn");
    let body: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8 + 1).collect();
    append(&mut conn, "/v1/stream/torn", OCTET, &body);
    drop(conn);
    stop(&mut s, Restart::Kill);

    // Bytes no batch-end mark closes, right after the log's end: a torn tail.
    let dir = s.data_dir.join("shard-00");
    let mut segments: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    segments.sort();
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&segments[0])
        .unwrap();
    let mut head = vec![0u8; 1 << 20];
    std::os::unix::fs::FileExt::read_exact_at(&file, &mut head, 0).unwrap();
    let mut torn_at = 0;
    while let Decoded::Record { framed_len, .. } = format::decode(&head[torn_at..]) {
        torn_at += framed_len;
    }
    assert!(torn_at > body.len(), "the log holds the append");
    let torn_at = torn_at as u64;
    std::os::unix::fs::FileExt::write_all_at(&file, &[0xAB; 500], torn_at).unwrap();
    drop(file);

    s.restart();
    let what = "a start after a torn tail";
    reads_back_within_half_a_segment(&s, "/v1/stream/torn", &body, what);
}
