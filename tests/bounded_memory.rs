//! Bounded memory (issue 3): with a cache far smaller than the data, every
//! byte still reads back exactly, from the start and from offsets in the
//! middle, before and after a restart: data no longer cached comes from the
//! segments.

mod common;

use common::{Conn, Server, enc, req};

const CACHE_BYTES: u64 = 256 << 10;
const STREAM_BYTES: usize = 2 << 20;

/// Distinct, position-dependent payload bytes (every byte value occurs).
fn payload(stream: usize, i: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| ((stream * 131 + i * 31 + j * 7) % 256) as u8)
        .collect()
}

fn text_payload(i: usize) -> Vec<u8> {
    format!("line {i}: {}é\n", "x".repeat(9000 + (i * 977) % 20000)).into_bytes()
}

/// Reads `path` from `offset` to the tail, paging with Stream-Next-Offset.
fn read_from(s: &Server, path: &str, offset: &str) -> Vec<u8> {
    let mut conn = Conn::open(s.addr);
    let (mut data, mut offset) = (Vec::new(), offset.to_string());
    loop {
        let r = conn.request("GET", &format!("{path}?offset={}", enc(&offset)), &[], b"");
        assert_eq!(r.status, 200, "{path} at {offset}: {}", r.text());
        data.extend_from_slice(&r.body);
        let next = r.header("stream-next-offset").unwrap().to_string();
        if r.header("stream-up-to-date") == Some("true") {
            return data;
        }
        assert_ne!(next, offset, "no progress");
        offset = next;
    }
}

struct Written {
    path: String,
    data: Vec<u8>,
    /// (offset token, bytes before it) after some appends.
    marks: Vec<(String, usize)>,
}

fn write_stream(
    s: &Server,
    path: &str,
    content_type: &str,
    next: impl Fn(usize) -> Vec<u8>,
) -> Written {
    assert_eq!(
        req(s.addr, "PUT", path, &[("Content-Type", content_type)], b"").status,
        201
    );
    let mut conn = Conn::open(s.addr);
    let mut w = Written {
        path: path.to_string(),
        data: Vec::new(),
        marks: Vec::new(),
    };
    let mut i = 0;
    while w.data.len() < STREAM_BYTES {
        let body = next(i);
        let r = conn.request("POST", path, &[("Content-Type", content_type)], &body);
        assert_eq!(r.status, 204, "{}", r.text());
        w.data.extend_from_slice(&body);
        if i % 7 == 3 {
            w.marks.push((
                r.header("stream-next-offset").unwrap().to_string(),
                w.data.len(),
            ));
        }
        i += 1;
    }
    w
}

fn check(s: &Server, written: &[Written]) {
    for w in written {
        assert!(
            read_from(s, &w.path, "-1") == w.data,
            "{}: full read differs",
            w.path
        );
        for (offset, before) in &w.marks {
            assert!(
                read_from(s, &w.path, offset) == w.data[*before..],
                "{}: read from {offset} differs",
                w.path
            );
        }
    }
}

#[test]
fn reads_many_times_the_cache_back_exactly() {
    let cache = CACHE_BYTES.to_string();
    let mut s = Server::start(&[
        "--cores",
        "2",
        "--cache-bytes",
        &cache,
        "--segment-bytes",
        "2097152",
        "--max-body-bytes",
        "65536",
    ]);
    let written = vec![
        write_stream(
            &s,
            "/v1/stream/big-binary-0",
            "application/octet-stream",
            |i| payload(0, i, 10_000 + (i * 7919) % 30_000),
        ),
        write_stream(
            &s,
            "/v1/stream/big-binary-1",
            "application/octet-stream",
            |i| payload(1, i, 32 << 10),
        ),
        write_stream(&s, "/v1/stream/big-text", "text/plain", text_payload),
    ];
    let total: usize = written.iter().map(|w| w.data.len()).sum();
    assert!(total as u64 > 20 * CACHE_BYTES);
    check(&s, &written);
    s.restart();
    check(&s, &written);
}

