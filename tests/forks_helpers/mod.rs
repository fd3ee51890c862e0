//! Helpers of the fork tests (`forks.rs`): the URL surfaces and fork
//! headers, requests that must answer a status, sources and forks tracked
//! with the data they must read back, views compared across restarts, and
//! the soft-delete matrix.
#![allow(dead_code)]

use std::thread;
use std::time::{Duration, Instant};

pub use crate::common::disk::log_bytes;
use crate::common::{Conn, Response, Server, enc, req, unique_name};
use crate::records_helpers::{body_of, first_next, lines, values};
use rill::shard::placement::shard_of;
use serde_json::{Value, json};

pub const SURFACES: [&str; 2] = ["/v1/stream/", "/forked/"];
pub const FROM: &str = "Stream-Forked-From";
pub const FO: &str = "Stream-Fork-Offset";
pub const SUB: &str = "Stream-Fork-Sub-Offset";
pub const ZERO: &str = "0000000000000000_0000000000000000";
/// A valid offset that is no test fork's fork point.
pub const ONE: &str = "0000000000000000_0000000000000001";
pub const TEXT: &str = "text/plain";
pub const BIN: &str = "application/octet-stream";
pub const JSON: &str = "application/json";
pub const MIB: usize = 1 << 20;
pub const SEGMENT: u64 = 256 << 10;

pub type Headers<'a> = [(&'a str, &'a str)];

// ------------------------------------------------------------------ helpers

/// A server started with `args`, with the bucket of [`SURFACES`] created.
pub fn start(args: &[&str]) -> Server {
    let s = Server::start(args);
    must(&s, "PUT", "/forked", &[], b"", 201);
    s
}

pub fn expect(r: &Response, status: u16, what: &str) {
    assert_eq!(r.status, status, "{what}: {:?} {}", r.headers, r.text());
}

/// A request that must answer `status`.
pub fn must(
    s: &Server,
    method: &str,
    path: &str,
    h: &Headers,
    body: &[u8],
    status: u16,
) -> Response {
    let r = req(s.addr, method, path, h, body);
    expect(&r, status, &format!("{method} {path} {h:?}"));
    r
}

pub fn status(s: &Server, method: &str, path: &str) -> u16 {
    req(s.addr, method, path, &[], b"").status
}

/// A fresh stream path under `prefix` whose key shard `shard` (of 2) owns.
pub fn path_on(prefix: &str, tag: &str, shard: usize) -> String {
    let skip = usize::from(!prefix.starts_with("/v1/"));
    loop {
        let path = format!("{prefix}{}", unique_name(tag));
        if shard_of(&path[skip..], 2) == shard {
            return path;
        }
    }
}

pub fn surface_of(path: &str) -> &'static str {
    SURFACES[usize::from(!path.starts_with("/v1/"))]
}

pub fn fork(s: &Server, path: &str, source: &str, extra: &Headers) -> Response {
    let headers = [&[(FROM, source)], extra].concat();
    req(s.addr, "PUT", path, &headers, b"")
}

pub fn header(r: &Response, name: &str) -> Option<String> {
    r.header(name).map(str::to_string)
}

pub fn next(r: &Response) -> String {
    header(r, "stream-next-offset").expect("Stream-Next-Offset")
}

/// A catch-up read from `offset`, following Stream-Next-Offset page after
/// page to the tail: (bytes, final Stream-Next-Offset, first Content-Type).
pub fn read_from(s: &Server, path: &str, offset: &str) -> (Vec<u8>, String, Option<String>) {
    let mut conn = Conn::open(s.addr);
    let (mut data, mut offset, mut ct) = (Vec::new(), offset.to_string(), None);
    for _ in 0..1000 {
        let at = format!("{path}?offset={}", enc(&offset));
        let r = conn.request("GET", &at, &[], b"");
        if r.status == 410 && offset == "-1" {
            // Retention (inherited or not) moved: start where it says.
            offset = next(&r);
            continue;
        }
        expect(&r, 200, &at);
        ct = ct.or_else(|| header(&r, "content-type"));
        data.extend_from_slice(&r.body);
        offset = next(&r);
        if r.header("stream-up-to-date") == Some("true") {
            return (data, offset, ct);
        }
    }
    panic!("{path}: no Stream-Up-To-Date after 1000 pages");
}

pub fn same_bytes(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        let at = got.iter().zip(want).position(|(a, b)| a != b);
        let at = at.unwrap_or(got.len().min(want.len()));
        let (n, m) = (got.len(), want.len());
        panic!("{what}: read {n} bytes, expected {m}, first difference at byte {at}");
    }
}

/// Polls HEAD (bounded: 5 s) until it answers `want`.
pub fn wait_status(s: &Server, path: &str, want: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = status(s, "HEAD", path);
        if got == want {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: HEAD {path}: {got}");
        thread::sleep(Duration::from_millis(100));
    }
}

