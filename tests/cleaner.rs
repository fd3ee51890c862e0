//! Space comes back (issue 3): deleted streams leave segments dead; the
//! cleaner copies what is still live and removes them, crash-safely. Disk
//! use returns close to the baseline, and live data stays exact, also
//! across a SIGKILL and restart. Data retained away (extensions §2.2) is
//! reclaimed the same way.

mod common;

use std::time::{Duration, Instant};

use common::disk::log_bytes;
use common::{Conn, Server, req};

const SEGMENT: u64 = 256 << 10;

/// One shard with small segments, cleaning every `interval_ms`.
fn start_cleaning(interval_ms: &str) -> Server {
    let segment = SEGMENT.to_string();
    Server::start(&[
        "--cores",
        "1",
        "--segment-bytes",
        &segment,
        "--max-body-bytes",
        "65536",
        "--clean-interval-ms",
        interval_ms,
    ])
}

fn fill(s: &Server, path: &str, bytes: usize) -> Vec<u8> {
    assert_eq!(
        req(
            s.addr,
            "PUT",
            path,
            &[("Content-Type", "application/octet-stream")],
            b""
        )
        .status,
        201
    );
    let mut conn = Conn::open(s.addr);
    let mut written = Vec::new();
    let mut i = 0u32;
    while written.len() < bytes {
        let body: Vec<u8> = (0..20_000u32)
            .map(|j| (j.wrapping_mul(31) ^ i) as u8)
            .collect();
        let r = conn.request(
            "POST",
            path,
            &[("Content-Type", "application/octet-stream")],
            &body,
        );
        assert_eq!(r.status, 204, "{}", r.text());
        written.extend_from_slice(&body);
        i += 1;
    }
    written
}

