//! Black-box tests of the real `rill` binary over raw HTTP/1.1: the basic
//! stream operations, HTTP/1.1 connection handling, malformed input, and the
//! append/close race.

mod common;

use common::{Conn, ReadError, Response, Server, enc, req, unique_name};
use std::collections::HashMap;
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::{Duration, Instant};

const OCTET: &str = "application/octet-stream";
const TEXT: &str = "text/plain";

fn stream_path(name: &str) -> String {
    format!("/v1/stream/{name}")
}

fn new_stream_path() -> String {
    stream_path(&unique_name("bb"))
}

fn next_offset(r: &Response) -> String {
    r.header("stream-next-offset")
        .unwrap_or_else(|| {
            panic!(
                "no Stream-Next-Offset in {} response: {:?}",
                r.status, r.headers
            )
        })
        .to_string()
}

/// PUT a stream with `content_type`; asserts 201 and returns its tail offset.
fn create(s: &Server, path: &str, content_type: &str) -> String {
    let r = req(s.addr, "PUT", path, &[("Content-Type", content_type)], b"");
    assert_eq!(r.status, 201, "create {path}: {:?} {}", r.headers, r.text());
    next_offset(&r)
}

/// POST `body`; asserts 204 and returns the new tail offset.
fn append(c: &mut Conn, path: &str, content_type: &str, body: &[u8]) -> String {
    let r = c.request("POST", path, &[("Content-Type", content_type)], body);
    assert_eq!(
        r.status,
        204,
        "append to {path}: {:?} {}",
        r.headers,
        r.text()
    );
    next_offset(&r)
}

fn read_from(addr: std::net::SocketAddr, path: &str, offset: &str) -> Response {
    let r = req(
        addr,
        "GET",
        &format!("{path}?offset={}", enc(offset)),
        &[],
        b"",
    );
    assert_eq!(
        r.status,
        200,
        "GET {path}?offset={offset}: {:?} {}",
        r.headers,
        r.text()
    );
    r
}