/// Deterministic noise (xorshift) with every byte value.
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut step = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x >> 24) as u8
    };
    (0..len).map(|_| step()).collect()
}

/// What a stream holds: bytes, or JSON messages.
#[derive(Clone, Debug, PartialEq)]
pub enum Data {
    Bytes(Vec<u8>),
    Json(Vec<Value>),
}

impl Data {
    pub fn len(&self) -> usize {
        match self {
            Data::Bytes(b) => b.len(),
            Data::Json(v) => v.len(),
        }
    }
    pub fn prefix(&self, n: usize) -> Data {
        match self {
            Data::Bytes(b) => Data::Bytes(b[..n].to_vec()),
            Data::Json(v) => Data::Json(v[..n].to_vec()),
        }
    }
    pub fn extend(&mut self, more: &Data) {
        match (self, more) {
            (Data::Bytes(a), Data::Bytes(b)) => a.extend_from_slice(b),
            (Data::Json(a), Data::Json(b)) => a.extend_from_slice(b),
            _ => unreachable!("same kind of data"),
        }
    }
    pub fn body(&self) -> Vec<u8> {
        match self {
            Data::Bytes(b) => b.clone(),
            Data::Json(v) => body_of(v),
        }
    }
    /// Checks what an offset read of `path` returned: bytes, a JSON array
    /// (upstream surface) or NDJSON (bucketed surface).
    pub fn check(&self, path: &str, body: &[u8], what: &str) {
        match self {
            Data::Bytes(want) => same_bytes(body, want, what),
            Data::Json(want) if body.is_empty() => assert!(want.is_empty(), "{what}"),
            Data::Json(want) if path.starts_with("/v1/") => {
                let got: Vec<Value> = serde_json::from_slice(body).expect(what);
                assert_eq!(&got, want, "{what}");
            }
            Data::Json(want) => assert_eq!(&lines(body), want, "{what}"),
        }
    }
}

/// A stream, what it must hold and, for a fork, the headers of its PUT.
pub struct Tracked {
    pub path: String,
    pub ct: &'static str,
    pub data: Data,
    pub headers: Vec<(String, String)>,
}

impl Tracked {
    pub fn new(path: String, ct: &'static str, data: Data) -> Tracked {
        let headers = Vec::new();
        Tracked {
            path,
            ct,
            data,
            headers,
        }
    }

    /// Reads the stream whole and compares; on JSON also HEAD's record range.
    pub fn check(&self, s: &Server, what: &str) {
        let what = format!("{what}: {}", self.path);
        let (body, _, _) = read_from(s, &self.path, "-1");
        self.data.check(&self.path, &body, &what);
        if self.ct == JSON {
            let (first, next) = first_next(s, &self.path);
            assert_eq!(next - first, self.data.len() as u64, "{what}");
        }
    }

    pub fn push(&mut self, s: &Server, piece: Data) -> Response {
        let ct = [("Content-Type", self.ct)];
        let r = must(s, "POST", &self.path, &ct, &piece.body(), 204);
        self.data.extend(&piece);
        r
    }

    /// Appends a piece of its own (`tag` makes it unique).
    pub fn append(&mut self, s: &Server, tag: u8) -> (Response, Data) {
        let piece = match (&self.data, self.ct) {
            (Data::Json(_), _) => Data::Json(vec![json!({"own": tag}), json!([tag, null])]),
            (_, TEXT) => Data::Bytes(format!("<{tag}>").into_bytes()),
            _ => Data::Bytes(vec![0x00, 0xFF, tag, b'\n', 0x80]),
        };
        (self.push(s, piece.clone()), piece)
    }

    /// Forks this stream (same surface, on `shard`), inheriting its first
    /// `n` units; checks the 201, the inherited content type and the data.
    pub fn fork(&self, s: &Server, tag: &str, shard: usize, extra: &Headers, n: usize) -> Tracked {
        let path = path_on(surface_of(&self.path), tag, shard);
        let mut fork = Tracked::new(path, self.ct, self.data.prefix(n));
        let all = [&[(FROM, self.path.as_str())], extra].concat();
        fork.headers = all.iter().map(|&(k, v)| (k.into(), v.into())).collect();
        let r = fork.recreate(s, &[]);
        expect(&r, 201, &format!("fork {}", fork.path));
        assert_eq!(r.header("content-type"), Some(self.ct), "inherited");
        assert_eq!(r.header(FROM), None, "forks are transparent (§4.2)");
        fork.check(s, "new fork");
        fork
    }

    /// Replays the fork's PUT, with the headers in `over` replaced or added.
    pub fn recreate(&self, s: &Server, over: &Headers) -> Response {
        let mut headers = over.to_vec();
        for (k, v) in &self.headers {
            if over.iter().all(|(o, _)| o != k) {
                headers.push((k, v));
            }
        }
        req(s.addr, "PUT", &self.path, &headers, b"")
    }

