//! Bootstrap (extensions §3) against the real binary: snapshot part (or
//! the empty octet-stream part and offset -1), then one part per retained
//! message, byte-exact, with a boundary no payload can forge.

mod common;

use std::time::Duration;

use common::{Conn, Server, req};

const BUCKET: &str = "boot";

/// Reads a chunked response to its end.
fn get_bootstrap(s: &Server, path: &str) -> (common::Response, Vec<u8>) {
    let mut conn = Conn::open(s.addr);
    conn.send_raw(&common::build_request(
        &s.addr,
        "GET",
        &format!("{path}/bootstrap"),
        &[],
        b"",
    ));
    let head = conn.read_head();
    let body = match head.status {
        200 => conn.read_chunked_until(b"--\r\n", Duration::from_secs(10)),
        _ => Vec::new(),
    };
    (head, body)
}

/// Splits a multipart body into (content type, body) parts.
fn parse(body: &[u8], boundary: &str) -> Vec<(String, Vec<u8>)> {
    let delimiter = format!("--{boundary}").into_bytes();
    let mut parts = Vec::new();
    let mut rest = body;
    loop {
        assert!(rest.starts_with(&delimiter), "expected a delimiter");
        rest = &rest[delimiter.len()..];
        if rest.starts_with(b"--") {
            return parts;
        }
        rest = rest
            .strip_prefix(b"\r\n")
            .expect("CRLF after the delimiter");
        let headers_end = common::find(rest, b"\r\n\r\n").expect("part headers");
        let headers = String::from_utf8(rest[..headers_end].to_vec()).unwrap();
        let content_type = headers.strip_prefix("Content-Type: ").unwrap().to_string();
        rest = &rest[headers_end + 4..];
        let mut close = delimiter.clone();
        close.splice(0..0, *b"\r\n");
        let end = common::find(rest, &close).expect("a closing delimiter");
        parts.push((content_type, rest[..end].to_vec()));
        rest = &rest[end + 2..];
    }
}

fn boundary_of(head: &common::Response) -> String {
    let ct = head.header("content-type").unwrap();
    ct.strip_prefix("multipart/mixed; boundary=")
        .expect("multipart/mixed")
        .to_string()
}

#[test]
fn snapshot_then_messages_byte_exact() {
    let s = Server::start(&["--cores", "2"]);
    assert_eq!(
        req(s.addr, "PUT", &format!("/{BUCKET}"), &[], b"").status,
        201
    );
    let path = format!("/{BUCKET}/bin");
    let octet = [("Content-Type", "application/octet-stream")];
    assert_eq!(req(s.addr, "PUT", &path, &octet, b"").status, 201);
    // No snapshot yet: an empty octet-stream part and offset -1.
    let evil = b"x\r\n--rill-bootstrap-0000\r\nContent-Type: evil\r\n\r\n\x00\xff".to_vec();
    let payloads: Vec<Vec<u8>> = vec![b"one".to_vec(), evil, (0..=255u8).collect()];
    let mut offsets = Vec::new();
    for p in &payloads {
        let r = req(s.addr, "POST", &path, &octet, p);
        assert_eq!(r.status, 204);
        offsets.push(r.header("stream-next-offset").unwrap().to_string());
    }
    let (head, body) = get_bootstrap(&s, &path);
    assert_eq!(head.status, 200);
    assert_eq!(head.header("stream-snapshot-offset"), Some("-1"));
    assert_eq!(head.header("stream-next-offset"), Some(offsets[2].as_str()));
    let parts = parse(&body, &boundary_of(&head));
    assert_eq!(parts.len(), 4);
    assert_eq!(
        parts[0],
        ("application/octet-stream".to_string(), Vec::new())
    );
    for (part, payload) in parts[1..].iter().zip(&payloads) {
        assert_eq!(&part.1, payload, "byte-exact part");
        assert_eq!(part.0, "application/octet-stream");
    }
    // With a snapshot after the first message: snapshot part, then the rest.
    let snap = [("Content-Type", "application/x-state")];
    let at = &offsets[0];
    assert_eq!(
        req(
            s.addr,
            "PUT",
            &format!("{path}/snapshot/{at}"),
            &snap,
            b"STATE"
        )
        .status,
        204
    );
    let (head, body) = get_bootstrap(&s, &path);
    assert_eq!(head.header("stream-snapshot-offset"), Some(at.as_str()));
    let parts = parse(&body, &boundary_of(&head));
    assert_eq!(parts.len(), 3);
    assert_eq!(
        parts[0],
        ("application/x-state".to_string(), b"STATE".to_vec())
    );
    assert_eq!(parts[1].1, payloads[1]);
    assert_eq!(parts[2].1, payloads[2]);
}

