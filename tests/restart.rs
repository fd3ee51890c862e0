//! Restart tests of the real `rill` binary: everything a client can observe
//! (buckets, stream metadata, data, producer and Stream-Seq state, deletes,
//! ETags, offsets) is the same after a SIGKILL or SIGTERM restart; the
//! `interval` fsync policy keeps what it acknowledged across a clean stop and
//! across a kill after the interval; a data dir is refused with another shard
//! count or while another server holds it.

mod common;

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use common::{Conn, Response, Server, enc, req};
use rill::clock::{format_rfc3339_ms, now_ms};
use rill::protocol::offset;

const TEXT: &str = "text/plain";
const OCTET: &str = "application/octet-stream";
const JSON: &str = "application/json";

// ---- helpers -------------------------------------------------------------------

#[derive(Clone, Copy, Debug)]
enum Restart {
    /// SIGKILL, then start (`Server::restart`).
    Kill,
    /// SIGTERM, wait for a clean exit (code 0), then start.
    Term,
}

fn restart(s: &mut Server, how: Restart) {
    stop(s, how);
    s.restart();
}

/// Stops the server without starting it again.
fn stop(s: &mut Server, how: Restart) {
    match how {
        Restart::Kill => s.kill(),
        Restart::Term => {
            let code = s.signal_and_wait(libc::SIGTERM, Duration::from_secs(10));
            assert_eq!(
                code,
                Some(0),
                "SIGTERM must stop the server cleanly\n--- stderr ---\n{}",
                s.stderr()
            );
        }
    }
}

fn start2(extra: &[&str]) -> Server {
    let mut args = vec!["--cores", "2"];
    args.extend_from_slice(extra);
    Server::start(&args)
}

fn next_offset(r: &Response) -> String {
    r.header("stream-next-offset")
        .unwrap_or_else(|| panic!("no Stream-Next-Offset in {} {:?}", r.status, r.headers))
        .to_string()
}

fn expect(r: &Response, status: u16, what: &str) {
    assert_eq!(r.status, status, "{what}: {:?} {}", r.headers, r.text());
}

fn put(s: &Server, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
    let r = req(s.addr, "PUT", path, headers, body);
    expect(&r, 201, &format!("PUT {path}"));
    r
}

fn post(s: &Server, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
    req(s.addr, "POST", path, headers, body)
}

/// POST that must be a 204; returns the new tail.
fn append(c: &mut Conn, path: &str, ct: &str, body: &[u8]) -> String {
    let r = c.request("POST", path, &[("Content-Type", ct)], body);
    expect(&r, 204, &format!("append to {path}"));
    next_offset(&r)
}

fn head(s: &Server, path: &str) -> Response {
    req(s.addr, "HEAD", path, &[], b"")
}

fn get(s: &Server, path: &str, offset: &str) -> Response {
    req(
        s.addr,
        "GET",
        &format!("{path}?offset={}", enc(offset)),
        &[],
        b"",
    )
}

/// Everything from `offset` to the tail, paging with Stream-Next-Offset
/// (byte streams and bucketed reads only: v1 JSON pages are arrays).
fn read_from(s: &Server, path: &str, offset: &str) -> Vec<u8> {
    let mut data = Vec::new();
    let mut offset = offset.to_string();
    loop {
        let r = get(s, path, &offset);
        expect(&r, 200, &format!("GET {path} at {offset}"));
        data.extend_from_slice(&r.body);
        let next = next_offset(&r);
        if r.header("stream-up-to-date") == Some("true") || next == offset {
            return data;
        }
        offset = next;
    }
}

fn producer_post(s: &Server, path: &str, id: &str, epoch: u64, seq: u64, body: &[u8]) -> Response {
    let (epoch, seq) = (epoch.to_string(), seq.to_string());
    post(
        s,
        path,
        &[
            ("Content-Type", TEXT),
            ("Producer-Id", id),
            ("Producer-Epoch", &epoch),
            ("Producer-Seq", &seq),
        ],
        body,
    )
}

fn seq_post(s: &Server, path: &str, seq: &str, body: &[u8]) -> Response {
    post(
        s,
        path,
        &[("Content-Type", TEXT), ("Stream-Seq", seq)],
        body,
    )
}