fn read_all(s: &Server, path: &str) -> Vec<u8> {
    let mut conn = Conn::open(s.addr);
    let mut data = Vec::new();
    let mut offset = "-1".to_string();
    loop {
        let r = conn.request("GET", &format!("{path}?offset={offset}"), &[], b"");
        if r.status == 410 && offset == "-1" {
            // Retention moved: the 410 names where the retained data starts.
            offset = r.header("stream-next-offset").unwrap().to_string();
            continue;
        }
        assert_eq!(r.status, 200, "{}", r.text());
        data.extend_from_slice(&r.body);
        if r.header("stream-up-to-date") == Some("true") {
            return data;
        }
        offset = r.header("stream-next-offset").unwrap().to_string();
    }
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn deleted_data_is_reclaimed_and_live_data_survives() {
    let mut s = start_cleaning("200");
    let baseline = log_bytes(&s.data_dir);
    // A live stream written between the doomed ones: its bytes share their
    // segments and must be moved, not lost.
    let mut keep = fill(&s, "/v1/stream/keep", 100_000);
    for i in 0..6 {
        fill(&s, &format!("/v1/stream/doomed-{i}"), 600_000);
        keep.extend(fill_more(&s, "/v1/stream/keep", i));
    }
    let full = log_bytes(&s.data_dir);
    assert!(
        full > baseline + 12 * SEGMENT,
        "the test must fill many segments ({full} bytes)"
    );
    for i in 0..6 {
        assert_eq!(
            req(
                s.addr,
                "DELETE",
                &format!("/v1/stream/doomed-{i}"),
                &[],
                b""
            )
            .status,
            204
        );
    }
    // Live data: keep (~220 KB) plus the head and spare segments.
    let target = baseline + 4 * SEGMENT;
    wait_until("the cleaner to reclaim the deleted data", || {
        log_bytes(&s.data_dir) <= target
    });
    keep_survives_a_restart(&mut s, &keep);
    assert_eq!(
        req(s.addr, "HEAD", "/v1/stream/doomed-0", &[], b"").status,
        404,
        "a deleted stream came back"
    );
    // Writes continue after cleaning and restart.
    let r = req(
        s.addr,
        "POST",
        "/v1/stream/keep",
        &[("Content-Type", "application/octet-stream")],
        b"tail",
    );
    assert_eq!(r.status, 204);
    keep.extend_from_slice(b"tail");
    assert!(read_all(&s, "/v1/stream/keep") == keep);
}

/// `/v1/stream/keep` reads back as `keep` after cleaning and after a restart.
fn keep_survives_a_restart(s: &mut Server, keep: &[u8]) {
    assert!(
        read_all(s, "/v1/stream/keep") == keep,
        "live data changed while cleaning"
    );
    s.restart();
    assert!(
        read_all(s, "/v1/stream/keep") == keep,
        "live data changed after restart"
    );
}

fn fill_more(s: &Server, path: &str, round: usize) -> Vec<u8> {
    let body = vec![round as u8; 20_000];
    let r = req(
        s.addr,
        "POST",
        path,
        &[("Content-Type", "application/octet-stream")],
        &body,
    );
    assert_eq!(r.status, 204);
    body
}

#[test]
fn sigkill_while_cleaning_loses_nothing() {
    let mut s = start_cleaning("50");
    let mut keep = fill(&s, "/v1/stream/keep", 50_000);
    for round in 0..4 {
        for i in 0..3 {
            let path = format!("/v1/stream/d-{round}-{i}");
            fill(&s, &path, 300_000);
            keep.extend(fill_more(&s, "/v1/stream/keep", i));
            assert_eq!(req(s.addr, "DELETE", &path, &[], b"").status, 204);
        }
        // The cleaner runs every 50 ms: kill at some point of its work.
        std::thread::sleep(Duration::from_millis(30 + 40 * round as u64));
        s.restart();
        assert!(
            read_all(&s, "/v1/stream/keep") == keep,
            "round {round}: live data changed"
        );
    }
}

#[test]
fn retained_away_data_is_reclaimed() {
    let mut s = start_cleaning("200");
    let baseline = log_bytes(&s.data_dir);
    assert_eq!(req(s.addr, "PUT", "/retained", &[], b"").status, 201);
    let path = "/retained/log";
    fill(&s, path, 3_000_000);
    let full = log_bytes(&s.data_dir);
    assert!(
        full > baseline + 10 * SEGMENT,
        "fill many segments ({full})"
    );
    let head = req(s.addr, "HEAD", path, &[], b"");
    let cut = head.header("stream-next-offset").unwrap().to_string();
    let tail = fill_more(&s, path, 7);
    let at = |what: &str| format!("{path}/{what}/{cut}");
    assert_eq!(
        req(s.addr, "PUT", &at("snapshot"), &[], b"state").status,
        204
    );
    assert_eq!(req(s.addr, "PUT", &at("retention"), &[], b"").status, 204);
    // Only the tail (20 KB) is live: head and spare segments remain.
    let target = baseline + 4 * SEGMENT;
    wait_until("the cleaner to reclaim the retained-away data", || {
        log_bytes(&s.data_dir) <= target
    });
    let zero = format!("{path}?offset={}", rill::protocol::offset::format(0));
    for round in 0..2 {
        assert!(read_all(&s, path) == tail, "round {round}: tail changed");
        assert_eq!(req(s.addr, "GET", &zero, &[], b"").status, 410);
        s.restart();
    }
}

/// Every stream of `streams` reads back exactly (status and bytes).
fn assert_all_intact(s: &Server, streams: &[(String, Vec<u8>)], when: &str) {
    for (path, data) in streams {
        let head = req(s.addr, "HEAD", path, &[], b"");
        assert_eq!(head.status, 200, "{when}: {path} is gone");
        assert!(read_all(s, path) == *data, "{when}: {path} changed");
    }
}

#[test]
fn cleaning_between_re_shardings_keeps_every_stream() {
    // Going from 1 shard to 2 logs the drop of the streams that moved to
    // shard 1 (tombstones of their incarnations) in shard 0; going back to
    // 1 moves them home, after those tombstones. The cleaner must not copy
    // such a tombstone past the stream's return: the next start would
    // delete the stream.
    let segment = SEGMENT.to_string();
    let args = |cores| {
        [
            "--cores",
            cores,
            "--segment-bytes",
            &segment,
            "--max-body-bytes",
            "65536",
            "--clean-interval-ms",
            "50",
        ]
        .map(String::from)
    };
    let mut s = Server::start(&args("1").each_ref().map(String::as_str));
    let mut streams = Vec::new();
    for i in 0..24 {
        let path = format!("/v1/stream/kept-{i}");
        streams.push((path.clone(), fill(&s, &path, 30_000)));
        // Dead data around the kept streams, so their segments get cleaned.
        let doomed = format!("/v1/stream/doomed-{i}");
        fill(&s, &doomed, 60_000);
        assert_eq!(req(s.addr, "DELETE", &doomed, &[], b"").status, 204);
    }
    let mut cleaned = 0;
    for (round, cores) in ["2", "1", "2", "1", "2", "1"].into_iter().enumerate() {
        s.restart_with(&args(cores).each_ref().map(String::as_str));
        let when = format!("round {round}, --cores {cores}");
        assert_all_intact(&s, &streams, &when);
        // Roll the head past what the move wrote (the drops among it), with
        // data that dies at once, and let the cleaner work through it.
        let doomed = format!("/v1/stream/doomed-round-{round}");
        fill(&s, &doomed, 600_000);
        assert_eq!(req(s.addr, "DELETE", &doomed, &[], b"").status, 204);
        std::thread::sleep(Duration::from_millis(600));
        cleaned += s.stderr().matches("cleaned segment").count();
        s.kill();
    }
    assert!(cleaned > 0, "the cleaner must have run between the moves");
    s.restart_with(&args("1").each_ref().map(String::as_str));
    assert_all_intact(&s, &streams, "after the last move");
}

#[test]
fn segments_of_metadata_alone_are_not_cleaned_forever() {
    // Creates of empty streams hold no stream bytes, so their segments look
    // empty to the victim choice; cleaning one only writes the streams'
    // images again, into segments that look just as empty. The cleaner
    // must see that this frees nothing and leave them, not loop.
    let s = start_cleaning("20");
    let mut conn = Conn::open(s.addr);
    let octet = [("Content-Type", "application/octet-stream")];
    for i in 0..3000 {
        let path = format!("/v1/stream/empty-with-a-longer-name-{i:05}");
        assert_eq!(conn.request("PUT", &path, &octet, b"").status, 201);
    }
    let cleaned = || s.stderr().matches("cleaned segment").count();
    std::thread::sleep(Duration::from_millis(1500));
    let settled = cleaned();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(
        cleaned(),
        settled,
        "the cleaner keeps rewriting the same images"
    );
    let head = req(
        s.addr,
        "HEAD",
        "/v1/stream/empty-with-a-longer-name-00000",
        &[],
        b"",
    );
    assert_eq!(head.status, 200);
}

/// Catch-up reads racing a busy cleaner (small segments, a tiny cache, a
/// pass every 20 ms) follow data the cleaner moved, however often it moves
/// during one read: every read is a 200 with exact bytes (a fetch used to
/// give up after three moves with a 503 naming a removed segment file).
#[test]
fn reads_racing_the_cleaner_follow_moved_data() {
    let s = Server::start(&[
        "--cores",
        "1",
        "--segment-bytes",
        "131072",
        "--max-body-bytes",
        "65536",
        "--clean-interval-ms",
        "20",
        "--cache-bytes",
        "65536",
    ]);
    let octets = [("Content-Type", "application/octet-stream")];
    assert_eq!(
        req(s.addr, "PUT", "/v1/stream/keep", &octets, b"").status,
        201
    );
    let until = Instant::now() + Duration::from_secs(4);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let mut conn = Conn::open(s.addr);
            for k in 0.. {
                if Instant::now() > until {
                    break;
                }
                let filler = format!("/v1/stream/filler-{k}");
                assert_eq!(conn.request("PUT", &filler, &octets, b"").status, 201);
                for _ in 0..3 {
                    let keep = conn.request("POST", "/v1/stream/keep", &octets, &[b'k'; 500]);
                    assert_eq!(keep.status, 204);
                    conn.request("POST", &filler, &octets, &[b'z'; 30_000]);
                }
                assert_eq!(conn.request("DELETE", &filler, &[], b"").status, 204);
            }
        });
        for _ in 0..2 {
            scope.spawn(|| {
                while Instant::now() < until {
                    let data = read_all(&s, "/v1/stream/keep");
                    assert!(data.len().is_multiple_of(500) && data.iter().all(|&b| b == b'k'));
                }
            });
        }
    });
}