fn is_up_to_date(r: &Response) -> bool {
    r.header("stream-up-to-date")
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

/// The server still answers a fresh connection correctly.
fn assert_alive(s: &Server) {
    let path = new_stream_path();
    let r = req(s.addr, "PUT", &path, &[("Content-Type", TEXT)], b"");
    assert_eq!(
        r.status, 201,
        "server no longer works after bad input: {:?}",
        r.headers
    );
}

/// The connection got a 4xx response or was closed without a response.
fn assert_4xx_or_closed(c: &mut Conn, what: &str) {
    match c.try_read_response() {
        Ok(r) => assert!(
            (400..500).contains(&r.status),
            "{what}: expected 4xx or close, got {} {:?} {}",
            r.status,
            r.headers,
            r.text()
        ),
        Err(ReadError::Closed) => {}
        Err(e) => panic!("{what}: expected 4xx or close, got: {e}"),
    }
}

/// Read a response and require `status` (a reset after the server answered
/// counts as a failure: the status must arrive).
fn assert_status(c: &mut Conn, status: u16, what: &str) {
    match c.try_read_response() {
        Ok(r) => assert_eq!(r.status, status, "{what}: {:?} {}", r.headers, r.text()),
        Err(e) => panic!("{what}: expected {status}, got: {e}"),
    }
}

// ---- basic operations --------------------------------------------------------

#[test]
fn create_returns_201_location_and_offset() {
    let s = Server::start(&[]);
    let path = new_stream_path();
    let r = req(s.addr, "PUT", &path, &[("Content-Type", OCTET)], b"");
    assert_eq!(r.status, 201, "{:?}", r.headers);
    let loc = r.header("location").expect("Location header on 201");
    assert!(
        loc.ends_with(&path),
        "Location {loc:?} should point at {path}"
    );
    assert!(!next_offset(&r).is_empty(), "empty Stream-Next-Offset");
}

#[test]
fn recreate_same_config_is_200_and_mismatch_is_409() {
    let s = Server::start(&[]);
    let path = new_stream_path();
    let first = create(&s, &path, TEXT);
    let again = req(s.addr, "PUT", &path, &[("Content-Type", TEXT)], b"");
    assert_eq!(
        again.status, 200,
        "idempotent re-create: {:?}",
        again.headers
    );
    assert_eq!(
        next_offset(&again),
        first,
        "re-create must not change the tail"
    );
    let other = req(s.addr, "PUT", &path, &[("Content-Type", OCTET)], b"");
    assert_eq!(
        other.status, 409,
        "re-create with another Content-Type: {:?}",
        other.headers
    );
}

#[test]
fn append_returns_204_and_increasing_offsets() {
    let s = Server::start(&[]);
    let path = new_stream_path();
    let mut prev = create(&s, &path, OCTET);
    let mut c = Conn::open(s.addr);
    for i in 0..5 {
        let off = append(&mut c, &path, OCTET, format!("payload-{i}").as_bytes());
        assert!(
            off > prev,
            "offset {off:?} after append {i} is not > {prev:?}"
        );
        prev = off;
    }
}

#[test]
fn read_from_start_returns_everything_up_to_date() {
    let s = Server::start(&[]);
    let path = new_stream_path();
    create(&s, &path, OCTET);
    let mut c = Conn::open(s.addr);
    let mut expected = Vec::new();
    let mut tail = String::new();
    for i in 0..4u8 {
        // Binary payloads, including bytes that are not valid UTF-8.
        let chunk = vec![i, 0xff, b'\r', b'\n', 0, i.wrapping_mul(37)];
        tail = append(&mut c, &path, OCTET, &chunk);
        expected.extend_from_slice(&chunk);
    }
    let r = read_from(s.addr, &path, "-1");
    assert_eq!(r.body, expected);
    assert!(
        is_up_to_date(&r),
        "Stream-Up-To-Date: true expected: {:?}",
        r.headers
    );
    assert_eq!(next_offset(&r), tail);
}

#[test]
fn read_from_returned_offset_returns_following_bytes() {
    let s = Server::start(&[]);
    let path = new_stream_path();
    let o0 = create(&s, &path, TEXT);
    let mut c = Conn::open(s.addr);
    let o1 = append(&mut c, &path, TEXT, b"alpha ");
    let o2 = append(&mut c, &path, TEXT, b"beta ");
    let o3 = append(&mut c, &path, TEXT, b"gamma");
    assert_eq!(read_from(s.addr, &path, &o0).text(), "alpha beta gamma");
    assert_eq!(read_from(s.addr, &path, &o1).text(), "beta gamma");
    let r = read_from(s.addr, &path, &o2);
    assert_eq!(r.text(), "gamma");
    assert_eq!(next_offset(&r), o3);
    let r = read_from(s.addr, &path, &o3);
    assert_eq!(r.text(), "", "reading at the tail returns nothing");
    assert!(is_up_to_date(&r), "{:?}", r.headers);
}

#[test]
fn head_reports_metadata_without_body() {
    let s = Server::start(&[]);
    let path = new_stream_path();
    create(&s, &path, TEXT);
    let mut c = Conn::open(s.addr);
    let tail = append(&mut c, &path, TEXT, b"some bytes");
    let h = c.request("HEAD", &path, &[], b"");
    assert_eq!(h.status, 200, "{:?}", h.headers);
    assert_eq!(next_offset(&h), tail);
    let ct = h.header("content-type").expect("Content-Type on HEAD");
    assert!(ct.starts_with(TEXT), "Content-Type {ct:?}");
    assert!(h.body.is_empty());
    // RFC 9110 §8.6: no Content-Length unless it is the GET's (10 here).
    let length = h.header("content-length");
    assert!(
        length.is_none_or(|l| l == "10"),
        "Content-Length {length:?}"
    );
    // No body bytes may follow a HEAD response: the next response on the same
    // connection must parse cleanly.
    let r = c.request("GET", &format!("{path}?offset=-1"), &[], b"");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), "some bytes");
    let missing = c.request("HEAD", &new_stream_path(), &[], b"");
    assert_eq!(missing.status, 404);
}