/// The binary under test (as in `common`).
fn binary() -> PathBuf {
    match std::env::var_os("RILL_TEST_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_rill")),
    }
}

fn free_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().unwrap()
}

/// Runs `rill serve` on `data_dir` with `args` on a fresh port and waits up
/// to `wait` for it to exit. Returns the exit code (`None`: still running
/// after `wait`, then killed) and everything it printed.
fn run_rill(data_dir: &Path, args: &[&str], wait: Duration) -> (Option<i32>, String) {
    let mut child = Command::new(binary())
        .arg("serve")
        .arg("--listen")
        .arg(free_addr().to_string())
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--segment-bytes", "4194304", "--max-body-bytes", "2097152"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rill");
    let deadline = Instant::now() + wait;
    let mut code = None;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            code = Some(status.code().unwrap_or(-1));
            break;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("wait_with_output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (code, text)
}

// ---- 1. everything survives a restart -------------------------------------------

const KEEP: &str = "keepers";
const EPHEMERAL: &str = "ephemeral";
const GONE_BUCKET: &str = "gone-bucket";

const V1_TEXT: &str = "/v1/stream/text";
const V1_TEXT_CT: &str = "text/plain; charset=utf-8";
const B_TEXT: &str = "/keepers/notes";
const B_TEXT_CT: &str = "text/markdown";
const FAR_EXPIRY: &str = "2099-01-02T03:04:05.678Z";
const V1_CLOSED: &str = "/v1/stream/closed";
const B_CLOSED: &str = "/keepers/closed";
const V1_JSON: &str = "/v1/stream/json";
const B_JSON: &str = "/keepers/events";
const V1_BIN: &str = "/v1/stream/bin";
const B_BIN: &str = "/keepers/blob";
const V1_PROD: &str = "/v1/stream/producer";
const B_SEQ: &str = "/keepers/seq";
const V1_DELETED: &str = "/v1/stream/deleted";
const B_DELETED: &str = "/keepers/deleted";
const V1_EXPIRING: &str = "/v1/stream/expiring";
const B_EXPIRING: &str = "/ephemeral/expiring";

/// Streams whose observable state the restart must not change.
const SNAPSHOT_PATHS: [&str; 10] = [
    V1_TEXT, B_TEXT, V1_CLOSED, B_CLOSED, V1_JSON, B_JSON, V1_BIN, B_BIN, V1_PROD, B_SEQ,
];

fn all_bytes() -> Vec<u8> {
    let mut v: Vec<u8> = (0..=255u8).collect();
    v.extend((0..=255u8).rev());
    v.extend_from_slice(b"\r\n\r\n\0\0\n");
    v
}

/// What HEAD and a full GET show of one stream.
#[derive(Debug, PartialEq)]
struct View {
    path: &'static str,
    head: Vec<(String, Option<String>)>,
    body: Vec<u8>,
    etag: String,
    body_content_type: Option<String>,
}

fn view(s: &Server, path: &'static str) -> View {
    let h = head(s, path);
    expect(&h, 200, &format!("HEAD {path}"));
    let fields = [
        "content-type",
        "stream-ttl",
        "stream-expires-at",
        "stream-closed",
        "stream-next-offset",
        "etag",
    ];
    let head = fields
        .iter()
        .map(|f| (f.to_string(), h.header(f).map(str::to_string)))
        .collect();
    let r = get(s, path, "-1");
    expect(&r, 200, &format!("GET {path}"));
    assert_eq!(
        r.header("stream-up-to-date"),
        Some("true"),
        "{path}: a full read of a small stream must reach the tail"
    );
    View {
        path,
        head,
        body: r.body.clone(),
        etag: r.header("etag").expect("ETag on a full read").to_string(),
        body_content_type: r.header("content-type").map(str::to_string),
    }
}

fn snapshot(s: &Server) -> Vec<View> {
    SNAPSHOT_PATHS.iter().map(|p| view(s, p)).collect()
}