/// A victim holding more than a megabyte of live appends is copied in
/// parts, each committed before the next: writes to the same stream that
/// land between the parts, and a close after them, must all survive the
/// copies and a SIGKILL (the stream's IMAGE is taken as its part goes, so
/// it can never roll a logged write back on recovery).
#[test]
fn writes_between_the_cleaners_parts_survive_a_restart() {
    let mut s = Server::start(&[
        "--cores",
        "1",
        "--segment-bytes",
        "8388608",
        "--max-body-bytes",
        "65536",
        "--clean-interval-ms",
        "50",
    ]);
    let octets = [("Content-Type", "application/octet-stream")];
    let path = "/v1/stream/keep";
    assert_eq!(req(s.addr, "PUT", path, &octets, b"").status, 201);
    let mut conn = Conn::open(s.addr);
    let mut keep = Vec::new();
    let append = |conn: &mut Conn, keep: &mut Vec<u8>, body: Vec<u8>| {
        let r = conn.request("POST", path, &octets, &body);
        assert_eq!(r.status, 204, "{}", r.text());
        keep.extend_from_slice(&body);
    };
    // About 3 MiB of `keep` between 8 MiB of junk a round: each segment is
    // mostly junk, and its live part copies in several parts.
    for round in 0..3u8 {
        let junk = format!("/v1/stream/junk-{round}");
        assert_eq!(req(s.addr, "PUT", &junk, &octets, b"").status, 201);
        for i in 0..150u32 {
            let body: Vec<u8> = (0..20_000u32).map(|j| (j ^ i) as u8 ^ round).collect();
            append(&mut conn, &mut keep, body);
            let r = conn.request("POST", &junk, &octets, &vec![round; 60_000]);
            assert_eq!(r.status, 204);
        }
    }
    let before = log_bytes(&s.data_dir);
    for round in 0..3 {
        let junk = format!("/v1/stream/junk-{round}");
        assert_eq!(req(s.addr, "DELETE", &junk, &[], b"").status, 204);
    }
    // Small appends go on while the cleaner copies.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut i = 0u32;
    while log_bytes(&s.data_dir) + 2 * 8388608 > before {
        append(&mut conn, &mut keep, i.to_be_bytes().to_vec());
        i += 1;
        assert!(Instant::now() < deadline, "the cleaner reclaimed nothing");
    }
    s.kill();
    s.restart();
    assert!(read_all(&s, path) == keep, "live data changed");
}

