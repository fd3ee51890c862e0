//! `--max-reply-bytes` (OPERATIONS "Limits"): large replies count against
//! the budget from before their bytes are read into memory, so a burst of
//! readers that ask at once gets 503s (or, mid-SSE, waits) instead of
//! holding a copy each. Checked by the process's peak resident memory.

mod common;

use common::sse::Sse;
use common::{Conn, Server, enc, req};

/// Position-dependent bytes (every byte value occurs).
fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|j| (j * 7 % 251) as u8).collect()
}

/// A snapshot read holds its blob from the read until the client has it,
/// so it counts against `--max-reply-bytes` before the blob is read: a
/// burst of readers of a 2 MiB snapshot gets 503s instead of reading 2 MiB
/// each into memory first (200 MiB for 100 readers).
#[test]
fn snapshot_reads_lease_their_blob_before_reading_it() {
    let s = Server::start(&["--cores", "1", "--max-reply-bytes", "3145728"]);
    let octets = [("Content-Type", "application/octet-stream")];
    assert_eq!(req(s.addr, "PUT", "/held", &[], b"").status, 201);
    let created = req(s.addr, "PUT", "/held/s", &octets, b"0123456789");
    let offset = created.header("stream-next-offset").unwrap().to_string();
    let path = format!("/held/s/snapshot/{}", enc(&offset));
    let blob = payload(2 << 20);
    assert_eq!(req(s.addr, "PUT", &path, &octets, &blob).status, 204);
    assert_eq!(req(s.addr, "GET", &path, &[], b"").body, blob);
    let before = s.peak_rss();
    let mut readers: Vec<Conn> = (0..100).map(|_| Conn::open(s.addr)).collect();
    let ask = format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n");
    for reader in &mut readers {
        reader.send_raw(ask.as_bytes());
    }
    for reader in &mut readers {
        let r = reader.read_response();
        match r.status {
            200 => assert_eq!(r.body, blob),
            503 => assert!(r.text().contains("replies_backlogged")),
            other => panic!("unexpected status {other}"),
        }
    }
    let grown = s.peak_rss().saturating_sub(before);
    assert!(grown < 48 << 20, "peak memory grew by {grown} bytes");
}

/// A stream of 8 MiB that is read from the log (the restart empties the
/// cache), and the server's peak memory once it is up again.
fn logged_stream(s: &mut Server, path: &str) -> u64 {
    let octets = [("Content-Type", "application/octet-stream")];
    assert_eq!(req(s.addr, "PUT", path, &octets, b"").status, 201);
    let mut conn = Conn::open(s.addr);
    for _ in 0..8 {
        assert_eq!(
            conn.request("POST", path, &octets, &payload(1 << 20))
                .status,
            204
        );
    }
    s.restart();
    s.peak_rss()
}

/// 100 readers that ask at once for `query` of `path`, their requests sent
/// before any answer is read.
fn burst(s: &Server, path: &str, query: &str) -> Vec<Conn> {
    let ask = format!("GET {path}?{query} HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut readers: Vec<Conn> = (0..100).map(|_| Conn::open(s.addr)).collect();
    for reader in &mut readers {
        reader.send_raw(ask.as_bytes());
    }
    readers
}

/// Long-polls with data to send fetch a window each: it is leased before
/// the fetch, so a burst gets 503s past the budget instead of a fetched
/// 4 MiB window each (~400 MB for 100 readers).
#[test]
fn long_polls_lease_their_window_before_fetching_it() {
    burst_of_windows("polled", "offset=-1&live=long-poll");
}

/// A catch-up fetches its window before it is rendered and sent: it is
/// leased before the fetch, so a burst gets 503s past the budget instead of
/// a fetched window each that is then refused (~400 MB for 100 readers).
#[test]
fn catch_ups_lease_their_window_before_fetching_it() {
    // The stream's last 4 MiB: one window (more is answered whole, window
    // by window under one window's lease).
    burst_of_windows("caught", "offset=0000000000000000_0000000004194304");
}

/// 100 readers ask at once for `query` of a logged 8 MiB stream named
/// `name`, each answered its 4 MiB window (the stream's first or last
/// half: the same bytes) or 503 past a 6 MiB budget; the server's peak
/// memory grows by far less than a window each.
fn burst_of_windows(name: &str, query: &str) {
    let mut s = Server::start(&["--cores", "1", "--max-reply-bytes", "6291456"]);
    let path = format!("/v1/stream/{name}");
    let before = logged_stream(&mut s, &path);
    let window = payload(1 << 20).repeat(4);
    for mut reader in burst(&s, &path, query) {
        let r = reader.read_response();
        match r.status {
            200 => assert!(r.body == window, "{} bytes", r.body.len()),
            503 => assert!(r.text().contains("replies_backlogged")),
            other => panic!("unexpected status {other}"),
        }
    }
    let grown = s.peak_rss().saturating_sub(before);
    assert!(grown < 64 << 20, "peak memory grew by {grown} bytes");
}

/// A long-poll answered from the cache sends the cache's chunks as they
/// are: readers that arrive one after another after the data (each alone
/// in its audience) and never read hold no window of their own (40 held a
/// copy each, ~160 MB, before).
#[test]
fn cached_long_poll_answers_are_not_copied_per_reader() {
    use std::io::Write;
    let s = Server::start(&["--cores", "1", "--max-reply-bytes", "1073741824"]);
    let path = "/v1/stream/cached-polls";
    let octets = [("Content-Type", "application/octet-stream")];
    assert_eq!(req(s.addr, "PUT", path, &octets, b"").status, 201);
    let mut conn = Conn::open(s.addr);
    for _ in 0..8 {
        let r = conn.request("POST", path, &octets, &payload(1 << 20));
        assert_eq!(r.status, 204);
    }
    let before = s.peak_rss();
    let ask = format!("GET {path}?offset=-1&live=long-poll HTTP/1.1\r\nHost: x\r\n\r\n");
    let stalled: Vec<std::net::TcpStream> = (0..40)
        .map(|_| {
            let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None);
            let socket = socket.unwrap();
            socket.set_recv_buffer_size(4096).unwrap();
            socket.connect(&s.addr.into()).unwrap();
            let mut stalled: std::net::TcpStream = socket.into();
            stalled.write_all(ask.as_bytes()).unwrap();
            std::thread::sleep(std::time::Duration::from_millis(20));
            stalled
        })
        .collect();
    std::thread::sleep(std::time::Duration::from_millis(500));
    let grown = s.peak_rss().saturating_sub(before);
    assert!(grown < 48 << 20, "peak memory grew by {grown} bytes");
    let r = req(
        s.addr,
        "GET",
        &format!("{path}?offset=-1&live=long-poll"),
        &[],
        b"",
    );
    assert_eq!(r.status, 200);
    assert!(
        r.body == payload(1 << 20).repeat(4),
        "{} bytes",
        r.body.len()
    );
    drop(stalled);
}