#[test]
fn delete_then_404() {
    let s = Server::start(&[]);
    let path = new_stream_path();
    create(&s, &path, TEXT);
    let mut c = Conn::open(s.addr);
    append(&mut c, &path, TEXT, b"x");
    let d = c.request("DELETE", &path, &[], b"");
    assert!(
        matches!(d.status, 200 | 204),
        "DELETE: {} {:?}",
        d.status,
        d.headers
    );
    assert_eq!(
        c.request("GET", &format!("{path}?offset=-1"), &[], b"")
            .status,
        404
    );
    assert_eq!(c.request("HEAD", &path, &[], b"").status, 404);
    let r = c.request("POST", &path, &[("Content-Type", TEXT)], b"y");
    assert_eq!(r.status, 404, "append to a deleted stream");
    assert_eq!(c.request("DELETE", &path, &[], b"").status, 404);
}

// ---- HTTP/1.1 connection handling ------------------------------------------------

#[test]
fn keep_alive_three_requests_on_one_connection() {
    let s = Server::start(&[]);
    let path = new_stream_path();
    let mut c = Conn::open(s.addr);
    let r1 = c.request("PUT", &path, &[("Content-Type", TEXT)], b"");
    assert_eq!(r1.status, 201);
    let r2 = c.request("POST", &path, &[("Content-Type", TEXT)], b"hello");
    assert_eq!(r2.status, 204);
    let r3 = c.request("GET", &format!("{path}?offset=-1"), &[], b"");
    assert_eq!(r3.status, 200);
    assert_eq!(r3.text(), "hello");
    for r in [&r1, &r2, &r3] {
        assert!(
            !r.header("connection")
                .is_some_and(|v| v.eq_ignore_ascii_case("close")),
            "server closed a keep-alive connection: {:?}",
            r.headers
        );
    }
}

#[test]
fn pipelined_requests_answered_in_order() {
    let s = Server::start(&[]);
    let (a, b) = (new_stream_path(), new_stream_path());
    create(&s, &a, TEXT);
    create(&s, &b, TEXT);
    let mut c = Conn::open(s.addr);
    append(&mut c, &a, TEXT, b"first stream");
    append(&mut c, &b, TEXT, b"second");
    // Three requests in one write (idempotent ones, as clients may pipeline).
    let mut all = c.build_request("GET", &format!("{a}?offset=-1"), &[], b"");
    all.extend(c.build_request("HEAD", &b, &[], b""));
    all.extend(c.build_request("GET", &format!("{b}?offset=-1"), &[], b""));
    c.send_raw(&all);
    let r1 = c.read_response_for("GET");
    assert_eq!(r1.status, 200, "first pipelined response: {:?}", r1.headers);
    assert_eq!(r1.text(), "first stream");
    let r2 = c.read_response_for("HEAD");
    assert_eq!(
        r2.status, 200,
        "second pipelined response: {:?}",
        r2.headers
    );
    let r3 = c.read_response_for("GET");
    assert_eq!(r3.status, 200, "third pipelined response: {:?}", r3.headers);
    assert_eq!(r3.text(), "second");
    assert_eq!(next_offset(&r2), next_offset(&r3));
    // The connection stays usable afterwards.
    let r4 = c.request("POST", &a, &[("Content-Type", TEXT)], b"!");
    assert_eq!(r4.status, 204);
}

