//! Helpers shared by the JSON Record Coordinates tests (extensions §6):
//! `records.rs`, `records_reads.rs` and `records_live.rs`. Request
//! shorthands on both URL surfaces, record-header parsing, NDJSON and
//! multipart parsing, and a small SSE event reader.
#![allow(dead_code)]

use serde_json::Value;

use crate::common::{Response, Server, enc, find, req, unique_name};

/// The token extensions §6 registers.
pub const TOKEN: &str = "json-record-coordinates-v1";
pub const BUCKET: &str = "records";
pub const JSON: &str = "application/json";
pub const NDJSON: &str = "application/x-ndjson";
pub const ENVELOPE_NDJSON: &str = "application/vnd.durable-stream-records+ndjson";
pub const ENVELOPE_ONE: &str = "application/vnd.durable-stream-record+json";

/// A 2-shard server with [`BUCKET`] created.
pub fn start() -> Server {
    start_with(&["--cores", "2"])
}

/// A server started with `args`, with [`BUCKET`] created.
pub fn start_with(args: &[&str]) -> Server {
    let s = Server::start(args);
    let r = req(s.addr, "PUT", &format!("/{BUCKET}"), &[], b"");
    assert_eq!(r.status, 201, "create bucket: {}", r.text());
    s
}

/// A fresh stream path on the extensions' bucketed surface.
pub fn bucketed(tag: &str) -> String {
    format!("/{BUCKET}/{}", unique_name(tag))
}

/// A fresh stream path on the upstream surface.
pub fn upstream(tag: &str) -> String {
    format!("/v1/stream/{}", unique_name(tag))
}

/// One fresh path on each surface.
pub fn both(tag: &str) -> [String; 2] {
    [bucketed(tag), upstream(tag)]
}

pub fn is_bucketed(path: &str) -> bool {
    !path.starts_with("/v1/")
}

/// `PUT` a JSON stream with `body` as initial messages; must answer 201.
pub fn create(s: &Server, path: &str, body: &[u8]) -> Response {
    let r = req(s.addr, "PUT", path, &[("Content-Type", JSON)], body);
    assert_eq!(r.status, 201, "create {path}: {:?} {}", r.headers, r.text());
    r
}

/// `PUT` a stream of any content type; must answer 201.
pub fn create_typed(s: &Server, path: &str, content_type: &str, body: &[u8]) -> Response {
    let r = req(s.addr, "PUT", path, &[("Content-Type", content_type)], body);
    assert_eq!(r.status, 201, "create {path}: {:?} {}", r.headers, r.text());
    r
}

/// `POST` a JSON body with extra headers, whatever the outcome.
pub fn post_with(s: &Server, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
    let mut all = vec![("Content-Type", JSON)];
    all.extend_from_slice(headers);
    req(s.addr, "POST", path, &all, body)
}

/// `POST` a JSON body; must succeed (204, or 200 for producers).
pub fn append(s: &Server, path: &str, body: &[u8]) -> Response {
    let r = post_with(s, path, &[], body);
    assert!(
        matches!(r.status, 200 | 204),
        "append {path} {:?}: {} {:?} {}",
        String::from_utf8_lossy(body),
        r.status,
        r.headers,
        r.text()
    );
    r
}

/// `POST` and return the acknowledged record range.
pub fn append_range(s: &Server, path: &str, body: &[u8]) -> (u64, u64) {
    range(&append(s, path, body))
}

/// A decimal header value, which must be present.
pub fn num(r: &Response, name: &str) -> u64 {
    let v = r
        .header(name)
        .unwrap_or_else(|| panic!("no {name}: {} {:?} {}", r.status, r.headers, r.text()));
    v.parse()
        .unwrap_or_else(|_| panic!("{name} is not an unsigned integer: {v:?}"))
}

/// (`Stream-Record-Start`, `Stream-Record-Next`).
pub fn range(r: &Response) -> (u64, u64) {
    (num(r, "stream-record-start"), num(r, "stream-record-next"))
}

/// (`Stream-Record-First`, `Stream-Record-Start`, `Stream-Record-Next`).
pub fn read_coords(r: &Response) -> (u64, u64, u64) {
    (
        num(r, "stream-record-first"),
        num(r, "stream-record-start"),
        num(r, "stream-record-next"),
    )
}