/// An SSE response fetches window after window with no answer left to
/// refuse: each waits for the budget before it fetches, so readers that
/// do not read hold at most the budget, not a window each.
#[test]
fn sse_steps_wait_for_the_budget_before_fetching() {
    let mut s = Server::start(&["--cores", "1", "--max-reply-bytes", "6291456"]);
    let before = logged_stream(&mut s, "/v1/stream/watched");
    let readers = burst(&s, "/v1/stream/watched", "offset=-1&live=sse");
    std::thread::sleep(std::time::Duration::from_secs(2));
    let grown = s.peak_rss().saturating_sub(before);
    assert!(grown < 64 << 20, "peak memory grew by {grown} bytes");
    drop(readers);
    // Their responses end as they find their clients gone.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let r = req(s.addr, "GET", "/v1/stream/watched?offset=-1", &[], b"");
        if r.status == 200 {
            assert_eq!(r.body.len(), 8 << 20, "the whole stream");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "budget never let go");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

/// An SSE response that cannot get the budget waits its turn, but not
/// past its cycle: meanwhile it sends a keep-alive control each
/// `--long-poll-timeout-ms` (not up to date: it is behind), then it ends
/// cleanly (the chunked terminator) instead of being cut off. Here a reader
/// that stopped reading holds the whole budget (a stalled write keeps it
/// for `--idle-timeout-ms`), and a catch-up is refused 503.
#[test]
fn an_sse_response_kept_waiting_ends_with_its_cycle() {
    let mut s = Server::start(&[
        "--cores",
        "1",
        "--max-reply-bytes",
        "524288",
        "--sse-cycle-ms",
        "2000",
        "--long-poll-timeout-ms",
        "400",
        "--idle-timeout-ms",
        "30000",
    ]);
    logged_stream(&mut s, "/v1/stream/hogged");
    let mut hog = Conn::open(s.addr);
    hog.send_raw(b"GET /v1/stream/hogged?offset=-1&live=sse HTTP/1.1\r\nHost: x\r\n\r\n");
    std::thread::sleep(std::time::Duration::from_millis(500));
    let mut waiting = Sse::open(s.addr, "/v1/stream/hogged?offset=-1&live=sse");
    assert_eq!(waiting.head.status, 200);
    std::thread::sleep(std::time::Duration::from_millis(200));
    let r = req(s.addr, "GET", "/v1/stream/hogged?offset=-1", &[], b"");
    assert_eq!(r.status, 503, "{}", r.text());
    // A small reply is not counted, so it still goes out: a bootstrap of a
    // tiny stream too (it leased a whole 1 MiB window before).
    assert_eq!(req(s.addr, "PUT", "/small", &[], b"").status, 201);
    let text = [("Content-Type", "text/plain")];
    assert_eq!(req(s.addr, "PUT", "/small/s", &text, b"tiny").status, 201);
    let r = req(s.addr, "GET", "/small/s/bootstrap", &[], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    let wait = std::time::Duration::from_secs(10);
    let mut controls = 0;
    while let Some(event) = waiting.next(wait) {
        assert_eq!(event.name, "control", "{event:?}");
        let json = event.json();
        assert_eq!(
            json["streamNextOffset"],
            "0000000000000000_0000000000000000"
        );
        assert_eq!(json.get("upToDate"), None, "{json}");
        controls += 1;
    }
    assert!(controls >= 3, "keep-alives while it waited: {controls}");
    drop(hog);
}
