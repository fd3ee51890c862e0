//! Black-box tests of whole catch-up reads (PROTOCOL.md §5.5,
//! `protocol::whole`): an unbounded catch-up larger than one read window
//! answers everything up to the tail in one response, up to date, on both
//! surfaces; bounded reads (`max_bytes`) still page; ETags still validate.

mod common;

use std::io::{Read, Write};

use common::{Server, req};

const WINDOW: usize = 4 << 20;
const OCTETS: (&str, &str) = ("Content-Type", "application/octet-stream");

/// Appends `n` pieces of `piece_len` bytes, each piece its own byte value.
fn fill(s: &Server, path: &str, n: u8, piece_len: usize) -> Vec<u8> {
    let mut all = Vec::new();
    for i in 0..n {
        let piece = vec![b'a' + i; piece_len];
        let r = req(s.addr, "POST", path, &[OCTETS], &piece);
        assert_eq!(r.status, 204, "append {i}: {}", r.text());
        all.extend(piece);
    }
    all
}

fn tail_of(s: &Server, path: &str) -> String {
    let head = req(s.addr, "HEAD", path, &[], b"");
    head.header("stream-next-offset").unwrap().to_string()
}

#[test]
fn an_unbounded_catch_up_answers_everything_up_to_the_tail() {
    let s = Server::start(&["--cores", "2"]);
    assert_eq!(req(s.addr, "PUT", "/whole", &[], b"").status, 201);
    for path in ["/v1/stream/whole-bytes", "/whole/bytes"] {
        assert_eq!(req(s.addr, "PUT", path, &[OCTETS], b"").status, 201);
        // 10 MiB: two full windows and a part.
        let all = fill(&s, path, 5, 2 << 20);
        let r = req(s.addr, "GET", &format!("{path}?offset=-1"), &[], b"");
        assert_eq!(r.status, 200, "{path}");
        assert_eq!(r.body.len(), all.len(), "{path}: every byte, one response");
        let length = all.len().to_string();
        assert_eq!(r.header("content-length"), Some(&*length), "{path}: sized");
        assert!(r.body == all, "{path}: the bytes in order");
        assert_eq!(r.header("stream-up-to-date"), Some("true"), "{path}");
        let tail = tail_of(&s, path);
        assert_eq!(r.header("stream-next-offset"), Some(&*tail), "{path}");
        assert!(r.header("etag").is_some() && r.header("cache-control").is_some());

        // From an offset a reader was given: the rest, whole.
        let first = req(
            s.addr,
            "GET",
            &format!("{path}?offset=-1&max_bytes=1"),
            &[],
            b"",
        );
        let from = first.header("stream-next-offset").unwrap().to_string();
        if path.starts_with("/whole") {
            let r = req(s.addr, "GET", &format!("{path}?offset={from}"), &[], b"");
            assert_eq!(r.status, 200);
            assert!(r.body == all[1..], "{path}: the rest from offset 1");
            assert_eq!(r.header("stream-up-to-date"), Some("true"));
        }
    }
}

#[test]
fn bounded_reads_still_page_and_whole_ones_validate() {
    let s = Server::start(&["--cores", "1"]);
    assert_eq!(req(s.addr, "PUT", "/paged", &[], b"").status, 201);
    let path = "/paged/s";
    assert_eq!(req(s.addr, "PUT", path, &[OCTETS], b"").status, 201);
    let all = fill(&s, path, 3, 2 << 20);
    // max_bytes asks for a page: at most that many bytes, not up to date.
    let page = req(
        s.addr,
        "GET",
        &format!("{path}?offset=-1&max_bytes=1000"),
        &[],
        b"",
    );
    assert_eq!(page.status, 200);
    assert_eq!(page.body, all[..1000]);
    assert_eq!(page.header("stream-up-to-date"), None);
    // The whole answer's ETag gets a 304 when repeated.
    let whole = req(s.addr, "GET", &format!("{path}?offset=-1"), &[], b"");
    assert_eq!(whole.body.len(), all.len());
    let tag = whole.header("etag").unwrap().to_string();
    let again = req(
        s.addr,
        "GET",
        &format!("{path}?offset=-1"),
        &[("If-None-Match", &tag)],
        b"",
    );
    assert_eq!(again.status, 304, "{:?}", again.headers);
    assert!(again.body.is_empty());
    // RFC 9110 §5.3: the list on two lines is one list.
    let two_lines = [("If-None-Match", "\"other\""), ("If-None-Match", &tag)];
    let again = req(s.addr, "GET", &format!("{path}?offset=-1"), &two_lines, b"");
    assert_eq!(again.status, 304, "{:?}", again.headers);
}