fn bucket_streams(s: &Server, bucket: &str) -> serde_json::Value {
    let r = req(s.addr, "GET", &format!("/{bucket}"), &[], b"");
    expect(&r, 200, &format!("GET /{bucket}"));
    let v: serde_json::Value = serde_json::from_slice(&r.body).expect("bucket JSON");
    assert_eq!(v["bucket_id"], bucket, "{v}");
    v["streams"].clone()
}

struct Populated {
    /// The first JSON message's end on the v1 JSON stream.
    json_first_end: u64,
    expiring_at_ms: u64,
}

fn populate(s: &Server) -> Populated {
    for b in [KEEP, EPHEMERAL, GONE_BUCKET] {
        put(s, &format!("/{b}"), &[], b"");
    }
    expect(
        &req(s.addr, "DELETE", &format!("/{GONE_BUCKET}"), &[], b""),
        204,
        "DELETE empty bucket",
    );
    let mut c = Conn::open(s.addr);

    put(
        s,
        V1_TEXT,
        &[("Content-Type", V1_TEXT_CT), ("Stream-TTL", "3600")],
        b"hello ",
    );
    append(&mut c, V1_TEXT, V1_TEXT_CT, "wörld\n".as_bytes());
    put(
        s,
        B_TEXT,
        &[
            ("Content-Type", B_TEXT_CT),
            ("Stream-Expires-At", FAR_EXPIRY),
        ],
        b"# notes\n",
    );
    append(&mut c, B_TEXT, B_TEXT_CT, b"- one\n");

    for path in [V1_CLOSED, B_CLOSED] {
        put(s, path, &[("Content-Type", TEXT)], b"before close;");
        let r = post(
            s,
            path,
            &[("Content-Type", TEXT), ("Stream-Closed", "true")],
            b"last words",
        );
        expect(&r, 204, &format!("close {path}"));
    }

    let r = put(s, V1_JSON, &[("Content-Type", JSON)], br#"{"a":1}"#);
    let json_first_end = offset::parse_token(&next_offset(&r)).expect("offset token");
    append(&mut c, V1_JSON, JSON, br#"[{"b":"x\ny"},{"c":[1,2,3]}]"#);
    append(&mut c, V1_JSON, JSON, br#""plain string""#);
    put(
        s,
        B_JSON,
        &[("Content-Type", JSON)],
        br#"[{"n":1},{"n":2}]"#,
    );
    append(&mut c, B_JSON, JSON, br#"{"n":3,"s":"\u00e9"}"#);

    put(s, V1_BIN, &[("Content-Type", OCTET)], &all_bytes());
    append(&mut c, V1_BIN, OCTET, &[0, 255, 0, 13, 10]);
    put(s, B_BIN, &[("Content-Type", OCTET)], b"");
    append(&mut c, B_BIN, OCTET, &all_bytes()[256..]);
    append(&mut c, B_BIN, OCTET, &all_bytes()[..256]);

    put(s, V1_PROD, &[("Content-Type", TEXT)], b"");
    for seq in 0..3 {
        let r = producer_post(s, V1_PROD, "p1", 1, seq, format!("m{seq};").as_bytes());
        expect(&r, 200, &format!("producer seq {seq}"));
    }

    put(s, B_SEQ, &[("Content-Type", TEXT)], b"");
    expect(
        &seq_post(s, B_SEQ, "0003", b"three;"),
        204,
        "Stream-Seq 0003",
    );
    expect(
        &seq_post(s, B_SEQ, "0005", b"five;"),
        204,
        "Stream-Seq 0005",
    );

    for path in [V1_DELETED, B_DELETED] {
        put(s, path, &[("Content-Type", TEXT)], b"doomed data");
        append(&mut c, path, TEXT, b" more doomed data");
        expect(
            &req(s.addr, "DELETE", path, &[], b""),
            204,
            &format!("DELETE {path}"),
        );
        expect(&head(s, path), 404, &format!("HEAD deleted {path}"));
    }

    // Last, so that little time passes before the server stops.
    let expiring_at_ms = now_ms() + 1500;
    let at = format_rfc3339_ms(expiring_at_ms);
    for path in [V1_EXPIRING, B_EXPIRING] {
        put(
            s,
            path,
            &[("Content-Type", TEXT), ("Stream-Expires-At", &at)],
            b"short-lived",
        );
        let h = head(s, path);
        expect(&h, 200, &format!("HEAD {path} before it expires"));
        assert_eq!(h.header("stream-expires-at"), Some(at.as_str()));
    }
    Populated {
        json_first_end,
        expiring_at_ms,
    }
}

/// Checks that do not change the server's state.
fn check_unchanged(s: &Server, before: &[View], keep_count: &serde_json::Value, p: &Populated) {
    let after = snapshot(s);
    for (b, a) in before.iter().zip(&after) {
        assert_eq!(a, b, "{} changed across the restart", b.path);
    }

    // Buckets.
    assert_eq!(
        &bucket_streams(s, KEEP),
        keep_count,
        "stream count of {KEEP}"
    );
    bucket_streams(s, EPHEMERAL);
    expect(
        &req(s.addr, "GET", &format!("/{GONE_BUCKET}"), &[], b""),
        404,
        "deleted bucket",
    );

    // Metadata, checked against what was sent (not only against before).
    let h = head(s, V1_TEXT);
    assert_eq!(
        h.header("content-type"),
        Some(V1_TEXT_CT),
        "{:?}",
        h.headers
    );
    assert_eq!(h.header("stream-ttl"), Some("3600"), "{:?}", h.headers);
    let h = head(s, B_TEXT);
    assert_eq!(h.header("content-type"), Some(B_TEXT_CT), "{:?}", h.headers);
    assert_eq!(
        h.header("stream-expires-at"),
        Some(FAR_EXPIRY),
        "{:?}",
        h.headers
    );
    for path in [V1_JSON, B_JSON] {
        assert_eq!(head(s, path).header("content-type"), Some(JSON), "{path}");
    }
    for path in [V1_BIN, B_BIN] {
        assert_eq!(head(s, path).header("content-type"), Some(OCTET), "{path}");
    }

    // Expired while the server was down.
    assert!(now_ms() > p.expiring_at_ms);
    for path in [V1_EXPIRING, B_EXPIRING] {
        expect(&head(s, path), 404, &format!("HEAD {path} after expiry"));
        expect(
            &get(s, path, "-1"),
            404,
            &format!("GET {path} after expiry"),
        );
    }

    // Closed streams.
    for path in [V1_CLOSED, B_CLOSED] {
        let h = head(s, path);
        assert_eq!(h.header("stream-closed"), Some("true"), "{path}");
        let r = post(s, path, &[("Content-Type", TEXT)], b"late");
        expect(&r, 409, &format!("append to closed {path}"));
        assert_eq!(read_from(s, path, "-1"), b"before close;last words");
    }

    // Data, against what was written.
    let v1_json = get(s, V1_JSON, "-1");
    let value: serde_json::Value = serde_json::from_slice(&v1_json.body).expect("v1 JSON array");
    assert_eq!(
        value,
        serde_json::json!([{"a":1},{"b":"x\ny"},{"c":[1,2,3]},"plain string"])
    );
    let mid = offset::format(p.json_first_end - 1);
    expect(&get(s, V1_JSON, &mid), 400, "v1 JSON read mid-message");
    let ok = get(s, V1_JSON, &offset::format(p.json_first_end));
    expect(&ok, 200, "v1 JSON read at a boundary");
    let rest: serde_json::Value = serde_json::from_slice(&ok.body).unwrap();
    assert_eq!(rest.as_array().map(Vec::len), Some(3), "{rest}");
    let nd = get(s, B_JSON, "-1");
    assert_eq!(
        nd.header("content-type"),
        Some("application/x-ndjson"),
        "{:?}",
        nd.headers
    );
    let lines: Vec<serde_json::Value> = nd
        .text()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines,
        vec![
            serde_json::json!({"n":1}),
            serde_json::json!({"n":2}),
            serde_json::json!({"n":3,"s":"é"})
        ]
    );
    let mut bin = all_bytes();
    bin.extend_from_slice(&[0, 255, 0, 13, 10]);
    assert_eq!(read_from(s, V1_BIN, "-1"), bin, "v1 binary data");
    let mut blob = all_bytes()[256..].to_vec();
    blob.extend_from_slice(&all_bytes()[..256]);
    assert_eq!(read_from(s, B_BIN, "-1"), blob, "bucketed binary data");

    // Stable validators.
    for b in before {
        let r = req(
            s.addr,
            "GET",
            &format!("{}?offset=-1", b.path),
            &[("If-None-Match", &b.etag)],
            b"",
        );
        expect(&r, 304, &format!("If-None-Match old ETag on {}", b.path));
    }

    // Deleted streams stay deleted.
    for path in [V1_DELETED, B_DELETED] {
        expect(&head(s, path), 404, &format!("HEAD deleted {path}"));
        expect(&get(s, path, "-1"), 404, &format!("GET deleted {path}"));
    }
}

/// Checks that write (after the first restart).
fn check_mutations(s: &Server) {
    // Producer state: duplicate, next, stale epoch, gap.
    let before = read_from(s, V1_PROD, "-1");
    assert_eq!(before, b"m0;m1;m2;");
    let r = producer_post(s, V1_PROD, "p1", 1, 2, b"m2;");
    expect(&r, 204, "retry of the last producer write");
    assert_eq!(read_from(s, V1_PROD, "-1"), before, "duplicate appended");
    expect(
        &producer_post(s, V1_PROD, "p1", 1, 3, b"m3;"),
        200,
        "producer seq+1",
    );
    expect(
        &producer_post(s, V1_PROD, "p1", 0, 4, b"stale"),
        403,
        "old producer epoch",
    );
    let r = producer_post(s, V1_PROD, "p1", 1, 5, b"gap");
    expect(&r, 409, "producer seq gap");
    assert_eq!(
        r.header("producer-expected-seq"),
        Some("4"),
        "{:?}",
        r.headers
    );
    assert_eq!(read_from(s, V1_PROD, "-1"), b"m0;m1;m2;m3;");

    // Stream-Seq.
    expect(&seq_post(s, B_SEQ, "0004", b"x"), 409, "lower Stream-Seq");
    expect(&seq_post(s, B_SEQ, "0005", b"x"), 409, "equal Stream-Seq");
    expect(
        &seq_post(s, B_SEQ, "0006", b"six;"),
        204,
        "higher Stream-Seq",
    );
    assert_eq!(read_from(s, B_SEQ, "-1"), b"three;five;six;");

    // Deleted streams can be re-created, without their old data.
    for path in [V1_DELETED, B_DELETED] {
        put(s, path, &[("Content-Type", OCTET)], b"");
        assert_eq!(read_from(s, path, "-1"), b"", "{path} re-created");
        post(s, path, &[("Content-Type", OCTET)], b"reborn");
    }
}

/// After the second restart: what `check_mutations` did is durable too.
fn check_mutations_survived(s: &Server) {
    assert_eq!(read_from(s, V1_PROD, "-1"), b"m0;m1;m2;m3;");
    expect(
        &producer_post(s, V1_PROD, "p1", 1, 3, b"m3;"),
        204,
        "retry of seq 3 after the second restart",
    );
    expect(
        &producer_post(s, V1_PROD, "p1", 1, 4, b"m4;"),
        200,
        "producer seq 4",
    );
    expect(&seq_post(s, B_SEQ, "0006", b"x"), 409, "equal Stream-Seq");
    expect(
        &seq_post(s, B_SEQ, "0007", b"seven;"),
        204,
        "Stream-Seq 0007",
    );
    for path in [V1_DELETED, B_DELETED] {
        let h = head(s, path);
        expect(&h, 200, &format!("HEAD re-created {path}"));
        assert_eq!(h.header("content-type"), Some(OCTET));
        assert_eq!(read_from(s, path, "-1"), b"reborn", "{path}");
    }
}

fn everything_survives(first: Restart, second: Restart) {
    let mut s = start2(&[]);
    let p = populate(&s);
    let before = snapshot(&s);
    let keep_count = bucket_streams(&s, KEEP);

    // The expiring streams' deadline passes while the server is down.
    stop(&mut s, first);
    let wait = p.expiring_at_ms.saturating_sub(now_ms()) + 100;
    thread::sleep(Duration::from_millis(wait));
    s.restart();
    check_unchanged(&s, &before, &keep_count, &p);
    check_mutations(&s);

    let snapshot_unmutated: Vec<View> = snapshot(&s)
        .into_iter()
        .filter(|v| v.path != V1_PROD && v.path != B_SEQ)
        .collect();
    restart(&mut s, second);
    for b in &snapshot_unmutated {
        assert_eq!(&view(&s, b.path), b, "{} changed across restart 2", b.path);
    }
    check_mutations_survived(&s);
}

#[test]
fn everything_survives_sigkill_then_sigterm_restart() {
    everything_survives(Restart::Kill, Restart::Term);
}

#[test]
fn everything_survives_sigterm_then_sigkill_restart() {
    everything_survives(Restart::Term, Restart::Kill);
}

// ---- 2. offsets are stable -------------------------------------------------------

struct Tracked {
    path: String,
    ct: &'static str,
    content: Vec<u8>,
    /// Every offset the server returned, with the content length it marks.
    offsets: Vec<(String, usize)>,
}

fn chunk(stream: usize, i: usize) -> Vec<u8> {
    let len = 1 + (i * 7919 + stream * 104_729) % 12_000;
    let mut v = format!("<s{stream} i{i}>").into_bytes();
    v.extend((0..=255u8).cycle().skip(i + stream).take(len));
    v
}

fn check_offsets(s: &Server, streams: &[Tracked]) {
    for t in streams {
        for (off, pos) in &t.offsets {
            let got = read_from(s, &t.path, off);
            assert!(
                got == t.content[*pos..],
                "{}: reading from {off} gave {} bytes, expected the {} bytes after position {pos}",
                t.path,
                got.len(),
                t.content.len() - pos
            );
        }
    }
}

fn append_round(s: &Server, streams: &mut [Tracked], rounds: std::ops::Range<usize>) {
    let mut c = Conn::open(s.addr);
    for i in rounds {
        for (n, t) in streams.iter_mut().enumerate() {
            let body = chunk(n, i);
            let next = append(&mut c, &t.path, t.ct, &body);
            t.content.extend_from_slice(&body);
            t.offsets.push((next, t.content.len()));
        }
    }
}

#[test]
fn offsets_read_back_the_same_bytes_after_restart() {
    // Small segments so the logs roll over several segment files.
    let mut s = start2(&["--max-body-bytes", "65536", "--segment-bytes", "131072"]);
    put(&s, "/offsets", &[], b"");
    let mut streams: Vec<Tracked> = (0..6)
        .map(|n| {
            let (path, ct) = if n % 3 == 2 {
                (format!("/offsets/s{n}"), TEXT)
            } else {
                (format!("/v1/stream/offsets-{n}"), OCTET)
            };
            let r = put(&s, &path, &[("Content-Type", ct)], b"");
            Tracked {
                path,
                ct,
                content: Vec::new(),
                offsets: vec![(next_offset(&r), 0)],
            }
        })
        .collect();
    append_round(&s, &mut streams, 0..20);
    let before: Vec<Vec<u8>> = streams
        .iter()
        .map(|t| read_from(&s, &t.path, "-1"))
        .collect();
    for (t, b) in streams.iter().zip(&before) {
        assert_eq!(&t.content, b, "{} before the restart", t.path);
    }

    restart(&mut s, Restart::Kill);
    check_offsets(&s, &streams);
    // The tail offset is still the tail, and appends continue from it.
    for t in &streams {
        let r = get(&s, &t.path, &t.offsets.last().unwrap().0);
        expect(&r, 200, "read at the tail");
        assert!(r.body.is_empty(), "{}: data past the tail", t.path);
        assert_eq!(r.header("stream-up-to-date"), Some("true"));
        assert_eq!(next_offset(&r), t.offsets.last().unwrap().0);
    }
    append_round(&s, &mut streams, 20..23);

    restart(&mut s, Restart::Term);
    check_offsets(&s, &streams);
}

// ---- 3. fsync interval -------------------------------------------------------------

#[test]
fn fsync_interval_keeps_acknowledged_data_across_restarts() {
    let mut s = start2(&["--fsync", "interval:200"]);
    put(&s, "/lazy", &[], b"");
    let paths = [
        "/v1/stream/lazy-0",
        "/v1/stream/lazy-1",
        "/lazy/s0",
        "/lazy/s1",
    ];
    let mut content = vec![Vec::new(); paths.len()];
    for p in paths {
        put(&s, p, &[("Content-Type", OCTET)], b"");
    }
    let write = |s: &Server, content: &mut Vec<Vec<u8>>, round: usize| {
        let mut c = Conn::open(s.addr);
        for i in 0..40 {
            for (n, p) in paths.iter().enumerate() {
                let body = chunk(n, round * 1000 + i);
                append(&mut c, p, OCTET, &body[..body.len().min(3000)]);
                content[n].extend_from_slice(&body[..body.len().min(3000)]);
            }
        }
    };
    let verify = |s: &Server, content: &[Vec<u8>], what: &str| {
        for (p, want) in paths.iter().zip(content) {
            let got = read_from(s, p, "-1");
            assert!(
                &got == want,
                "{p} after {what}: {} bytes, {} acknowledged",
                got.len(),
                want.len()
            );
        }
    };

    write(&s, &mut content, 0);
    restart(&mut s, Restart::Term);
    verify(&s, &content, "a SIGTERM restart");

    write(&s, &mut content, 1);
    thread::sleep(Duration::from_millis(500));
    restart(&mut s, Restart::Kill);
    verify(&s, &content, "500 ms then a SIGKILL restart");
}

// ---- 4. another shard count ------------------------------------------------------

#[test]
fn other_core_counts_reshard_and_keep_every_stream() {
    let mut s = start2(&[]);
    put(&s, "/shards", &[], b"");
    let paths: Vec<String> = (0..12)
        .map(|i| match i % 2 {
            0 => format!("/v1/stream/shard-{i}"),
            _ => format!("/shards/s{i}"),
        })
        .collect();
    let mut expected: Vec<Vec<u8>> = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        put(
            &s,
            p,
            &[("Content-Type", TEXT)],
            format!("data {i}").as_bytes(),
        );
        expected.push(format!("data {i}").into_bytes());
    }
    // Each core count in turn: every stream readable and writable, the
    // bucket still there; SIGTERM and SIGKILL both before re-sharding.
    for (round, cores) in ["1", "3", "2", "4", "2"].iter().enumerate() {
        match round % 2 {
            0 => stop(&mut s, Restart::Term),
            _ => s.kill(),
        }
        s.restart_with(&["--cores", cores]);
        assert!(
            s.stderr().contains(&format!("shards={cores}")),
            "{}",
            s.stderr()
        );
        assert_eq!(
            req(s.addr, "GET", "/shards", &[], b"").status,
            200,
            "bucket lost at --cores {cores}"
        );
        for (i, p) in paths.iter().enumerate() {
            assert_eq!(
                read_from(&s, p, "-1"),
                expected[i],
                "{p} at --cores {cores}"
            );
            let mut c = Conn::open(s.addr);
            let more = format!(" +{cores}");
            append(&mut c, p, TEXT, more.as_bytes());
            expected[i].extend_from_slice(more.as_bytes());
            assert_eq!(
                read_from(&s, p, "-1"),
                expected[i],
                "{p} after appending at --cores {cores}"
            );
        }
    }
}

// ---- 5. one server per data dir --------------------------------------------------

#[test]
fn second_server_on_the_same_data_dir_is_refused() {
    let s = start2(&[]);
    put(&s, "/v1/stream/mine", &[("Content-Type", TEXT)], b"first");
    let (code, out) = run_rill(&s.data_dir, &["--cores", "2"], Duration::from_secs(5));
    assert!(
        code.is_some_and(|c| c != 0),
        "a second server on the same data dir must exit nonzero, got {code:?}: {out}"
    );
    assert!(
        out.contains("in use"),
        "the message must say the data dir is in use: {out}"
    );
    // The first server is unaffected.
    let mut c = Conn::open(s.addr);
    append(&mut c, "/v1/stream/mine", TEXT, b" second");
    assert_eq!(read_from(&s, "/v1/stream/mine", "-1"), b"first second");
}
