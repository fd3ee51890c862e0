//! Stream forks (PROTOCOL.md §4.2) against the real binary, beyond what the
//! conformance suite covers (HTTP behaviour on `/v1/stream` without
//! restarts): durability of copy-on-fork and of soft deletes across SIGKILL
//! and restart, on both URL surfaces (`/v1/stream/...` and bucketed
//! `/{bucket}/{stream}`), with forks placed on the source's shard and on the
//! other one (copied over the mesh). Covers forks at the tail, mid, zero and
//! sub-offsets, chains of forks, inherited lifetimes and content types,
//! idempotent re-create after restart, the soft-delete status matrix and its
//! cascade (also when a SIGKILL loses the nudge), large (multi-page) copies,
//! SIGKILLs in the middle of fork copies (no partial fork), segment cleaning
//! under forks, and JSON record ordinals (extensions §6) continuing on forks.

mod common;
mod records_helpers;

use std::fs;
use std::path::Path;
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use common::{Conn, Response, Server, enc, req, unique_name};
use records_helpers::{body_of, first_next, lines, num, range, records_from, values};
use rill::shard::placement::shard_of;
use serde_json::{Value, json};

const SURFACES: [&str; 2] = ["/v1/stream/", "/forked/"];
const FROM: &str = "Stream-Forked-From";
const FO: &str = "Stream-Fork-Offset";
const SUB: &str = "Stream-Fork-Sub-Offset";
const ZERO: &str = "0000000000000000_0000000000000000";
/// A valid offset that is no test fork's fork point.
const ONE: &str = "0000000000000000_0000000000000001";
const TEXT: &str = "text/plain";
const BIN: &str = "application/octet-stream";
const JSON: &str = "application/json";
const MIB: usize = 1 << 20;
const SEGMENT: u64 = 256 << 10;

type Headers<'a> = [(&'a str, &'a str)];

// ------------------------------------------------------------------ helpers

/// A server started with `args`, with the bucket of [`SURFACES`] created.
fn start(args: &[&str]) -> Server {
    let s = Server::start(args);
    must(&s, "PUT", "/forked", &[], b"", 201);
    s
}

fn expect(r: &Response, status: u16, what: &str) {
    assert_eq!(r.status, status, "{what}: {:?} {}", r.headers, r.text());
}

/// A request that must answer `status`.
fn must(s: &Server, method: &str, path: &str, h: &Headers, body: &[u8], status: u16) -> Response {
    let r = req(s.addr, method, path, h, body);
    expect(&r, status, &format!("{method} {path} {h:?}"));
    r
}

fn status(s: &Server, method: &str, path: &str) -> u16 {
    req(s.addr, method, path, &[], b"").status
}

/// A fresh stream path under `prefix` whose key shard `shard` (of 2) owns.
fn path_on(prefix: &str, tag: &str, shard: usize) -> String {
    let skip = usize::from(!prefix.starts_with("/v1/"));
    loop {
        let path = format!("{prefix}{}", unique_name(tag));
        if shard_of(&path[skip..], 2) == shard {
            return path;
        }
    }
}

fn surface_of(path: &str) -> &'static str {
    SURFACES[usize::from(!path.starts_with("/v1/"))]
}

fn fork(s: &Server, path: &str, source: &str, extra: &Headers) -> Response {
    let headers = [&[(FROM, source)], extra].concat();
    req(s.addr, "PUT", path, &headers, b"")
}

fn header(r: &Response, name: &str) -> Option<String> {
    r.header(name).map(str::to_string)
}

fn next(r: &Response) -> String {
    header(r, "stream-next-offset").expect("Stream-Next-Offset")
}

/// A catch-up read from `offset`, following Stream-Next-Offset page after
/// page to the tail: (bytes, final Stream-Next-Offset, first Content-Type).
fn read_from(s: &Server, path: &str, offset: &str) -> (Vec<u8>, String, Option<String>) {
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

fn same_bytes(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        let at = got.iter().zip(want).position(|(a, b)| a != b);
        let at = at.unwrap_or(got.len().min(want.len()));
        let (n, m) = (got.len(), want.len());
        panic!("{what}: read {n} bytes, expected {m}, first difference at byte {at}");
    }
}