    /// Replays the fork's PUT (with `over`), which must answer `status`.
    pub fn recreate_is(&self, s: &Server, over: &Headers, status: u16) {
        let what = format!("re-create {} with {over:?}", self.path);
        expect(&self.recreate(s, over), status, &what);
    }

    pub fn has(&self, name: &str) -> bool {
        self.headers.iter().any(|(k, _)| k == name)
    }

    pub fn lifetime(&self, s: &Server) -> [Option<String>; 2] {
        let h = must(s, "HEAD", &self.path, &[], b"", 200);
        ["stream-ttl", "stream-expires-at"].map(|n| header(&h, n))
    }
}

/// Three appends of a source of type `ct`: the fork point `mid` falls after
/// the second, and a sub-offset slices the third.
pub fn pieces(ct: &str) -> [Data; 3] {
    match ct {
        JSON => [values(0..2), values(2..3), values(3..5)].map(Data::Json),
        TEXT => [&b"hello "[..], b"world", b" and more"].map(|b| Data::Bytes(b.to_vec())),
        _ => {
            let (up, down) = ((0..=255).collect(), (0..=255).rev().collect());
            [up, down, b"\0\xff\0\xff\r\n\0".to_vec()].map(Data::Bytes)
        }
    }
}

/// A source on `prefix`, shard 0: (stream, `mid` offset, units before `mid`).
pub fn source(
    s: &Server,
    prefix: &str,
    ct: &'static str,
    extra: &Headers,
) -> (Tracked, String, usize) {
    let [p0, p1, p2] = pieces(ct);
    let path = path_on(prefix, "src", 0);
    let headers = [&[("Content-Type", ct)], extra].concat();
    must(s, "PUT", &path, &headers, &p0.body(), 201);
    let mut t = Tracked::new(path, ct, p0);
    let mid = next(&t.push(s, p1));
    let units = t.data.len();
    t.push(s, p2);
    (t, mid, units)
}

/// What HEAD and a full read show of a stream: the HEAD fields, the bytes,
/// the read's final Stream-Next-Offset and Content-Type.
#[derive(Debug, PartialEq)]
pub struct View(
    pub Vec<Option<String>>,
    pub Vec<u8>,
    pub String,
    pub Option<String>,
);

pub const VIEWED: &str = "content-type stream-next-offset stream-ttl stream-expires-at \
    stream-closed stream-record-first stream-record-next";

pub fn view(s: &Server, path: &str) -> View {
    let h = must(s, "HEAD", path, &[], b"", 200);
    let (body, next, content_type) = read_from(s, path, "-1");
    let tail = header(&h, "stream-next-offset");
    assert_eq!(tail.as_ref(), Some(&next), "{path}: HEAD vs read");
    let head = VIEWED.split_whitespace().map(|f| match f {
        "stream-ttl" => header(&h, f).map(|ttl| to_the_minute(&ttl)),
        _ => header(&h, f),
    });
    View(head.collect(), body, next, content_type)
}

/// A `Stream-TTL` to the minute: on the bucketed surface it is the time
/// left (extensions §5.4), which ticks between two views of a stream.
fn to_the_minute(ttl: &str) -> String {
    let secs: u64 = ttl.parse().expect("Stream-TTL is seconds");
    format!("~{}min", (secs + 30) / 60)
}

/// The soft-delete matrix (§4.2): 410 on GET/HEAD/POST/DELETE, 409 on PUT
/// and on a fork of it (which must not create the fork).
pub fn assert_soft_deleted(s: &Server, path: &str, what: &str) {
    let text = [("Content-Type", TEXT)];
    let get = format!("{path}?offset=-1");
    for (m, at, want) in [
        ("GET", get.as_str(), 410),
        ("HEAD", path, 410),
        ("POST", path, 410),
        ("DELETE", path, 410),
        ("PUT", path, 409),
    ] {
        let body: &[u8] = if m == "POST" { b"more" } else { b"" };
        let r = req(s.addr, m, at, &text, body);
        assert_eq!(r.status, want, "{what}: {m} {at}");
    }
    let late = path_on(surface_of(path), "late", 1);
    let r = fork(s, &late, path, &[]);
    assert_eq!(r.status, 409, "{what}: fork of {path}");
    assert_eq!(status(s, "HEAD", &late), 404, "{what}: {late}");
}

/// A binary source of `mib` 1 MiB appends: (bytes, offset after each).
pub fn big_source(s: &Server, path: &str, mib: usize) -> (Vec<u8>, Vec<String>) {
    let bin = [("Content-Type", BIN)];
    must(s, "PUT", path, &bin, b"", 201);
    let mut conn = Conn::open(s.addr);
    let (mut data, mut offsets) = (Vec::new(), Vec::new());
    for i in 0..mib {
        let chunk = noise(i as u64 + 7, MIB);
        let r = conn.request("POST", path, &bin, &chunk);
        expect(&r, 204, "append 1 MiB");
        offsets.push(next(&r));
        data.extend_from_slice(&chunk);
    }
    (data, offsets)
}