#[test]
fn json_messages_and_request_rules() {
    let s = Server::start(&["--cores", "1"]);
    assert_eq!(
        req(s.addr, "PUT", &format!("/{BUCKET}"), &[], b"").status,
        201
    );
    let path = format!("/{BUCKET}/doc");
    let json = [("Content-Type", "application/json")];
    assert_eq!(
        req(s.addr, "PUT", &path, &json, br#"[{"a":1},{"b":2}]"#).status,
        201
    );
    let (head, body) = get_bootstrap(&s, &path);
    let parts = parse(&body, &boundary_of(&head));
    let bodies: Vec<&[u8]> = parts[1..].iter().map(|p| p.1.as_slice()).collect();
    assert_eq!(bodies, [&br#"{"a":1}"#[..], br#"{"b":2}"#]);
    assert!(parts[1..].iter().all(|p| p.0 == "application/json"));
    let live = req(
        s.addr,
        "GET",
        &format!("{path}/bootstrap?live=sse"),
        &[],
        b"",
    );
    assert_eq!(live.status, 400);
    // Extensions "Capability Advertisement": errors about a JSON stream
    // advertise the records token too.
    let post = req(s.addr, "POST", &format!("{path}/bootstrap"), &[], b"");
    assert_eq!(post.status, 405);
    for r in [&live, &post] {
        let tokens = r.header("stream-extensions").unwrap_or_default();
        assert!(tokens.contains("json-record-coordinates-v1"), "{r:?}");
    }
    assert_eq!(
        req(
            s.addr,
            "GET",
            &format!("/{BUCKET}/missing/bootstrap"),
            &[],
            b""
        )
        .status,
        404
    );
}

#[test]
fn closed_streams_say_so_and_head_answers_the_head() {
    let s = Server::start(&["--cores", "1"]);
    assert_eq!(
        req(s.addr, "PUT", &format!("/{BUCKET}"), &[], b"").status,
        201
    );
    let path = format!("/{BUCKET}/ended");
    let text = [("Content-Type", "text/plain")];
    assert_eq!(req(s.addr, "PUT", &path, &text, b"one").status, 201);
    let (open, _) = get_bootstrap(&s, &path);
    assert_eq!(open.header("stream-closed"), None, "still open");
    let closing = [("Content-Type", "text/plain"), ("Stream-Closed", "true")];
    assert_eq!(req(s.addr, "POST", &path, &closing, b"two").status, 204);
    // The bootstrap reaches the final offset of a closed stream: the base
    // protocol's Stream-Closed (PROTOCOL.md §5.6) applies.
    let (closed, body) = get_bootstrap(&s, &path);
    assert_eq!(closed.header("stream-closed"), Some("true"));
    assert_eq!(closed.header("stream-up-to-date"), Some("true"));
    let parts = parse(&body, &boundary_of(&closed));
    assert_eq!(parts.len(), 3, "the empty snapshot part and two messages");
    // HEAD: the GET's head, no parts.
    let url = format!("{path}/bootstrap");
    let head = req(s.addr, "HEAD", &url, &[], b"");
    assert_eq!(head.status, 200);
    assert!(head.body.is_empty());
    for name in [
        "stream-next-offset",
        "stream-snapshot-offset",
        "stream-closed",
    ] {
        assert_eq!(head.header(name), closed.header(name), "{name}");
    }
    assert!(
        head.header("content-type")
            .unwrap()
            .starts_with("multipart/mixed")
    );
    let post = req(s.addr, "POST", &url, &text, b"x");
    assert_eq!(post.status, 405);
    assert_eq!(post.header("allow"), Some("GET, HEAD, OPTIONS"));
}

/// An expired stream is gone (PROTOCOL.md §5.1): its bootstrap and its
/// retention are 404 from the first request after expiry, like its reads.
#[test]
fn expired_streams_have_no_bootstrap_or_retention() {
    let s = Server::start(&["--cores", "1"]);
    assert_eq!(
        req(s.addr, "PUT", &format!("/{BUCKET}"), &[], b"").status,
        201
    );
    let expired = [
        ("Content-Type", "text/plain"),
        ("Stream-Expires-At", "2020-01-01T00:00:00Z"),
    ];
    for (name, method, sub) in [
        ("boot-gone", "GET", "bootstrap"),
        ("head-gone", "HEAD", "bootstrap"),
        ("kept-gone", "PUT", "retention/"),
    ] {
        let path = format!("/{BUCKET}/{name}");
        let created = req(s.addr, "PUT", &path, &expired, b"abc");
        assert_eq!(created.status, 201);
        // Retention at the tail, which would be valid were the stream alive.
        let tail = created.header("stream-next-offset").unwrap();
        let sub = match sub {
            "retention/" => format!("retention/{tail}"),
            other => other.to_string(),
        };
        let first = req(s.addr, method, &format!("{path}/{sub}"), &[], b"");
        assert_eq!(
            first.status, 404,
            "{method} {sub}: the first request after expiry"
        );
        assert_eq!(req(s.addr, "HEAD", &path, &[], b"").status, 404);
    }
}

#[test]
fn retention_during_a_bootstrap_leaves_it_whole() {
    // Retention passing messages a bootstrap has not sent yet (extensions
    // §3.4 "MUST ensure /bootstrap is available") cut it short before its
    // closing delimiter; the response now ends as it began.
    let s = Server::start(&["--cores", "1", "--cache-bytes", "1048576"]);
    assert_eq!(
        req(s.addr, "PUT", &format!("/{BUCKET}"), &[], b"").status,
        201
    );
    let path = format!("/{BUCKET}/retained");
    let octet = [("Content-Type", "application/octet-stream")];
    assert_eq!(req(s.addr, "PUT", &path, &octet, b"").status, 201);
    let pieces: Vec<Vec<u8>> = (0..12u8).map(|i| vec![b'a' + i; 2 << 20]).collect();
    let mut tail = String::new();
    for piece in &pieces {
        let r = req(s.addr, "POST", &path, &octet, piece);
        assert_eq!(r.status, 204);
        tail = r.header("stream-next-offset").unwrap().to_string();
    }
    let mut conn = Conn::open(s.addr);
    let get = common::build_request(&s.addr, "GET", &format!("{path}/bootstrap"), &[], b"");
    conn.send_raw(&get);
    let head = conn.read_head();
    assert_eq!(head.status, 200);
    let snap = [("Content-Type", "application/x-state")];
    let published = req(
        s.addr,
        "PUT",
        &format!("{path}/snapshot/{tail}"),
        &snap,
        b"S",
    );
    assert_eq!(published.status, 204);
    let retained = req(s.addr, "PUT", &format!("{path}/retention/{tail}"), &[], b"");
    assert_eq!(retained.status, 204, "{}", retained.text());

    let body = conn.read_chunked_until(b"--\r\n", Duration::from_secs(30));
    let parts = parse(&body, &boundary_of(&head));
    assert_eq!(parts.len(), 1 + pieces.len(), "every planned message");
    for (part, piece) in parts[1..].iter().zip(&pieces) {
        assert!(part.1 == *piece, "byte-exact part");
    }
}

/// The boundary a seeded xorshift would draw after `previous` (the
/// generator before session 20: one response gave its whole state away).
fn xorshift_successor(previous: &str) -> String {
    let step = |mut x: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let hex = previous.strip_prefix("rill-bootstrap-").unwrap();
    let state = u64::from_str_radix(&hex[16..], 16).unwrap();
    let (a, b) = (step(state), step(step(state)));
    format!("rill-bootstrap-{a:016x}{b:016x}")
}

#[test]
fn a_writer_cannot_plant_the_next_boundary() {
    let s = Server::start(&["--cores", "1"]);
    assert_eq!(
        req(s.addr, "PUT", &format!("/{BUCKET}"), &[], b"").status,
        201
    );
    let path = format!("/{BUCKET}/planted");
    let octet = [("Content-Type", "application/octet-stream")];
    assert_eq!(req(s.addr, "PUT", &path, &octet, b"seed").status, 201);
    let (head, _) = get_bootstrap(&s, &path);
    let predicted = xorshift_successor(&boundary_of(&head));
    let planted = format!("\r\n--{predicted}\r\nContent-Type: evil\r\n\r\n");
    assert_eq!(
        req(s.addr, "POST", &path, &octet, planted.as_bytes()).status,
        204
    );
    let mut seen = vec![boundary_of(&head)];
    for _ in 0..3 {
        let (head, body) = get_bootstrap(&s, &path);
        assert_eq!(head.status, 200);
        let boundary = boundary_of(&head);
        assert_ne!(boundary, predicted, "the boundary was predictable");
        assert!(!seen.contains(&boundary), "a boundary repeated");
        let parts = parse(&body, &boundary);
        assert_eq!(parts.len(), 3, "snapshot part, seed, planted message");
        assert_eq!(parts[2].1, planted.as_bytes(), "the planted bytes, whole");
        seen.push(boundary);
    }
}
