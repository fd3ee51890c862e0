//! Stream attributes (extensions §5) against the real binary, including
//! their survival across a restart and their independence from reads.

mod common;

use common::{Server, req};
use serde_json::{Value, json};

const BUCKET: &str = "attrs";

fn json_of(r: &common::Response) -> Value {
    serde_json::from_slice(&r.body).unwrap()
}

#[test]
fn create_read_replace_and_restart() {
    let mut s = Server::start(&["--cores", "2"]);
    assert_eq!(
        req(s.addr, "PUT", &format!("/{BUCKET}"), &[], b"").status,
        201
    );
    let path = format!("/{BUCKET}/session");
    let attrs = r#"{"title":"Support session","metadata":{"purpose":"support"},"ignored":1}"#;
    let create = [("Content-Type", "text/plain"), ("Stream-Attrs", attrs)];
    assert_eq!(req(s.addr, "PUT", &path, &create, b"hello").status, 201);
    // Idempotent create compares attributes (unknown fields dropped first).
    let same = r#"{"metadata":{"purpose":"support"},"title":"Support session"}"#;
    assert_eq!(
        req(
            s.addr,
            "PUT",
            &path,
            &[("Content-Type", "text/plain"), ("Stream-Attrs", same)],
            b""
        )
        .status,
        200
    );
    assert_eq!(
        req(s.addr, "PUT", &path, &[("Content-Type", "text/plain")], b"").status,
        409
    );
    let read = req(s.addr, "GET", &format!("{path}/attrs"), &[], b"");
    assert_eq!(read.status, 200);
    assert_eq!(read.header("content-type"), Some("application/json"));
    assert_eq!(
        json_of(&read),
        json!({"title": "Support session", "metadata": {"purpose": "support"}})
    );
    // Replacing attributes changes neither offsets, ETag nor content.
    let before = req(s.addr, "GET", &path, &[], b"");
    let json_ct = [("Content-Type", "application/json")];
    let renamed = br#"{"title":"Renamed","metadata":{"purpose":"debugging"}}"#;
    assert_eq!(
        req(s.addr, "PUT", &format!("{path}/attrs"), &json_ct, renamed).status,
        204
    );
    let after = req(s.addr, "GET", &path, &[], b"");
    assert_eq!(
        (after.body.clone(), after.header("etag")),
        (before.body.clone(), before.header("etag"))
    );
    assert_eq!(
        after.header("stream-next-offset"),
        before.header("stream-next-offset")
    );
    // Allowed on a closed stream; survives a restart.
    assert_eq!(
        req(s.addr, "POST", &path, &[("Stream-Closed", "true")], b"").status,
        204
    );
    let closed_update = br#"{"title":"Closed session"}"#;
    assert_eq!(
        req(
            s.addr,
            "PUT",
            &format!("{path}/attrs"),
            &json_ct,
            closed_update
        )
        .status,
        204
    );
    s.restart();
    let read = req(s.addr, "GET", &format!("{path}/attrs"), &[], b"");
    assert_eq!(json_of(&read), json!({"title": "Closed session"}));
    // {} clears them.
    assert_eq!(
        req(s.addr, "PUT", &format!("{path}/attrs"), &json_ct, b"{}").status,
        204
    );
    assert_eq!(
        req(s.addr, "GET", &format!("{path}/attrs"), &[], b"").body,
        b"{}"
    );
}

#[test]
fn invalid_attributes_and_missing_streams() {
    let s = Server::start(&["--cores", "1"]);
    assert_eq!(
        req(s.addr, "PUT", &format!("/{BUCKET}"), &[], b"").status,
        201
    );
    let path = format!("/{BUCKET}/plain");
    assert_eq!(
        req(s.addr, "PUT", &path, &[("Content-Type", "text/plain")], b"").status,
        201
    );
    assert_eq!(
        req(s.addr, "GET", &format!("{path}/attrs"), &[], b"").body,
        b"{}"
    );
    let attrs = format!("{path}/attrs");
    let json_ct = [("Content-Type", "application/json")];
    assert_eq!(
        req(s.addr, "PUT", &attrs, &[], b"{}").status,
        400,
        "missing Content-Type"
    );
    assert_eq!(
        req(
            s.addr,
            "PUT",
            &attrs,
            &[("Content-Type", "text/plain")],
            b"{}"
        )
        .status,
        400
    );
    for bad in [&b"[1]"[..], b"{", br#"{"title":5}"#, br#"{"metadata":"x"}"#] {
        let r = req(s.addr, "PUT", &attrs, &json_ct, bad);
        assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(bad));
        assert!(json_of(&r)["error"]["code"].is_string());
    }
    let big = format!(r#"{{"metadata":{{"blob":"{}"}}}}"#, "x".repeat(17 << 10));
    assert_eq!(
        req(s.addr, "PUT", &attrs, &json_ct, big.as_bytes()).status,
        400
    );
    // §5.1: over 16 KiB is 400, also in the Stream-Attrs header (the
    // default head limit leaves room for a full-size attribute header).
    let big_header = [
        ("Content-Type", "text/plain"),
        ("Stream-Attrs", big.as_str()),
    ];
    let r = req(s.addr, "PUT", &format!("/{BUCKET}/big"), &big_header, b"");
    assert_eq!(r.status, 400, "{}", r.text());
    let full = format!(
        r#"{{"metadata":{{"blob":"{}"}}}}"#,
        "x".repeat((16 << 10) - 24)
    );
    assert_eq!(full.len(), 16 << 10);
    let full_header = [
        ("Content-Type", "text/plain"),
        ("Stream-Attrs", full.as_str()),
    ];
    let r = req(s.addr, "PUT", &format!("/{BUCKET}/full"), &full_header, b"");
    assert_eq!(r.status, 201, "{}", r.text());
    let header = [("Content-Type", "text/plain"), ("Stream-Attrs", "not json")];
    assert_eq!(
        req(s.addr, "PUT", &format!("/{BUCKET}/other"), &header, b"").status,
        400
    );
    assert_eq!(
        req(s.addr, "GET", &format!("/{BUCKET}/missing/attrs"), &[], b"").status,
        404
    );
    assert_eq!(
        req(
            s.addr,
            "PUT",
            &format!("/{BUCKET}/missing/attrs"),
            &json_ct,
            b"{}"
        )
        .status,
        404
    );
}