/// Segments the cleaner reclaimed, from `/v1/metrics`.
fn segments_cleaned(s: &Server) -> u64 {
    let text = req(s.addr, "GET", "/v1/metrics", &[], b"").text();
    text.lines()
        .filter(|l| l.starts_with("rill_cleaner_segments_cleaned_total"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

/// The cleaner reads its victim through a 4 MiB window (STATUS Next 12):
/// live appends of 1.3 MiB between dead ones of 3.5 MiB lie across the
/// window's edges and its skips, and all of them survive the cleaning
/// and a restart.
#[test]
fn live_data_across_read_windows_survives_cleaning() {
    let segment = (16u64 << 20).to_string();
    let mut s = Server::start(&[
        "--cores",
        "1",
        "--segment-bytes",
        &segment,
        "--max-body-bytes",
        "4194304",
        "--clean-interval-ms",
        "100",
    ]);
    let octet = [("Content-Type", "application/octet-stream")];
    for path in ["/v1/stream/keep", "/v1/stream/gone"] {
        assert_eq!(req(s.addr, "PUT", path, &octet, b"").status, 201);
    }
    let mut conn = Conn::open(s.addr);
    let mut keep = Vec::new();
    for i in 0..10u32 {
        let live: Vec<u8> = (0..1_300_000 + 4099 * i)
            .map(|j| (j.wrapping_mul(131) ^ i) as u8)
            .collect();
        let r = conn.request("POST", "/v1/stream/keep", &octet, &live);
        assert_eq!(r.status, 204, "{}", r.text());
        keep.extend_from_slice(&live);
        let dead = vec![i as u8; 3_500_000];
        let r = conn.request("POST", "/v1/stream/gone", &octet, &dead);
        assert_eq!(r.status, 204, "{}", r.text());
    }
    assert_eq!(
        req(s.addr, "DELETE", "/v1/stream/gone", &[], b"").status,
        204
    );
    wait_until("the cleaner to reclaim two segments", || {
        segments_cleaned(&s) >= 2
    });
    keep_survives_a_restart(&mut s, &keep);
}