pub fn next_offset(r: &Response) -> String {
    r.header("stream-next-offset")
        .unwrap_or_else(|| panic!("no Stream-Next-Offset: {} {:?}", r.status, r.headers))
        .to_string()
}

/// Whether `Stream-Extensions` (a comma-separated token list, possibly
/// repeated) names [`TOKEN`].
pub fn has_token(r: &Response) -> bool {
    r.headers
        .iter()
        .filter(|(k, _)| k.eq_ignore_ascii_case("stream-extensions"))
        .flat_map(|(_, v)| v.split(','))
        .any(|t| t.trim() == TOKEN)
}

pub fn assert_token(r: &Response, what: &str) {
    assert!(
        has_token(r),
        "{what}: Stream-Extensions must name {TOKEN}: {} {:?}",
        r.status,
        r.headers
    );
}

/// Names of `Stream-Record-*` headers on `r`.
pub fn record_headers(r: &Response) -> Vec<String> {
    r.headers
        .iter()
        .map(|(k, _)| k.to_ascii_lowercase())
        .filter(|k| k.starts_with("stream-record-"))
        .collect()
}

pub fn is_true(r: &Response, name: &str) -> bool {
    r.header(name)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

pub fn head(s: &Server, path: &str) -> Response {
    let r = req(s.addr, "HEAD", path, &[], b"");
    assert_eq!(r.status, 200, "HEAD {path}: {:?}", r.headers);
    r
}

/// (F, N) from HEAD.
pub fn first_next(s: &Server, path: &str) -> (u64, u64) {
    let r = head(s, path);
    (
        num(&r, "stream-record-first"),
        num(&r, "stream-record-next"),
    )
}

/// `GET {path}?{query}`.
pub fn get(s: &Server, path: &str, query: &str) -> Response {
    req(s.addr, "GET", &format!("{path}?{query}"), &[], b"")
}

/// `GET {path}?offset=<offset>` with the offset URL-encoded.
pub fn get_at(s: &Server, path: &str, offset: &str) -> Response {
    get(s, path, &format!("offset={}", enc(offset)))
}

/// A record-aware read that must succeed with the default NDJSON view.
pub fn read_records(s: &Server, path: &str, query: &str) -> Response {
    let r = get(s, path, query);
    assert_eq!(
        r.status,
        200,
        "GET {path}?{query}: {:?} {}",
        r.headers,
        r.text()
    );
    assert_token(&r, &format!("GET {path}?{query}"));
    assert_eq!(
        media_type(&r).as_deref(),
        Some(NDJSON),
        "§6.7: record-aware reads are NDJSON by default ({query})"
    );
    r
}

/// The media type of `r` without parameters, lowercased.
pub fn media_type(r: &Response) -> Option<String> {
    r.header("content-type").map(|c| {
        c.split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    })
}

/// The values of an NDJSON body: every line is one complete JSON value and
/// the body (when not empty) ends with a newline.
pub fn lines(body: &[u8]) -> Vec<Value> {
    if body.is_empty() {
        return Vec::new();
    }
    assert!(
        body.ends_with(b"\n"),
        "NDJSON must end with a complete line: {:?}",
        String::from_utf8_lossy(body)
    );
    body[..body.len() - 1]
        .split(|b| *b == b'\n')
        .map(|l| {
            serde_json::from_slice(l).unwrap_or_else(|e| {
                panic!(
                    "not a complete JSON line ({e}): {:?}",
                    String::from_utf8_lossy(l)
                )
            })
        })
        .collect()
}

/// The values of an ordinary offset read: NDJSON on the bucketed surface,
/// one JSON array on the upstream surface.
pub fn offset_read_values(path: &str, r: &Response) -> Vec<Value> {
    if is_bucketed(path) {
        lines(&r.body)
    } else {
        match serde_json::from_slice(&r.body) {
            Ok(Value::Array(a)) => a,
            other => panic!("expected a JSON array on {path}: {other:?} {}", r.text()),
        }
    }
}

/// Every record from `from` to the tail `until` by record reads, checking
/// each response continues exactly where the previous ended.
pub fn records_from(s: &Server, path: &str, from: u64, until: u64) -> Vec<Value> {
    let mut out = Vec::new();
    let mut at = from;
    while at < until {
        let r = read_records(s, path, &format!("record={at}"));
        let (_, start, next) = read_coords(&r);
        assert_eq!(start, at, "Stream-Record-Start is the resolved start");
        let values = lines(&r.body);
        assert_eq!(next - start, values.len() as u64, "one ordinal per line");
        assert!(next > start, "no progress at record {at} (tail {until})");
        out.extend(values);
        at = next;
    }
    out
}

/// Builds a JSON body from values (one value, or an array of them).
pub fn body_of(values: &[Value]) -> Vec<u8> {
    serde_json::to_vec(values).unwrap()
}

// ------------------------------------------------------------- bootstrap

/// `GET {path}/bootstrap` read to its end: (head, parts as (content type, body)).
pub fn bootstrap(s: &Server, path: &str) -> (Response, Vec<(String, Vec<u8>)>) {
    let r = req(s.addr, "GET", &format!("{path}/bootstrap"), &[], b"");
    assert_eq!(
        r.status,
        200,
        "bootstrap {path}: {:?} {}",
        r.headers,
        r.text()
    );
    let ct = r.header("content-type").unwrap().to_string();
    let boundary = ct
        .split(';')
        .map(str::trim)
        .find_map(|p| p.strip_prefix("boundary="))
        .unwrap_or_else(|| panic!("no boundary in {ct:?}"))
        .trim_matches('"')
        .to_string();
    let parts = parse_multipart(&r.body, &boundary);
    (r, parts)
}

fn parse_multipart(body: &[u8], boundary: &str) -> Vec<(String, Vec<u8>)> {
    let delimiter = format!("--{boundary}").into_bytes();
    let mut close = b"\r\n".to_vec();
    close.extend_from_slice(&delimiter);
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
        let headers_end = find(rest, b"\r\n\r\n").expect("part headers");
        let headers = String::from_utf8(rest[..headers_end].to_vec()).unwrap();
        let content_type = headers
            .split("\r\n")
            .find_map(|h| {
                let (k, v) = h.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case("content-type")
                    .then(|| v.trim().to_string())
            })
            .expect("part Content-Type");
        rest = &rest[headers_end + 4..];
        let end = find(rest, &close).expect("a closing delimiter");
        parts.push((content_type, rest[..end].to_vec()));
        rest = &rest[end + 2..];
    }
}