#[test]
fn a_whole_v1_json_read_is_one_array_of_every_message() {
    let s = Server::start(&["--cores", "1"]);
    let path = "/v1/stream/whole-json";
    let json = ("Content-Type", "application/json");
    assert_eq!(req(s.addr, "PUT", path, &[json], b"").status, 201);
    // Six messages of 900 KiB each, the last two posted as one array.
    let big = "v".repeat(900 << 10);
    let message = |n: u64| format!(r#"{{"n":{n},"v":"{big}"}}"#);
    let bodies = [0, 1, 2, 3].map(message);
    let pair = format!("[{},{}]", message(4), message(5));
    for body in bodies.iter().chain([&pair]) {
        let r = req(s.addr, "POST", path, &[json], body.as_bytes());
        assert_eq!(r.status, 204, "{}", r.text());
    }
    let r = req(s.addr, "GET", &format!("{path}?offset=-1"), &[], b"");
    assert_eq!(r.status, 200);
    assert!(r.body.len() > WINDOW, "more than one window");
    let messages: Vec<serde_json::Value> = serde_json::from_slice(&r.body).expect("one array");
    let ns: Vec<u64> = messages.iter().map(|m| m["n"].as_u64().unwrap()).collect();
    assert_eq!(ns, [0, 1, 2, 3, 4, 5]);
    assert!(messages.iter().all(|m| m["v"] == big.as_str()));
    assert_eq!(r.header("stream-up-to-date"), Some("true"));
    assert_eq!(r.header("stream-next-offset"), Some(&*tail_of(&s, path)));
    let length = r.body.len().to_string();
    assert_eq!(r.header("content-length"), Some(&*length), "sized ahead");
}

#[test]
fn an_http10_client_gets_the_whole_body_until_close() {
    let s = Server::start(&["--cores", "1"]);
    let path = "/v1/stream/whole-http10";
    assert_eq!(req(s.addr, "PUT", path, &[OCTETS], b"").status, 201);
    let all = fill(&s, path, 3, 2 << 20);
    let mut c = std::net::TcpStream::connect(s.addr).unwrap();
    write!(c, "GET {path}?offset=-1 HTTP/1.0\r\nHost: x\r\n\r\n").unwrap();
    let mut raw = Vec::new();
    c.read_to_end(&mut raw).unwrap();
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let head = String::from_utf8_lossy(&raw[..split]).to_lowercase();
    assert!(
        head.starts_with("http/1.1 200") || head.starts_with("http/1.0 200"),
        "{head}"
    );
    assert!(
        !head.contains("chunked"),
        "no chunked framing for HTTP/1.0: {head}"
    );
    assert!(
        head.contains(&format!("content-length: {}", all.len())),
        "{head}"
    );
    assert!(
        raw[split..] == all,
        "every byte until the connection closes"
    );
}

#[test]
fn a_whole_answer_of_a_closed_stream_says_so_and_keeps_the_connection() {
    let s = Server::start(&["--cores", "1"]);
    let path = "/v1/stream/whole-closed";
    assert_eq!(req(s.addr, "PUT", path, &[OCTETS], b"").status, 201);
    let mut all = fill(&s, path, 2, 2 << 20);
    let close = [OCTETS, ("Stream-Closed", "true")];
    assert_eq!(req(s.addr, "POST", path, &close, b"end").status, 204);
    all.extend_from_slice(b"end");
    let mut c = common::Conn::open(s.addr);
    for round in 0..2 {
        let r = c.request("GET", &format!("{path}?offset=-1"), &[], b"");
        assert_eq!(r.status, 200, "round {round}");
        assert!(r.body == all, "round {round}: the whole closed stream");
        assert_eq!(r.header("stream-closed"), Some("true"), "round {round}");
        assert_eq!(r.header("stream-up-to-date"), Some("true"), "round {round}");
    }
    let head = c.request("HEAD", path, &[], b"");
    assert_eq!(
        head.status, 200,
        "the connection serves on after whole answers"
    );
}

#[test]
fn retention_during_a_whole_catch_up_leaves_it_whole() {
    // A response announces its length, then retention passes bytes it has
    // not sent yet (extensions §2.2, §3.4): it must still end as announced
    // (it was cut short at the next window), while new reads before the
    // retained offset are 410.
    let s = Server::start(&["--cores", "1", "--cache-bytes", "1048576"]);
    assert_eq!(req(s.addr, "PUT", "/whole", &[], b"").status, 201);
    let path = "/whole/retained";
    assert_eq!(req(s.addr, "PUT", path, &[OCTETS], b"").status, 201);
    // 24 MiB: more than loopback buffers hold for a client not reading.
    let all = fill(&s, path, 12, 2 << 20);
    let tail = tail_of(&s, path);
    let mut reader = std::net::TcpStream::connect(s.addr).unwrap();
    let get = format!("GET {path}?offset=-1 HTTP/1.1\r\nHost: x\r\n\r\n");
    reader.write_all(get.as_bytes()).unwrap();
    let mut got = vec![0u8; 64 << 10];
    let n = reader.read(&mut got).unwrap();
    got.truncate(n);
    assert!(
        got.starts_with(b"HTTP/1.1 200"),
        "{:?}",
        String::from_utf8_lossy(&got)
    );

    let snapshot = req(s.addr, "PUT", &format!("{path}/snapshot/{tail}"), &[], b"s");
    assert_eq!(snapshot.status, 204, "{}", snapshot.text());
    let retain = req(s.addr, "PUT", &format!("{path}/retention/{tail}"), &[], b"");
    assert_eq!(retain.status, 204, "{}", retain.text());
    let again = req(s.addr, "GET", &format!("{path}?offset=-1"), &[], b"");
    assert_eq!(again.status, 410, "new reads before the retained offset");

    reader
        .set_read_timeout(Some(std::time::Duration::from_secs(20)))
        .unwrap();
    let head_end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let mut body = got.split_off(head_end);
    while body.len() < all.len() {
        let mut buf = vec![0u8; 1 << 20];
        match reader.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => body.extend_from_slice(&buf[..n]),
        }
    }
    assert_eq!(body.len(), all.len(), "the announced length, whole");
    assert!(body == all, "the bytes in order");
}

#[test]
fn a_whole_catch_up_from_the_cache_keeps_small_and_large_appends_in_order() {
    // Cached chunks of 64 KiB or more go out as they are, shorter ones
    // gathered into larger writes: both, interleaved, read back exactly.
    let s = Server::start(&["--cores", "1"]);
    let path = "/v1/stream/whole-mixed";
    assert_eq!(req(s.addr, "PUT", path, &[OCTETS], b"").status, 201);
    let mut all = Vec::new();
    for i in 0..90u32 {
        let len = [65_535, 100_000, 1, 70_000][i as usize % 4];
        let piece: Vec<u8> = (0..len).map(|j| (i as usize * 7 + j) as u8).collect();
        let r = req(s.addr, "POST", path, &[OCTETS], &piece);
        assert_eq!(r.status, 204, "{}", r.text());
        all.extend(piece);
    }
    assert!(all.len() > WINDOW, "answered whole");
    let r = req(s.addr, "GET", &format!("{path}?offset=-1"), &[], b"");
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), all.len());
    assert!(r.body == all, "every byte in order");
}