#[test]
fn sse_catch_up_from_the_log() {
    let cache = CACHE_BYTES.to_string();
    let s = Server::start(&[
        "--cores",
        "1",
        "--cache-bytes",
        &cache,
        "--max-body-bytes",
        "65536",
    ]);
    let w = write_stream(&s, "/v1/stream/sse-big", "text/plain", text_payload);
    let mut conn = Conn::open(s.addr);
    conn.send_raw(&common::build_request(
        &s.addr,
        "GET",
        "/v1/stream/sse-big?offset=-1&live=sse",
        &[],
        b"",
    ));
    let head = conn.read_head();
    assert_eq!(head.status, 200);
    let body = conn.read_chunked_until(b"\"upToDate\":true", std::time::Duration::from_secs(20));
    let text = String::from_utf8(body).unwrap();
    let mut received = String::new();
    for event in text.split("\n\n").filter(|e| e.starts_with("event: data")) {
        let lines: Vec<&str> = event
            .lines()
            .skip(1)
            .map(|l| l.strip_prefix("data:").unwrap())
            .collect();
        received.push_str(&lines.join("\n"));
    }
    assert_eq!(received.as_bytes(), w.data.as_slice());
}

/// Producer state is bounded by `--max-producer-id-bytes` (431) and
/// `--max-producers-per-stream` (429 for a new id; known ids go on), also
/// after a restart rebuilt the producers from the log.
#[test]
fn producer_state_is_bounded() {
    let mut s = Server::start(&[
        "--max-producer-id-bytes",
        "8",
        "--max-producers-per-stream",
        "2",
    ]);
    let path = "/v1/stream/producer-bounds";
    let text = ("content-type", "text/plain");
    assert_eq!(req(s.addr, "PUT", path, &[text], b"").status, 201);
    let post = |s: &Server, id: &str, seq: &str| {
        let headers = [
            text,
            ("producer-id", id),
            ("producer-epoch", "0"),
            ("producer-seq", seq),
        ];
        req(s.addr, "POST", path, &headers, b"x")
    };
    let long = post(&s, "123456789", "0");
    assert_eq!(long.status, 431, "{}", long.text());
    assert!(long.text().contains("producer_id_too_long"));
    assert_eq!(post(&s, "12345678", "0").status, 200);
    assert_eq!(post(&s, "b", "0").status, 200);
    s.restart();
    let third = post(&s, "c", "0");
    assert_eq!(third.status, 429, "{}", third.text());
    assert!(third.text().contains("too_many_producers"));
    assert_eq!(post(&s, "b", "1").status, 200, "a known producer goes on");
    assert_eq!(post(&s, "b", "1").status, 204, "and is deduplicated");
}

/// Clients that ask and never read cannot make a shard hold replies
/// without bound: past `--max-reply-bytes` large replies get 503 (with
/// Retry-After and a JSON body), and a write no client byte drains for
/// `--idle-timeout-ms` is abandoned, which gives its bytes back.
#[test]
fn replies_held_for_clients_that_do_not_read_are_bounded() {
    use std::io::Write;
    let s = Server::start(&[
        "--cores",
        "1",
        "--max-reply-bytes",
        "6291456",
        "--idle-timeout-ms",
        "1500",
    ]);
    let path = "/v1/stream/slow-readers";
    let octets = [("Content-Type", "application/octet-stream")];
    assert_eq!(req(s.addr, "PUT", path, &octets, b"").status, 201);
    let mut conn = Conn::open(s.addr);
    for i in 0..8 {
        let r = conn.request("POST", path, &octets, &payload(0, i, 1 << 20));
        assert_eq!(r.status, 204);
    }
    // A reader with a tiny receive window that never reads: the 4 MiB
    // window its whole (8 MiB) catch-up is writing stays held by the server.
    let stalled = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    stalled.set_recv_buffer_size(4096).unwrap();
    stalled.connect(&s.addr.into()).unwrap();
    let mut stalled: std::net::TcpStream = stalled.into();
    write!(stalled, "GET {path}?offset=-1 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let busy = req(s.addr, "GET", &format!("{path}?offset=-1"), &[], b"");
    assert_eq!(busy.status, 503, "a second held window is past the budget");
    assert!(busy.text().contains("replies_backlogged") && busy.header("retry-after").is_some());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(15);
    loop {
        let r = req(s.addr, "GET", &format!("{path}?offset=-1"), &[], b"");
        if r.status == 200 {
            assert_eq!(r.body.len(), 8 << 20, "the whole stream");
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the stalled reply was never let go"
        );
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    drop(stalled);
}
