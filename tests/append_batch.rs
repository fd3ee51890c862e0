//! Append batch (extensions §4) against the real binary: frames are
//! independent appends acknowledged in order; request-level problems fail
//! the whole request; data reads back through ordinary GET.

mod common;

use common::batch::framed;
use common::{Server, req};
use serde_json::Value;

const BUCKET: &str = "batches";

fn setup(content_type: &str, stream: &str) -> Server {
    let s = Server::start(&["--cores", "2"]);
    assert_eq!(
        req(s.addr, "PUT", &format!("/{BUCKET}"), &[], b"").status,
        201
    );
    let r = req(
        s.addr,
        "PUT",
        &format!("/{BUCKET}/{stream}"),
        &[("Content-Type", content_type)],
        b"",
    );
    assert_eq!(r.status, 201);
    s
}

fn batch(s: &Server, stream: &str, headers: &[(&str, &str)], body: &[u8]) -> (u16, Value) {
    let r = req(
        s.addr,
        "POST",
        &format!("/{BUCKET}/{stream}/append-batch"),
        headers,
        body,
    );
    let json = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    (r.status, json)
}

#[test]
fn frames_are_independent_appends_acknowledged_in_order() {
    let s = setup("text/plain", "log");
    let (status, acks) = batch(
        &s,
        "log",
        &[("Content-Type", "text/plain")],
        &framed(&[b"abc", b"de", b"f"]),
    );
    assert_eq!(status, 200);
    let acks = acks.as_array().unwrap();
    assert_eq!(acks.len(), 3);
    let mut previous = String::new();
    for ack in acks {
        assert_eq!(ack["status"], 204);
        let next = ack["stream_next_offset"].as_str().unwrap().to_string();
        assert!(next > previous, "offsets advance frame by frame");
        previous = next;
    }
    let read = req(s.addr, "GET", &format!("/{BUCKET}/log"), &[], b"");
    assert_eq!(read.body, b"abcdef");
    // The last acknowledgement is exactly what a plain append reports.
    assert_eq!(read.header("stream-next-offset"), Some(previous.as_str()));
    // Reading from a frame's offset returns what followed it.
    let from = acks[0]["stream_next_offset"].as_str().unwrap();
    let rest = req(
        s.addr,
        "GET",
        &format!("/{BUCKET}/log?offset={from}"),
        &[],
        b"",
    );
    assert_eq!(rest.body, b"def");
}

