//! Where the bucketed surface's base protocol (the text tonbo-io/ursula
//! mirrors, which the extensions build on) asks more than the upstream one:
//! `stream-data-content-type` on every SSE response (its §5.8), the
//! `consistency` read parameter (its §5.6); and, on both surfaces, the
//! final SSE control event of a closed stream saying `upToDate` too, and
//! the connection closing after it when the stream was closed at the start.

mod common;

use std::time::Duration;

use common::sse::Sse;
use common::{Server, req};

const WAIT: Duration = Duration::from_secs(5);

fn create(s: &Server, path: &str, content_type: &str, body: &[u8]) {
    let r = req(s.addr, "PUT", path, &[("Content-Type", content_type)], body);
    assert_eq!(r.status, 201, "create {path}: {}", r.text());
}

fn server_with_bucket() -> Server {
    let s = Server::start(&["--cores", "2", "--long-poll-timeout-ms", "500"]);
    assert_eq!(req(s.addr, "PUT", "/dialect", &[], b"").status, 201);
    s
}

#[test]
fn every_bucketed_sse_response_names_its_data_type() {
    let s = server_with_bucket();
    for (name, content_type, data_type, base64) in [
        ("text", "text/plain", "text/plain", false),
        (
            "csv",
            "text/csv; charset=utf-8",
            "text/csv; charset=utf-8",
            false,
        ),
        ("json", "application/json", "application/x-ndjson", false),
        (
            "bin",
            "application/octet-stream",
            "application/octet-stream",
            true,
        ),
    ] {
        let path = format!("/dialect/{name}");
        create(&s, &path, content_type, b"");
        let sse = Sse::open(s.addr, &format!("{path}?offset=-1&live=sse"));
        assert_eq!(sse.head.status, 200, "{name}");
        let header = |h: &str| sse.head.header(h).map(str::to_string);
        assert_eq!(
            header("stream-data-content-type").as_deref(),
            Some(data_type),
            "{name}"
        );
        let encoding = header("stream-sse-data-encoding");
        assert_eq!(encoding.as_deref(), base64.then_some("base64"), "{name}");
    }
}

#[test]
fn consistency_is_local_or_leader_and_leader_is_for_catch_up_only() {
    let s = server_with_bucket();
    create(&s, "/dialect/c", "text/plain", b"abc");
    let status = |query: &str| req(s.addr, "GET", &format!("/dialect/c?{query}"), &[], b"").status;
    assert_eq!(status("offset=-1&consistency=local"), 200);
    assert_eq!(status("offset=-1&consistency=leader"), 200);
    assert_eq!(status("offset=-1&live=long-poll&consistency=local"), 200);
    assert_eq!(status("offset=-1&live=long-poll&consistency=leader"), 400);
    assert_eq!(status("offset=-1&live=sse&consistency=leader"), 400);
    assert_eq!(status("offset=-1&consistency=eventual"), 400);
    assert_eq!(
        status("offset=-1&consistency=local&consistency=leader"),
        400
    );
    create(&s, "/v1/stream/dialect-c", "text/plain", b"abc");
    let v1 = req(
        s.addr,
        "GET",
        "/v1/stream/dialect-c?consistency=eventual",
        &[],
        b"",
    );
    assert_eq!(
        v1.status, 200,
        "the upstream surface ignores unknown parameters"
    );
}

#[test]
fn a_closed_stream_ends_sse_with_up_to_date_and_closed() {
    let s = server_with_bucket();
    for path in ["/dialect/closed", "/v1/stream/dialect-closed"] {
        create(&s, path, "text/plain", b"last");
        let close = req(s.addr, "POST", path, &[("Stream-Closed", "true")], b"");
        assert_eq!(close.status, 204, "{}", close.text());
        for offset in ["now", "-1"] {
            let mut sse = Sse::open(s.addr, &format!("{path}?offset={offset}&live=sse"));
            let control = loop {
                let event = sse.event(WAIT);
                if event.name == "control" {
                    break event.json();
                }
            };
            assert_eq!(control["streamClosed"], true, "{path} {offset}: {control}");
            assert_eq!(control["upToDate"], true, "{path} {offset}: {control}");
            assert!(sse.next(WAIT).is_none(), "the response ends after it");
            if offset == "now" {
                // Closed at the client's offset: then the connection closes.
                assert_eq!(sse.head.header("connection"), Some("close"));
                assert!(sse.server_closes(WAIT), "{path}: connection left open");
            }
        }
    }
}