// ------------------------------------------------------------------- SSE

use crate::common::sse::Event;

/// The messages of a default-view JSON data event: "SSE data events retain
/// the base protocol's JSON-mode representation and MAY contain multiple
/// newline-delimited messages" (§6.9). Accepts both dialects: one JSON
/// array (upstream) or newline-delimited values (extensions' base). Tests
/// using this only append non-array values.
pub fn data_values(e: &Event) -> Vec<Value> {
    let trimmed = e.data.trim();
    if trimmed.starts_with('[')
        && let Ok(Value::Array(a)) = serde_json::from_str(trimmed)
    {
        return a;
    }
    trimmed
        .split('\n')
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l)
                .unwrap_or_else(|err| panic!("SSE data line is not JSON ({err}): {l:?}"))
        })
        .collect()
}

/// `{"n": i}` for i in `range`.
pub fn values(range: std::ops::Range<u64>) -> Vec<Value> {
    range.map(|i| serde_json::json!({"n": i})).collect()
}

/// A JSON stream holding records `{"n":0}`..`{"n":4}`, appended as
/// `[0,1]`, `2`, `[3,4]` so record boundaries fall inside appends too.
pub fn five(s: &Server, path: &str) {
    create(s, path, &body_of(&values(0..2)));
    append(
        s,
        path,
        &serde_json::to_vec(&serde_json::json!({"n": 2})).unwrap(),
    );
    append(s, path, &body_of(&values(3..5)));
}

/// The record range and offset of an acknowledged append (200 or 204).
pub fn acked(r: &Response, what: &str) -> (u64, u64) {
    assert!(
        matches!(r.status, 200 | 204),
        "{what}: {} {:?} {}",
        r.status,
        r.headers,
        r.text()
    );
    assert_token(r, what);
    range(r)
}

/// Every record of the stream, by record reads.
pub fn all_records(s: &Server, path: &str) -> Vec<Value> {
    let (first, next) = first_next(s, path);
    records_from(s, path, first, next)
}