/// Polls HEAD (bounded: 5 s) until it answers `want`.
fn wait_status(s: &Server, path: &str, want: u16, what: &str) {
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
fn noise(seed: u64, len: usize) -> Vec<u8> {
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
enum Data {
    Bytes(Vec<u8>),
    Json(Vec<Value>),
}

impl Data {
    fn len(&self) -> usize {
        match self {
            Data::Bytes(b) => b.len(),
            Data::Json(v) => v.len(),
        }
    }
    fn prefix(&self, n: usize) -> Data {
        match self {
            Data::Bytes(b) => Data::Bytes(b[..n].to_vec()),
            Data::Json(v) => Data::Json(v[..n].to_vec()),
        }
    }
    fn extend(&mut self, more: &Data) {
        match (self, more) {
            (Data::Bytes(a), Data::Bytes(b)) => a.extend_from_slice(b),
            (Data::Json(a), Data::Json(b)) => a.extend_from_slice(b),
            _ => unreachable!("same kind of data"),
        }
    }
    fn body(&self) -> Vec<u8> {
        match self {
            Data::Bytes(b) => b.clone(),
            Data::Json(v) => body_of(v),
        }
    }
    /// Checks what an offset read of `path` returned: bytes, a JSON array
    /// (upstream surface) or NDJSON (bucketed surface).
    fn check(&self, path: &str, body: &[u8], what: &str) {
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
struct Tracked {
    path: String,
    ct: &'static str,
    data: Data,
    headers: Vec<(String, String)>,
}

impl Tracked {
    fn new(path: String, ct: &'static str, data: Data) -> Tracked {
        let headers = Vec::new();
        Tracked {
            path,
            ct,
            data,
            headers,
        }
    }

    /// Reads the stream whole and compares; on JSON also HEAD's record range.
    fn check(&self, s: &Server, what: &str) {
        let what = format!("{what}: {}", self.path);
        let (body, _, _) = read_from(s, &self.path, "-1");
        self.data.check(&self.path, &body, &what);
        if self.ct == JSON {
            let (first, next) = first_next(s, &self.path);
            assert_eq!(next - first, self.data.len() as u64, "{what}");
        }
    }

    fn push(&mut self, s: &Server, piece: Data) -> Response {
        let ct = [("Content-Type", self.ct)];
        let r = must(s, "POST", &self.path, &ct, &piece.body(), 204);
        self.data.extend(&piece);
        r
    }

    /// Appends a piece of its own (`tag` makes it unique).
    fn append(&mut self, s: &Server, tag: u8) -> (Response, Data) {
        let piece = match (&self.data, self.ct) {
            (Data::Json(_), _) => Data::Json(vec![json!({"own": tag}), json!([tag, null])]),
            (_, TEXT) => Data::Bytes(format!("<{tag}>").into_bytes()),
            _ => Data::Bytes(vec![0x00, 0xFF, tag, b'\n', 0x80]),
        };
        (self.push(s, piece.clone()), piece)
    }

    /// Forks this stream (same surface, on `shard`), inheriting its first
    /// `n` units; checks the 201, the inherited content type and the data.
    fn fork(&self, s: &Server, tag: &str, shard: usize, extra: &Headers, n: usize) -> Tracked {
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
    fn recreate(&self, s: &Server, over: &Headers) -> Response {
        let mut headers = over.to_vec();
        for (k, v) in &self.headers {
            if over.iter().all(|(o, _)| o != k) {
                headers.push((k, v));
            }
        }
        req(s.addr, "PUT", &self.path, &headers, b"")
    }

    /// Replays the fork's PUT (with `over`), which must answer `status`.
    fn recreate_is(&self, s: &Server, over: &Headers, status: u16) {
        let what = format!("re-create {} with {over:?}", self.path);
        expect(&self.recreate(s, over), status, &what);
    }

    fn has(&self, name: &str) -> bool {
        self.headers.iter().any(|(k, _)| k == name)
    }

    fn lifetime(&self, s: &Server) -> [Option<String>; 2] {
        let h = must(s, "HEAD", &self.path, &[], b"", 200);
        ["stream-ttl", "stream-expires-at"].map(|n| header(&h, n))
    }
}

/// Three appends of a source of type `ct`: the fork point `mid` falls after
/// the second, and a sub-offset slices the third.
fn pieces(ct: &str) -> [Data; 3] {
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
fn source(s: &Server, prefix: &str, ct: &'static str, extra: &Headers) -> (Tracked, String, usize) {
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
struct View(Vec<Option<String>>, Vec<u8>, String, Option<String>);

const VIEWED: &str = "content-type stream-next-offset stream-ttl stream-expires-at \
    stream-closed stream-record-first stream-record-next";

fn view(s: &Server, path: &str) -> View {
    let h = must(s, "HEAD", path, &[], b"", 200);
    let (body, next, content_type) = read_from(s, path, "-1");
    let tail = header(&h, "stream-next-offset");
    assert_eq!(tail.as_ref(), Some(&next), "{path}: HEAD vs read");
    let head = VIEWED.split_whitespace().map(|f| header(&h, f));
    View(head.collect(), body, next, content_type)
}

/// The soft-delete matrix (§4.2): 410 on GET/HEAD/POST/DELETE, 409 on PUT
/// and on a fork of it (which must not create the fork).
fn assert_soft_deleted(s: &Server, path: &str, what: &str) {
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
fn big_source(s: &Server, path: &str, mib: usize) -> (Vec<u8>, Vec<String>) {
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

/// Bytes of segment files under the data dir (as in `cleaner.rs`).
fn log_bytes(dir: &Path) -> u64 {
    let mut total = 0;
    for shard in fs::read_dir(dir).unwrap().flatten() {
        for f in fs::read_dir(shard.path()).into_iter().flatten().flatten() {
            if f.file_name().to_string_lossy().ends_with(".seg") {
                total += f.metadata().unwrap().len();
            }
        }
    }
    total
}

// -------------------------------------------------------------------- tests

#[test]
fn forks_survive_sigkill() {
    let mut s = start(&["--cores", "2"]);
    let mut all: Vec<Tracked> = Vec::new();
    let lifetimes: [(&str, &Headers); 3] = [
        (TEXT, &[("Stream-TTL", "86400")]),
        (BIN, &[("Stream-Expires-At", "2099-01-02T03:04:05.678Z")]),
        (JSON, &[]),
    ];
    let sources = SURFACES.map(|p| lifetimes.map(|l| (p, l)));
    for (prefix, (ct, life)) in sources.into_iter().flatten() {
        let (mut src, mid, units) = source(&s, prefix, ct, life);
        let (sub, own_ttl): (usize, &Headers) = match ct {
            JSON => (1, &[]),
            TEXT => (3, &[("Stream-TTL", "3600")]),
            _ => (3, &[]),
        };
        let sub_text = sub.to_string();
        let (mid, sub_text) = (mid.as_str(), sub_text.as_str());
        let n = src.data.len();
        let mut tail = src.fork(&s, "tail", 1, own_ttl, n);
        let mut half = src.fork(&s, "mid", 0, &[(FO, mid)], units);
        let mut zero = src.fork(&s, "zero", 1, &[(FO, ZERO)], 0);
        let at_sub = [(FO, mid), (SUB, sub_text)];
        let mut cut = src.fork(&s, "sub", 0, &at_sub, units + sub);
        let first_level = [&mut tail, &mut half, &mut zero, &mut cut];
        for (i, f) in first_level.into_iter().enumerate() {
            f.append(&s, i as u8);
        }
        // A chain: src <- tail <- l2 <- l3, each with appends of its own.
        let mut l2 = tail.fork(&s, "l2", 0, &[], tail.data.len());
        let at = next(&l2.append(&s, 10).0);
        let mut l3 = l2.fork(&s, "l3", 1, &[(FO, &at)], l2.data.len());
        l2.append(&s, 11);
        l3.append(&s, 12);
        src.append(&s, 13);
        for f in [&tail, &half, &zero, &cut, &l2, &l3] {
            f.check(&s, "after the source and the forks diverged");
        }
        // Lifetimes are inherited unless the fork asks for its own.
        let inherited = src.lifetime(&s);
        let own = [Some("3600".to_string()), None];
        let own = if ct == TEXT { &own } else { &inherited };
        for (f, want) in [&half, &zero, &cut, &tail, &l2, &l3].iter().zip(0..) {
            let want = if want < 3 { &inherited } else { own };
            assert_eq!(&f.lifetime(&s), want, "{}", f.path);
        }
        all.extend([src, tail, half, zero, cut, l2, l3]);
    }
    let before: Vec<View> = all.iter().map(|t| view(&s, &t.path)).collect();
    s.kill();
    s.restart();
    for (t, was) in all.iter_mut().zip(&before) {
        assert_eq!(&view(&s, &t.path), was, "{} after SIGKILL", t.path);
        // Appends continue at the same offsets and record ordinals.
        let (r, piece) = t.append(&s, 20);
        let (body, _, _) = read_from(&s, &t.path, &was.2);
        piece.check(&t.path, &body, &format!("{}: from the old tail", t.path));
        if t.ct == JSON {
            let old_next = was.0[6].as_ref().unwrap();
            assert_eq!(&num(&r, "stream-record-start").to_string(), old_next);
        }
        t.check(&s, "appended after SIGKILL");
        if t.headers.is_empty() {
            continue;
        }
        t.recreate_is(&s, &[], 200);
        t.recreate_is(&s, &[("Content-Type", t.ct)], 200);
        t.recreate_is(&s, &[("Content-Type", "text/html")], 409);
        // An omitted sub-offset is 0; any other one is another fork.
        t.recreate_is(&s, &[(SUB, "0")], if t.has(SUB) { 409 } else { 200 });
        t.recreate_is(&s, &[(SUB, if t.has(SUB) { "2" } else { "1" })], 409);
        if t.has(FO) {
            t.recreate_is(&s, &[(FO, ONE)], 409);
        }
    }
}

#[test]
fn soft_delete_survives_restart() {
    // A short cleaner interval: its pass collects what a SIGKILL left.
    let mut s = start(&["--cores", "2", "--clean-interval-ms", "200"]);
    let (mut pairs, mut chains) = (Vec::new(), Vec::new());
    for prefix in SURFACES {
        // A source with two forks.
        let (src, _, _) = source(&s, prefix, TEXT, &[]);
        let mut f1 = src.fork(&s, "f1", 0, &[], src.data.len());
        let mut f2 = src.fork(&s, "f2", 1, &[], src.data.len());
        f1.append(&s, 1);
        f2.append(&s, 2);
        must(&s, "DELETE", &src.path, &[], b"", 204);
        assert_soft_deleted(&s, &src.path, "after DELETE");
        f1.check(&s, "fork of a soft-deleted source");
        pairs.push((src, f1, f2));
        // A chain L0 <- L1 <- L2, L0 and L1 deleted.
        let (l0, _, _) = source(&s, prefix, TEXT, &[]);
        let mut l1 = l0.fork(&s, "l1", 1, &[], l0.data.len());
        l1.append(&s, 1);
        let mut l2 = l1.fork(&s, "l2", 0, &[], l1.data.len());
        l2.append(&s, 2);
        must(&s, "DELETE", &l0.path, &[], b"", 204);
        must(&s, "DELETE", &l1.path, &[], b"", 204);
        chains.push((l0, l1, l2));
    }
    s.kill();
    s.restart();
    for (src, f1, f2) in &pairs {
        assert_soft_deleted(&s, &src.path, "after SIGKILL");
        f1.check(&s, "after SIGKILL");
        f2.check(&s, "after SIGKILL");
        must(&s, "DELETE", &f1.path, &[], b"", 204);
        assert_eq!(status(&s, "HEAD", &f1.path), 404, "gone at once");
        // Time for a wrong collection to happen: the source still has f2.
        thread::sleep(Duration::from_millis(500));
        assert_soft_deleted(&s, &src.path, "with one fork left");
        f2.check(&s, "the other fork");
        must(&s, "DELETE", &f2.path, &[], b"", 204);
        wait_status(&s, &src.path, 404, "the source without forks");
    }
    for (i, (l0, l1, l2)) in chains.iter().enumerate() {
        assert_soft_deleted(&s, &l0.path, "L0 after SIGKILL");
        assert_soft_deleted(&s, &l1.path, "L1 after SIGKILL");
        l2.check(&s, "L2 reads through soft-deleted L1 and L0");
        must(&s, "DELETE", &l2.path, &[], b"", 204);
        assert_eq!(status(&s, "HEAD", &l2.path), 404, "L2 gone at once");
        if i == 1 {
            // SIGKILL right after the last fork's delete: the cascade
            // still completes after the restart.
            s.kill();
            s.restart();
        }
        wait_status(&s, &l1.path, 404, "L1 collected");
        wait_status(&s, &l0.path, 404, "L0 collected");
    }
    s.restart();
    let chained = chains.iter().flat_map(|(l0, l1, l2)| [l0, l1, l2]);
    for t in pairs.iter().map(|(src, _, _)| src).chain(chained) {
        assert_eq!(status(&s, "HEAD", &t.path), 404, "{}", t.path);
    }
    for (src, _, _) in pairs.iter().chain(&chains) {
        must(&s, "PUT", &src.path, &[("Content-Type", TEXT)], b"new", 201);
        assert_eq!(read_from(&s, &src.path, "-1").0, b"new");
    }
}

#[test]
fn fork_of_a_large_source_is_copied_whole() {
    let mut s = start(&["--cores", "2"]);
    let on = |tag: &str, shard: usize| path_on(SURFACES[0], tag, shard);
    let src = on("large", 0);
    let (data, offsets) = big_source(&s, &src, 20);
    let half = 10 * MIB;
    let [tail, mid, sub] = [on("tail", 1), on("mid", 0), on("sub", 1)];
    expect(&fork(&s, &tail, &src, &[]), 201, "fork at the tail");
    let at = [(FO, offsets[9].as_str())];
    expect(&fork(&s, &mid, &src, &at), 201, "fork at 10 MiB");
    let at_sub = [at[0], (SUB, "12345")];
    expect(
        &fork(&s, &sub, &src, &at_sub),
        201,
        "fork at 10 MiB + 12345",
    );
    let cases = [
        (&src, &data[..], Some(&offsets[19])),
        (&tail, &data[..], Some(&offsets[19])),
        (&mid, &data[..half], Some(&offsets[9])),
        (&sub, &data[..half + 12345], None),
    ];
    for round in ["before SIGKILL", "after SIGKILL"] {
        for (path, want, tail_offset) in &cases {
            let (got, next_offset, _) = read_from(&s, path, "-1");
            same_bytes(&got, want, &format!("{path} {round}"));
            if let Some(t) = tail_offset {
                assert_eq!(&next_offset, *t, "{path} {round}");
            }
        }
        s.kill();
        s.restart();
    }
}

/// Fork paths tried, with the status each answered (if it did).
type Attempts = Arc<Mutex<Vec<(String, Option<u16>)>>>;

/// Forks `src` to fresh paths one after the other until a request fails;
/// sends the time each took.
fn fork_repeatedly(s: &Server, src: &str, attempts: &Attempts, took: mpsc::Sender<Duration>) {
    let (addr, attempts, src) = (s.addr, attempts.clone(), src.to_string());
    thread::spawn(move || {
        let mut conn = Conn::open(addr);
        for i in 0..16 {
            let path = path_on(SURFACES[0], "copy", i % 2);
            attempts.lock().unwrap().push((path.clone(), None));
            let began = Instant::now();
            let Ok(r) = conn.try_request("PUT", &path, &[(FROM, &src)], b"") else {
                return;
            };
            attempts.lock().unwrap().last_mut().unwrap().1 = Some(r.status);
            if r.status != 201 || took.send(began.elapsed()).is_err() {
                return;
            }
        }
    });
}

#[test]
fn sigkill_during_fork_copies_leaves_no_partial_fork() {
    let mut s = start(&["--cores", "2"]);
    let src = path_on(SURFACES[0], "huge", 0);
    let (data, offsets) = big_source(&s, &src, 30);
    let complete = |s: &Server, path: &str, what: &str| {
        let (got, next_offset, _) = read_from(s, path, "-1");
        same_bytes(&got, &data, &format!("{what} {path}"));
        assert_eq!(next_offset, offsets[29], "{what} {path}");
    };
    let mut counts = [0; 3];
    // Kill at a quarter, half and three quarters of the second copy.
    for quarter in 1..=3 {
        let attempts = Attempts::default();
        let (tx, rx) = mpsc::channel();
        fork_repeatedly(&s, &src, &attempts, tx);
        let took = rx.recv_timeout(Duration::from_secs(60)).expect("1 fork");
        thread::sleep(took * quarter / 4);
        s.kill();
        s.restart();
        complete(&s, &src, "the source after SIGKILL");
        for (path, answer) in attempts.lock().unwrap().iter() {
            match (answer, status(&s, "HEAD", path)) {
                (Some(201), now) => {
                    assert_eq!(now, 200, "{path} answered 201 before the kill");
                    complete(&s, path, "acknowledged fork");
                    counts[0] += 1;
                }
                (None, 200) => {
                    complete(&s, path, "unacknowledged fork");
                    counts[1] += 1;
                }
                (None, 404) => {
                    // The name is free: a fork made now is whole.
                    let r = fork(&s, path, &src, &[]);
                    expect(&r, 201, "fork after restart");
                    complete(&s, path, "fork made after restart");
                    counts[2] += 1;
                }
                (answer, now) => panic!("{path}: answered {answer:?}, now {now}"),
            }
        }
    }
    let [acked, whole, absent] = counts;
    eprintln!("forks: {acked} acknowledged, {whole} whole unacknowledged, {absent} absent");
    assert!(acked >= 3, "a fork was acknowledged before each kill");
}

#[test]
fn forks_survive_segment_cleaning() {
    let mut s = start(&[
        "--cores=2",
        "--segment-bytes=262144",
        "--max-body-bytes=65536",
        "--clean-interval-ms=100",
        "--cache-bytes=65536",
    ]);
    let baseline = log_bytes(&s.data_dir);
    let mut seed = 0;
    let mut chunk = || {
        seed += 1;
        Data::Bytes(noise(seed, 20_000))
    };
    let on = |i: usize, tag: &str| path_on(SURFACES[i % 2], tag, i % 2);
    let fillers: Vec<String> = (0..8).map(|i| on(i, "filler")).collect();
    let empty = |i| Tracked::new(on(i, "src"), BIN, Data::Bytes(vec![]));
    let mut srcs: Vec<Tracked> = (0..3).map(empty).collect();
    let bin = [("Content-Type", BIN)];
    for path in fillers.iter().chain(srcs.iter().map(|t| &t.path)) {
        must(&s, "PUT", path, &bin, b"", 201);
    }
    let fill = |s: &Server, round: usize, chunk: &mut dyn FnMut() -> Data| {
        let mut conn = Conn::open(s.addr);
        for _ in 0..16 {
            let r = conn.request("POST", &fillers[round], &bin, &chunk().body());
            expect(&r, 204, "filler append");
        }
    };
    // Sources, then forks' copies and appends, interleaved with filler so
    // that they share segments with dead data.
    for round in 0..4 {
        for t in &mut srcs {
            t.push(&s, chunk());
        }
        fill(&s, round, &mut chunk);
    }
    let mut forks: Vec<Vec<Tracked>> = Vec::new();
    for (i, src) in srcs.iter().enumerate() {
        let at = src.data.len() / 2;
        let mid = rill::protocol::offset::format(at as u64);
        let tail = src.fork(&s, "tail", (i + 1) % 2, &[], src.data.len());
        let half = src.fork(&s, "mid", i % 2, &[(FO, &mid)], at);
        forks.push(vec![tail, half]);
    }
    for round in 4..8 {
        for f in forks.iter_mut().flatten().chain([&mut srcs[2]]) {
            f.push(&s, chunk());
        }
        fill(&s, round, &mut chunk);
    }
    let full = log_bytes(&s.data_dir);
    // Source 0: soft-deleted, its forks stay. Source 1: soft-deleted, then
    // its forks are deleted too. Source 2: live, loses one fork.
    let dead = [&srcs[0], &srcs[1], &forks[1][0], &forks[1][1], &forks[2][0]];
    let dead = dead.map(|t| &t.path);
    for path in dead.into_iter().chain(&fillers) {
        must(&s, "DELETE", path, &[], b"", 204);
    }
    wait_status(&s, &srcs[1].path, 404, "source 1 without forks");
    let live_forks = || forks[0].iter().chain(&forks[2][1..]);
    let live = live_forks().chain([&srcs[0], &srcs[2]]);
    let target = baseline + 4 * SEGMENT + live.map(|t| t.data.len() as u64).sum::<u64>();
    assert!(full > target + 4 * SEGMENT, "{full} vs {target}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while log_bytes(&s.data_dir) > target {
        let now = log_bytes(&s.data_dir);
        assert!(Instant::now() < deadline, "not reclaimed: {now} > {target}");
        thread::sleep(Duration::from_millis(100));
    }
    for round in ["after cleaning", "after cleaning and SIGKILL"] {
        for f in live_forks() {
            f.check(&s, round);
            f.recreate_is(&s, &[], 200);
        }
        srcs[2].check(&s, round);
        assert_soft_deleted(&s, &srcs[0].path, round);
        for path in &dead[1..] {
            assert_eq!(status(&s, "HEAD", path), 404, "{round}: {path}");
        }
        s.kill();
        s.restart();
    }
    // Cleaned and restarted streams still fork whole.
    srcs[2].fork(&s, "late", 1, &[], srcs[2].data.len());
    forks[0][0].fork(&s, "late", 0, &[], forks[0][0].data.len());
}

#[test]
fn json_fork_continues_record_ordinals() {
    let mut s = start(&["--cores", "2"]);
    let mut cases: Vec<(Tracked, u64)> = Vec::new();
    for prefix in SURFACES {
        // Records 0..5 appended as [0,1], 2, [3,4]; `mid` is boundary 3.
        let (src, mid, _) = source(&s, prefix, JSON, &[]);
        let mut first = 0;
        if prefix == "/forked/" {
            // Retention (extensions §2.2) up to record 1: forks inherit F = 1.
            let state = [("Content-Type", "application/x-state")];
            let snap = format!("{}/snapshot?record=1", src.path);
            must(&s, "PUT", &snap, &state, b"S1", 204);
            let retain = format!("{}/retention?record=1", src.path);
            must(&s, "PUT", &retain, &[], b"", 204);
            first = 1;
            let gone = path_on(prefix, "gone", 1);
            let r = fork(&s, &gone, &src.path, &[(FO, ZERO)]);
            expect(&r, 410, "fork before the retained data");
        }
        assert_eq!(first_next(&s, &src.path), (first, 5));
        let new = |tag: &str, shard, extra: &Headers, n: u64| {
            let path = path_on(prefix, tag, shard);
            let r = fork(&s, &path, &src.path, extra);
            expect(&r, 201, &format!("fork {path}"));
            assert_eq!(num(&r, "stream-record-next"), n, "{path}: 201");
            assert_eq!(first_next(&s, &path), (first, n), "{path}: HEAD");
            Tracked::new(path, JSON, Data::Json(values(first..n)))
        };
        let mut f = new("at3", 1, &[(FO, &mid)], 3);
        assert_eq!(range(&f.append(&s, 3).0), (3, 5), "continues at 3");
        let mut h = new("sub", 0, &[(FO, &mid), (SUB, "1")], 4);
        assert_eq!(range(&h.append(&s, 4).0), (4, 6));
        let mut g = f.fork(&s, "of-fork", 0, &[], f.data.len());
        assert_eq!(first_next(&s, &g.path), (first, 5), "fork of a fork");
        assert_eq!(range(&g.append(&s, 5).0), (5, 7));
        if first == 1 {
            // Forks copied what they inherit: the source's retention
            // moving on does not change them.
            let state = [("Content-Type", "application/x-state")];
            let snap = format!("{}/snapshot?record=4", src.path);
            must(&s, "PUT", &snap, &state, b"S4", 204);
            let retain = format!("{}/retention?record=4", src.path);
            must(&s, "PUT", &retain, &[], b"", 204);
            assert_eq!(first_next(&s, &src.path), (4, 5));
        }
        cases.extend([(f, first), (h, first), (g, first)]);
    }
    let mut before = Vec::new();
    for round in ["before SIGKILL", "after SIGKILL"] {
        for (i, (t, first)) in cases.iter_mut().enumerate() {
            let what = format!("{} {round}", t.path);
            let n = *first + t.data.len() as u64;
            assert_eq!(first_next(&s, &t.path), (*first, n), "{what}");
            // Record reads cross the fork point: records 1.. of the
            // source, then the fork's own.
            let Data::Json(want) = &t.data else {
                unreachable!()
            };
            let got = records_from(&s, &t.path, 1, n);
            assert_eq!(&got, &want[(1 - *first) as usize..], "{what}");
            if *first == 1 {
                let gone = format!("{}?record=0", t.path);
                must(&s, "GET", &gone, &[], b"", 410);
            }
            if round.starts_with("before") {
                before.push(view(&s, &t.path));
                continue;
            }
            assert_eq!(view(&s, &t.path), before[i], "{what}");
            assert_eq!(range(&t.append(&s, 9).0), (n, n + 2), "{what}");
            t.check(&s, "appended after SIGKILL");
        }
        s.kill();
        s.restart();
    }
}
