//! Restart tests of the real `rill` binary: everything a client can observe
//! (buckets, stream metadata, data, producer and Stream-Seq state, deletes,
//! ETags, offsets) is the same after a SIGKILL or SIGTERM restart. Offsets,
//! the `interval` fsync policy, re-sharding and the data-dir lock are in
//! `restart_durability.rs`.

mod common;
mod restart_helpers;

use std::thread;
use std::time::Duration;

use common::{Conn, Server, req};
use rill::clock::{format_rfc3339_ms, now_ms};
use rill::protocol::offset;

use restart_helpers::*;

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