#[test]
fn expect_100_continue() {
    let s = Server::start(&[]);
    let path = new_stream_path();
    create(&s, &path, OCTET);
    let body: Vec<u8> = (0..2048u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut c = Conn::open(s.addr);
    let head = c.build_request(
        "POST",
        &path,
        &[
            ("Content-Type", OCTET),
            ("Content-Length", "2048"),
            ("Expect", "100-continue"),
        ],
        b"",
    );
    c.send_raw(&head);
    let interim = c.read_head();
    assert_eq!(
        interim.status, 100,
        "expected 100 Continue before the body: {:?}",
        interim.headers
    );
    c.send_raw(&body);
    let r = c.read_response_for("POST");
    assert_eq!(r.status, 204, "{:?} {}", r.headers, r.text());
    assert_eq!(read_from(s.addr, &path, "-1").body, body);
}

#[test]
fn chunked_request_body_append() {
    let s = Server::start(&[]);
    let path = new_stream_path();
    create(&s, &path, TEXT);
    let mut c = Conn::open(s.addr);
    let head = c.build_request(
        "POST",
        &path,
        &[("Content-Type", TEXT), ("Transfer-Encoding", "chunked")],
        b"",
    );
    c.send_raw(&head);
    let parts: [&[u8]; 4] = [b"Hello, ", b"chunked ", b"wor", b"ld! 0123456789abcdef"];
    for p in parts {
        c.send_raw(format!("{:x}\r\n", p.len()).as_bytes());
        c.send_raw(p);
        c.send_raw(b"\r\n");
        thread::sleep(Duration::from_millis(5));
    }
    // One chunk with an extension, then the last chunk and empty trailers.
    c.send_raw(b"1;ext=1\r\n.\r\n0\r\n\r\n");
    let r = c.read_response_for("POST");
    assert_eq!(r.status, 204, "{:?} {}", r.headers, r.text());
    assert_eq!(
        read_from(s.addr, &path, "-1").text(),
        "Hello, chunked world! 0123456789abcdef."
    );
    // The connection is still usable after a chunked request.
    let r = c.request("HEAD", &path, &[], b"");
    assert_eq!(r.status, 200);
}

// ---- malformed input ----------------------------------------------------------------

#[test]
fn garbage_request_line() {
    let s = Server::start(&[]);
    let mut c = Conn::open(s.addr);
    c.send_raw(b"\x16\x03\x01 this is not http at all\r\n\r\n");
    assert_4xx_or_closed(&mut c, "garbage request line");
    let mut c = Conn::open(s.addr);
    c.send_raw(b"GET\r\n\r\n");
    assert_4xx_or_closed(&mut c, "request line without target");
    assert_alive(&s);
}

#[test]
fn truncated_head_then_close() {
    let s = Server::start(&[]);
    let path = new_stream_path();
    create(&s, &path, TEXT);
    let mut c = Conn::open(s.addr);
    c.send_raw(format!("POST {path} HTTP/1.1\r\nHost: x\r\nContent-Le").as_bytes());
    c.shutdown_write();
    assert_4xx_or_closed(&mut c, "truncated head");
    drop(c);
    assert_alive(&s);
    assert_eq!(
        read_from(s.addr, &path, "-1").text(),
        "",
        "nothing appended"
    );
}

#[test]
fn header_block_over_64k_is_431() {
    let s = Server::start(&[]);
    let path = new_stream_path();
    let mut c = Conn::open(s.addr);
    let mut head = format!("GET {path}?offset=-1 HTTP/1.1\r\nHost: x\r\n");
    let filler = "a".repeat(4000);
    for i in 0..20 {
        head.push_str(&format!("X-Filler-{i}: {filler}\r\n"));
    }
    head.push_str("\r\n");
    assert!(head.len() > 64 * 1024);
    // The server may answer before reading everything; a write error is fine.
    let _ = c.try_send_raw(head.as_bytes());
    assert_status(&mut c, 431, "80 KB header block");
    assert_alive(&s);
}

#[test]
fn two_hundred_headers_is_431() {
    let s = Server::start(&[]);
    let path = new_stream_path();
    let mut c = Conn::open(s.addr);
    let mut head = format!("GET {path}?offset=-1 HTTP/1.1\r\nHost: x\r\n");
    for i in 0..200 {
        head.push_str(&format!("X-H-{i}: v\r\n"));
    }
    head.push_str("\r\n");
    let _ = c.try_send_raw(head.as_bytes());
    assert_status(&mut c, 431, "200 header fields");
    assert_alive(&s);
}

#[test]
fn content_length_over_body_limit_is_413() {
    let s = Server::start(&["--max-body-bytes", "1048576"]);
    let path = new_stream_path();
    create(&s, &path, OCTET);
    let mut c = Conn::open(s.addr);
    // Only the head: the server must refuse from Content-Length alone,
    // without waiting for 2 MB of body.
    let head = c.build_request(
        "POST",
        &path,
        &[("Content-Type", OCTET), ("Content-Length", "2000000")],
        b"",
    );
    c.send_raw(&head);
    assert_status(
        &mut c,
        413,
        "Content-Length 2000000 with --max-body-bytes 1048576",
    );
    assert_alive(&s);
    assert_eq!(read_from(s.addr, &path, "-1").body, b"", "nothing appended");
    // A body at the limit is still accepted.
    let mut c = Conn::open(s.addr);
    append(&mut c, &path, OCTET, &vec![7u8; 1 << 20]);
}

#[test]
fn bad_chunk_size_is_400() {
    let s = Server::start(&[]);
    let path = new_stream_path();
    create(&s, &path, TEXT);
    let mut c = Conn::open(s.addr);
    let mut bytes = c.build_request(
        "POST",
        &path,
        &[("Content-Type", TEXT), ("Transfer-Encoding", "chunked")],
        b"",
    );
    bytes.extend_from_slice(b"zz\r\nhello\r\n0\r\n\r\n");
    c.send_raw(&bytes);
    assert_status(&mut c, 400, "chunk size `zz`");
    assert_alive(&s);
    assert_eq!(
        read_from(s.addr, &path, "-1").text(),
        "",
        "nothing appended"
    );
}

#[test]
fn non_utf8_percent_encoded_path_is_400() {
    let s = Server::start(&[]);
    let r = req(
        s.addr,
        "PUT",
        "/v1/stream/%FF%FE",
        &[("Content-Type", TEXT)],
        b"",
    );
    assert_eq!(r.status, 400, "{:?} {}", r.headers, r.text());
    let r = req(s.addr, "GET", "/v1/stream/%FF%FE?offset=-1", &[], b"");
    assert_eq!(r.status, 400, "{:?} {}", r.headers, r.text());
    assert_alive(&s);
}

#[test]
fn bad_offset_is_400() {
    let s = Server::start(&[]);
    let path = new_stream_path();
    create(&s, &path, TEXT);
    let r = req(s.addr, "GET", &format!("{path}?offset=abc!!"), &[], b"");
    assert_eq!(r.status, 400, "{:?} {}", r.headers, r.text());
    assert_alive(&s);
}

#[test]
fn half_body_then_disconnect() {
    let s = Server::start(&[]);
    let path = new_stream_path();
    create(&s, &path, TEXT);
    let mut c = Conn::open(s.addr);
    let before = append(&mut c, &path, TEXT, b"kept");
    let mut partial = c.build_request(
        "POST",
        &path,
        &[("Content-Type", TEXT), ("Content-Length", "1000")],
        b"",
    );
    partial.extend_from_slice(&[b'p'; 500]);
    c.send_raw(&partial);
    thread::sleep(Duration::from_millis(50));
    drop(c);
    // Give the server a moment to notice the disconnect.
    thread::sleep(Duration::from_millis(100));
    assert_alive(&s);
    let r = read_from(s.addr, &path, "-1");
    assert_eq!(
        r.text(),
        "kept",
        "a half-received body must not be appended"
    );
    assert_eq!(next_offset(&r), before);
}

// ---- append / close race ----------------------------------------------------------

#[derive(Debug)]
struct Attempt {
    payload: Vec<u8>,
    started: Instant,
    status: u16,
    offset: Option<String>,
}

#[test]
fn close_races_with_concurrent_appends() {
    const WRITERS: usize = 8;
    const MAX_PER_WRITER: usize = 400;
    let s = Server::start(&[]);
    let addr = s.addr;
    let path = new_stream_path();
    create(&s, &path, OCTET);

    let close_acked: Arc<Mutex<Option<Instant>>> = Arc::new(Mutex::new(None));
    let start = Arc::new(Barrier::new(WRITERS + 1));
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (path, close_acked, start) = (path.clone(), close_acked.clone(), start.clone());
        writers.push(thread::spawn(move || {
            let mut c = Conn::open(addr);
            let mut attempts = Vec::new();
            let mut refused_after_close = 0;
            start.wait();
            let deadline = Instant::now() + Duration::from_secs(8);
            for n in 0..MAX_PER_WRITER {
                if Instant::now() > deadline || refused_after_close >= 3 {
                    break;
                }
                let payload = format!("<w{w}:{n:04}>").into_bytes();
                let started = Instant::now();
                let r = match c.try_request("POST", &path, &[("Content-Type", OCTET)], &payload) {
                    Ok(r) => r,
                    Err(e) => panic!("writer {w} append {n}: {e}"),
                };
                let closes = r
                    .header("connection")
                    .is_some_and(|v| v.eq_ignore_ascii_case("close"));
                let acked = *close_acked.lock().unwrap();
                if acked.is_some_and(|t| started > t) {
                    refused_after_close += 1;
                }
                attempts.push(Attempt {
                    payload,
                    started,
                    status: r.status,
                    offset: r.header("stream-next-offset").map(str::to_string),
                });
                if closes {
                    c = Conn::open(addr);
                }
            }
            attempts
        }));
    }

    start.wait();
    thread::sleep(Duration::from_millis(30));
    let close = req(
        addr,
        "POST",
        &path,
        &[("Content-Type", OCTET), ("Stream-Closed", "true")],
        b"",
    );
    let acked_at = Instant::now();
    *close_acked.lock().unwrap() = Some(acked_at);
    assert!(
        (200..300).contains(&close.status),
        "close: {} {:?}",
        close.status,
        close.headers
    );

    let attempts: Vec<Attempt> = writers
        .into_iter()
        .flat_map(|h| h.join().expect("writer thread panicked"))
        .collect();

    let mut acked: Vec<(String, Vec<u8>)> = Vec::new();
    let mut after_close = 0;
    for a in &attempts {
        match a.status {
            204 => {
                assert!(
                    a.started <= acked_at,
                    "append {:?} started after the close was acknowledged but got 204",
                    String::from_utf8_lossy(&a.payload)
                );
                let off = a.offset.clone().expect("204 without Stream-Next-Offset");
                acked.push((off, a.payload.clone()));
            }
            409 => {}
            other => panic!(
                "append {:?} got {other} (only 204 or 409 allowed)",
                String::from_utf8_lossy(&a.payload)
            ),
        }
        if a.started > acked_at {
            after_close += 1;
            assert_eq!(a.status, 409, "append after close must be 409");
        }
    }
    assert!(
        after_close > 0,
        "no append started after the close; race not exercised"
    );

    let h = req(addr, "HEAD", &path, &[], b"");
    assert_eq!(h.status, 200);
    assert_eq!(
        h.header("stream-closed")
            .map(str::to_ascii_lowercase)
            .as_deref(),
        Some("true"),
        "HEAD after close: {:?}",
        h.headers
    );

    // Offsets are unique and their order is the order of the bytes.
    acked.sort_by(|a, b| a.0.cmp(&b.0));
    let mut seen = HashMap::new();
    for (off, p) in &acked {
        if let Some(prev) = seen.insert(off.clone(), p.clone()) {
            panic!(
                "two appends got offset {off}: {:?} and {:?}",
                String::from_utf8_lossy(&prev),
                String::from_utf8_lossy(p)
            );
        }
    }
    let expected: Vec<u8> = acked.iter().flat_map(|(_, p)| p.clone()).collect();
    let mut body = Vec::new();
    let mut offset = "-1".to_string();
    for _ in 0..1000 {
        let r = read_from(addr, &path, &offset);
        body.extend_from_slice(&r.body);
        if r.body.is_empty() || is_up_to_date(&r) {
            break;
        }
        offset = next_offset(&r);
    }
    assert_eq!(
        String::from_utf8_lossy(&body),
        String::from_utf8_lossy(&expected),
        "stream content must be exactly the acknowledged appends in offset order ({} acked)",
        acked.len()
    );
}