#[test]
fn frame_level_failures_are_reported_inside_the_array() {
    let s = setup("application/json", "events");
    let body = framed(&[br#"{"a":1}"#, b"{not json", br#"[{"b":2},{"c":3}]"#, b"[]"]);
    let (status, acks) = batch(&s, "events", &[("Content-Type", "application/json")], &body);
    assert_eq!(status, 200);
    let statuses: Vec<i64> = acks
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["status"].as_i64().unwrap())
        .collect();
    assert_eq!(statuses, [204, 400, 204, 400]);
    assert!(acks[1]["error_code"].is_string() && acks[1]["error"].is_string());
    // §4.3: `error` is a human-readable detail, not an embedded JSON body.
    for failed in [&acks[1], &acks[3]] {
        let detail = failed["error"].as_str().unwrap();
        assert!(!detail.is_empty() && !detail.starts_with('{'), "{detail}");
    }
    // §4.3: the tail is known, so the failed frames report it: where the
    // frame before them left it.
    assert_eq!(acks[1]["stream_next_offset"], acks[0]["stream_next_offset"]);
    assert_eq!(acks[3]["stream_next_offset"], acks[2]["stream_next_offset"]);
    let read = req(s.addr, "GET", &format!("/{BUCKET}/events"), &[], b"");
    assert_eq!(read.body, b"{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n");
}

#[test]
fn closed_streams_fail_every_frame_with_stream_closed() {
    let s = setup("text/plain", "done");
    let close = [("Stream-Closed", "true")];
    assert_eq!(
        req(s.addr, "POST", &format!("/{BUCKET}/done"), &close, b"").status,
        204
    );
    let (status, acks) = batch(
        &s,
        "done",
        &[("Content-Type", "text/plain")],
        &framed(&[b"x", b"y"]),
    );
    assert_eq!(status, 200);
    for ack in acks.as_array().unwrap() {
        assert_eq!(
            (ack["status"].as_i64(), ack["stream_closed"].as_bool()),
            (Some(409), Some(true))
        );
        assert!(ack["stream_next_offset"].is_string() && ack["error_code"].is_string());
    }
    // PROTOCOL.md §5.2: closure outranks a content-type problem (another
    // type or a malformed one), as on a plain append: the whole request's
    // 409 says the stream is closed.
    for ct in ["application/octet-stream", "not a type"] {
        let target = format!("/{BUCKET}/done/append-batch");
        let r = req(
            s.addr,
            "POST",
            &target,
            &[("Content-Type", ct)],
            &framed(&[b"x"]),
        );
        assert_eq!((r.status, r.header("stream-closed")), (409, Some("true")));
        let tail = Some("0000000000000000_0000000000000000");
        assert_eq!(r.header("stream-next-offset"), tail, "{ct}");
    }
}

#[test]
fn a_content_type_that_differs_is_the_whole_requests_409() {
    // §4.1: the request Content-Type "MUST match the stream's configured
    // content type"; a valid one that does not is the base protocol's 409
    // (PROTOCOL.md §5.2), as on a plain append, and appends nothing.
    let s = setup("text/plain", "typed");
    let (status, body) = batch(
        &s,
        "typed",
        &[("Content-Type", "application/json")],
        &framed(&[b"1"]),
    );
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "content_type_mismatch");
    let tail = req(s.addr, "HEAD", &format!("/{BUCKET}/typed"), &[], b"");
    assert_eq!(
        tail.header("stream-next-offset"),
        Some(&*format!("{:016}_{:016}", 0, 0))
    );
}

#[test]
fn request_level_problems_fail_the_whole_request() {
    let s = setup("text/plain", "strict");
    let ok = framed(&[b"x"]);
    let text = ("Content-Type", "text/plain");
    assert_eq!(batch(&s, "strict", &[], &ok).0, 400, "missing Content-Type");
    assert_eq!(
        batch(&s, "strict", &[("Content-Type", "text")], &ok).0,
        400,
        "malformed Content-Type"
    );
    assert_eq!(
        batch(&s, "strict", &[text], &[0, 0, 0, 9, 1]).0,
        400,
        "truncated frame"
    );
    assert_eq!(
        batch(&s, "strict", &[text], &[0, 0, 0, 0]).0,
        400,
        "zero-length frame"
    );
    for (header, value) in [
        ("Stream-Closed", "true"),
        ("Producer-Id", "1"),
        ("Stream-Seq", "1"),
        ("Stream-Record-Match", "1"),
    ] {
        assert_eq!(
            batch(&s, "strict", &[text, (header, value)], &ok).0,
            400,
            "{header}"
        );
    }
    // Any other Stream-Closed value means not closing (PROTOCOL.md §5.2).
    let open = req(s.addr, "PUT", &format!("/{BUCKET}/open"), &[text], b"");
    assert_eq!(open.status, 201);
    let (status, acks) = batch(&s, "open", &[text, ("Stream-Closed", "false")], &ok);
    assert_eq!((status, acks[0]["status"].as_u64()), (200, Some(204)));
    let many: Vec<&[u8]> = vec![b"x"; 513];
    assert_eq!(batch(&s, "strict", &[text], &framed(&many)).0, 413);
    assert_eq!(batch(&s, "missing", &[text], &ok).0, 404);
    let r = req(s.addr, "GET", &format!("/{BUCKET}/strict"), &[], b"");
    assert_eq!(r.body, b"", "nothing of a rejected request was appended");
    let max: Vec<&[u8]> = vec![b"y"; 512];
    let (status, acks) = batch(&s, "strict", &[text], &framed(&max));
    assert_eq!((status, acks.as_array().unwrap().len()), (200, 512));
}
