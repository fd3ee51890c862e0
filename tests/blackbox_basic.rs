//! Black-box tests of the real `rill` binary over raw HTTP/1.1: the basic
//! stream operations, HTTP/1.1 connection handling and malformed input.
//! Races between requests on one stream: `blackbox_races.rs`.

mod blackbox_helpers;
mod common;

use blackbox_helpers::*;

use common::{Conn, Server, req};
use std::thread;
use std::time::Duration;

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
fn an_http10_keep_alive_request_is_told_the_connection_stays_open() {
    // RFC 9112 §9.3 and Appendix C.2.2: an HTTP/1.0 client closes unless
    // the answer says `Connection: keep-alive`.
    let s = Server::start(&[]);
    let path = new_stream_path();
    create(&s, &path, TEXT);
    let mut c = Conn::open(s.addr);
    for _ in 0..2 {
        let head = format!("HEAD {path} HTTP/1.0\r\nHost: x\r\nConnection: keep-alive\r\n\r\n");
        c.send_raw(head.as_bytes());
        let r = c.read_response_for("HEAD");
        assert_eq!(r.status, 200, "{:?}", r.headers);
        assert_eq!(
            r.header("connection"),
            Some("keep-alive"),
            "{:?}",
            r.headers
        );
    }
    c.send_raw(format!("HEAD {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes());
    let r = c.read_response_for("HEAD");
    assert_eq!(r.header("connection"), Some("close"), "{:?}", r.headers);
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
fn a_target_longer_than_the_head_limit_is_414() {
    // RFC 9112 §3: "A server that receives a request-target longer than any
    // URI it wishes to parse MUST respond with a 414 (URI Too Long)".
    let s = Server::start(&[]);
    let mut c = Conn::open(s.addr);
    let target = format!("/v1/stream/x?pad={}", "a".repeat(40 * 1024));
    let _ = c.try_send_raw(format!("GET {target} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
    assert_status(&mut c, 414, "a 40 KB target");
    assert_alive(&s);
}

#[test]
fn an_absolute_form_target_names_the_host_of_the_location() {
    // RFC 9112 §3.2.2: the target's authority, not the Host field.
    let s = Server::start(&[]);
    let path = new_stream_path();
    let mut c = Conn::open(s.addr);
    c.send_raw(
        format!(
            "PUT http://streams.example:8080{path} HTTP/1.1\r\nHost: other\r\n\
             Content-Type: text/plain\r\nContent-Length: 0\r\n\r\n"
        )
        .as_bytes(),
    );
    let r = c.read_response();
    assert_eq!(r.status, 201, "{}", r.text());
    let expected = format!("http://streams.example:8080{path}");
    assert_eq!(r.header("location"), Some(expected.as_str()));
    // An https target (a TLS proxy forwarding it) keeps its scheme.
    let path = new_stream_path();
    c.send_raw(
        format!(
            "PUT https://streams.example{path} HTTP/1.1\r\nHost: other\r\n\
             Content-Type: text/plain\r\nContent-Length: 0\r\n\r\n"
        )
        .as_bytes(),
    );
    let r = c.read_response();
    assert_eq!(r.status, 201, "{}", r.text());
    let expected = format!("https://streams.example{path}");
    assert_eq!(r.header("location"), Some(expected.as_str()));
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
    // RFC 9110 §9.3.2: the same refusal of a HEAD has no content.
    let mut c = Conn::open(s.addr);
    let _ = c.try_send_raw(head.replacen("GET", "HEAD", 1).as_bytes());
    assert_eq!(c.read_response_for("HEAD").status, 431);
    assert!(
        c.is_closed_within(Duration::from_secs(5)),
        "no body follows"
    );
    assert_alive(&s);
}

/// RFC 9112 §3.2: 400 for an HTTP/1.1 request without Host, and for any
/// request with two Host fields; nothing is appended.
#[test]
fn missing_or_repeated_host_is_400() {
    let s = Server::start(&[]);
    let path = new_stream_path();
    create(&s, &path, TEXT);
    let post = |host_lines: &str| {
        format!(
            "POST {path} HTTP/1.1\r\n{host_lines}Content-Type: {TEXT}\r\nContent-Length: 1\r\n\r\nx"
        )
    };
    for (host_lines, what) in [("", "no Host"), ("Host: a\r\nHost: b\r\n", "two Hosts")] {
        let mut c = Conn::open(s.addr);
        c.send_raw(post(host_lines).as_bytes());
        let r = c.read_response();
        assert_eq!(r.status, 400, "{what}");
        assert!(
            r.text().contains("Host"),
            "{what}: a JSON error naming Host"
        );
    }
    let mut c = Conn::open(s.addr);
    c.send_raw(post("Host: a\r\n").as_bytes());
    assert_eq!(c.read_response().status, 204, "one Host");
    assert_eq!(
        read_from(s.addr, &path, "-1").text(),
        "x",
        "only that one appended"
    );
}

/// RFC 9110 §15.6.2: an unrecognized method (methods are case-sensitive)
/// is 501 with a JSON error; a known one the resource does not take, 405.
#[test]
fn unknown_methods_are_501_and_known_ones_not_allowed_405() {
    let s = Server::start(&[]);
    let path = new_stream_path();
    create(&s, &path, TEXT);
    for (method, status) in [("get", 501), ("BREW", 501), ("PATCH", 405)] {
        let mut c = Conn::open(s.addr);
        let r = c.request(method, &path, &[], b"");
        assert_eq!(r.status, status, "{method}: {}", r.text());
        assert!(r.text().starts_with("{\"error\""), "{method}: a JSON error");
    }
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

/// A client that writes its whole oversized body before it reads (as
/// Python's http.client does) still reads the 413: the server drains what
/// it sends before closing (a close with unread bytes sends a reset, which
/// discarded the response on the client's side).
#[test]
fn a_413_reaches_a_client_that_sends_its_whole_body_first() {
    let s = Server::start(&["--max-body-bytes", "1048576"]);
    let path = new_stream_path();
    create(&s, &path, OCTET);
    for round in 0..3 {
        let mut c = Conn::open(s.addr);
        let body = vec![7u8; 4 << 20];
        let request = c.build_request("POST", &path, &[("Content-Type", OCTET)], &body);
        c.send_raw(&request);
        assert_status(&mut c, 413, &format!("round {round}: a 4 MiB body"));
    }
    assert_alive(&s);
}

#[test]
fn bad_chunk_size_is_400() {
    let s = Server::start(&[]);
    refused_chunked(&s, b"zz\r\nhello\r\n0\r\n\r\n", 400, "chunk size `zz`");
}

/// Trailer fields are fields: `--max-head-bytes` bounds them, with 431.
#[test]
fn trailers_past_the_head_limit_are_431() {
    let s = Server::start(&["--max-head-bytes", "2048"]);
    let trailer = format!("X-Note: {}\r\n", "n".repeat(3000));
    let body = format!("5\r\nhello\r\n0\r\n{trailer}\r\n");
    refused_chunked(&s, body.as_bytes(), 431, "a 3 KB trailer section");
}

/// A chunked POST of `body` to a new stream is refused with `status`; the
/// server lives on and nothing was appended.
fn refused_chunked(s: &Server, body: &[u8], status: u16, what: &str) {
    let path = new_stream_path();
    create(s, &path, TEXT);
    let mut c = Conn::open(s.addr);
    let chunked = [("Content-Type", TEXT), ("Transfer-Encoding", "chunked")];
    let mut bytes = c.build_request("POST", &path, &chunked, b"");
    bytes.extend_from_slice(body);
    c.send_raw(&bytes);
    assert_status(&mut c, status, what);
    assert_alive(s);
    let left = read_from(s.addr, &path, "-1");
    assert_eq!(left.text(), "", "nothing appended");
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

/// RFC 9110 §15.5.16: a body in a content coding rill does not apply (it
/// stores what it receives) is a 415 naming the one it takes, on create
/// and append, and nothing is stored; `identity` and a body-less create
/// are taken.
#[test]
fn a_content_coded_body_is_415() {
    let s = Server::start(&[]);
    let path = new_stream_path();
    let gzip = [("Content-Type", TEXT), ("Content-Encoding", "gzip")];
    let r = req(s.addr, "PUT", &path, &gzip, b"\x1f\x8b\x08\x00");
    assert_eq!(r.status, 415, "{:?}", r.headers);
    assert_eq!(r.header("accept-encoding"), Some("identity"));
    assert_eq!(req(s.addr, "PUT", &path, &gzip, b"").status, 201);
    let listed = [("Content-Type", TEXT), ("Content-Encoding", "identity, br")];
    assert_eq!(req(s.addr, "POST", &path, &listed, b"x").status, 415);
    let plain = [("Content-Type", TEXT), ("Content-Encoding", "Identity")];
    assert_eq!(req(s.addr, "POST", &path, &plain, b"kept").status, 204);
    let read = req(s.addr, "GET", &format!("{path}?offset=-1"), &[], b"");
    assert_eq!(read.body, b"kept");
}