#[test]
fn every_response_has_a_date() {
    // RFC 9110 §6.6.1: an origin server with a clock MUST send Date in
    // 2xx, 3xx and 4xx responses.
    let s = Server::start(&[]);
    let path = new_stream_path();
    let created = req(s.addr, "PUT", &path, &[("Content-Type", TEXT)], b"x");
    let read = read_from(s.addr, &path, "-1");
    let missing = req(s.addr, "GET", &new_stream_path(), &[], b"");
    for r in [&created, &read, &missing] {
        let date = r
            .header("date")
            .unwrap_or_else(|| panic!("{}: no Date", r.status));
        // IMF-fixdate: "Sun, 06 Nov 1994 08:49:37 GMT".
        let fields: Vec<&str> = date.split(' ').collect();
        assert_eq!(fields.len(), 6, "{date}");
        assert!(fields[0].ends_with(',') && fields[5] == "GMT", "{date}");
        assert_eq!(fields[4].len(), 8, "{date}");
    }
}

#[test]
fn racing_create_delete_and_append_on_one_stream_keep_the_shard_alive() {
    // A delete and a re-create within one millisecond gave both
    // incarnations the same id, and the old one's pending append then
    // landed on the new one: a shard panicked in the commit path.
    let s = Server::start(&["--cores", "2"]);
    let path = new_stream_path();
    type Request = (
        &'static str,
        &'static [(&'static str, &'static str)],
        &'static [u8],
    );
    let requests: [Request; 3] = [
        ("PUT", &[("Content-Type", TEXT)], b""),
        ("DELETE", &[], b""),
        ("POST", &[("Content-Type", TEXT)], b"x"),
    ];
    let workers: Vec<_> = requests
        .into_iter()
        .flat_map(|r| [r, r])
        .map(|(method, headers, body)| {
            let (addr, path) = (s.addr, path.clone());
            thread::spawn(move || {
                let mut c = Conn::open(addr);
                for _ in 0..400 {
                    let r = c.request(method, &path, headers, body);
                    assert!(r.status < 500, "{method}: {} {}", r.status, r.text());
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("every request answered");
    }
    assert!(!s.stderr().contains("panicked"), "{}", s.stderr());
    assert_alive(&s);
}

#[test]
fn a_head_trickled_a_byte_at_a_time_gets_408_within_the_idle_timeout() {
    // Slowloris: each byte comes well within the idle timeout, but the
    // whole head must arrive within it, or a few clients hold every slot.
    let s = Server::start(&["--idle-timeout-ms", "1000"]);
    let mut c = Conn::open(s.addr);
    c.stream
        .set_read_timeout(Some(Duration::from_millis(50)))
        .unwrap();
    let head =
        b"GET /v1/health/live HTTP/1.1\r\nX-Pad: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    let mut answer = Vec::new();
    for byte in head {
        // The server may have answered and closed: then the write fails,
        // and what it sent is still there to read.
        let sent = c.try_send_raw(&[*byte]).is_ok();
        thread::sleep(Duration::from_millis(150));
        let mut chunk = [0u8; 512];
        if let Ok(n) = std::io::Read::read(&mut c.stream, &mut chunk) {
            answer.extend_from_slice(&chunk[..n]);
            if n == 0 || answer.ends_with(b"}}") {
                break;
            }
        }
        if !sent {
            break;
        }
    }
    let text = String::from_utf8_lossy(&answer);
    assert!(
        text.starts_with("HTTP/1.1 408"),
        "answered {text:?} to a trickled head"
    );
    assert_alive(&s);
}
