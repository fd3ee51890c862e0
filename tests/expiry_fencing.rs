//! A stream that passes its `Stream-Expires-At` ends for every request
//! still waiting on it: long-poll and SSE readers and producer appends held
//! in the sequence-gap wait never go on into a stream created at the same
//! key after it (PROTOCOL.md §4 "bytes at a given offset never change", §5.1
//! expiry, §5.2.1 producers).

mod blackbox_helpers;
mod common;

use std::thread;
use std::time::Duration;

use blackbox_helpers::*;
use common::sse::Sse;
use common::{Conn, Server, req};
use rill::clock::{format_rfc3339_ms, now_ms};

const JSON: &str = "application/json";

/// Creates `path` (JSON, body `[1]`) expiring `in_ms` from now; returns
/// when it expires (ms since the epoch) and its tail.
fn create_expiring(s: &Server, path: &str, in_ms: u64) -> (u64, String) {
    let at = now_ms() + in_ms;
    let expires = format_rfc3339_ms(at);
    let headers = [
        ("Content-Type", JSON),
        ("Stream-Expires-At", expires.as_str()),
    ];
    let r = req(s.addr, "PUT", path, &headers, b"[1]");
    assert_eq!(r.status, 201, "{}", r.text());
    (at, next_offset(&r))
}

fn sleep_until(at_ms: u64) {
    let now = now_ms();
    if at_ms > now {
        thread::sleep(Duration::from_millis(at_ms - now));
    }
}

/// Re-creates `path` after it expired, with other data, and appends more.
fn recreate(s: &Server, path: &str) {
    let r = req(
        s.addr,
        "PUT",
        path,
        &[("Content-Type", JSON)],
        br#"[{"name":"new"}]"#,
    );
    assert_eq!(r.status, 201, "a new stream: {}", r.text());
    let r = req(s.addr, "POST", path, &[("Content-Type", JSON)], b"[2]");
    assert_eq!(r.status, 204, "{}", r.text());
}

#[test]
fn a_long_poll_of_an_expired_stream_is_not_served_its_successor() {
    let s = Server::start(&[]);
    let path = new_stream_path();
    let (at, tail) = create_expiring(&s, &path, 800);
    let mut waiting = Conn::waiting_get(s.addr, &format!("{path}?offset={tail}&live=long-poll"));
    sleep_until(at + 100);
    recreate(&s, &path);
    let r = waiting.read_response();
    assert_eq!(r.status, 404, "the waited-on stream is gone: {}", r.text());
}

#[test]
fn a_long_poll_is_answered_404_when_its_stream_expires() {
    // No cleaner pass (which reaps expired streams) within the test.
    let s = Server::start(&[
        "--long-poll-timeout-ms",
        "30000",
        "--clean-interval-ms",
        "60000",
    ]);
    let path = new_stream_path();
    let (at, tail) = create_expiring(&s, &path, 500);
    let mut waiting = Conn::waiting_get(s.addr, &format!("{path}?offset={tail}&live=long-poll"));
    let r = waiting.read_response();
    assert_eq!(r.status, 404, "not 204 up to date: {:?}", r.headers);
    let answered = now_ms();
    assert!(answered >= at, "not before the expiry");
    assert!(answered < at + 5_000, "at the expiry, not the timeout");
}

#[test]
fn an_sse_reader_of_an_expired_stream_is_not_served_its_successor() {
    let s = Server::start(&[]);
    let path = new_stream_path();
    let (at, _) = create_expiring(&s, &path, 800);
    let mut sse = Sse::open(s.addr, &format!("{path}?offset=-1&live=sse"));
    assert_eq!(sse.head.status, 200);
    assert_eq!(
        sse.expect_data(Duration::from_secs(5)).json(),
        serde_json::json!([1])
    );
    sleep_until(at + 100);
    recreate(&s, &path);
    // The response ends (`next` panics if it does not within the timeout).
    while let Some(event) = sse.next(Duration::from_secs(5)) {
        assert_ne!(
            event.name, "data",
            "another stream's data: {:?}",
            event.data
        );
    }
}

#[test]
fn an_sse_response_ends_when_its_stream_expires() {
    let s = Server::start(&["--long-poll-timeout-ms", "30000"]);
    let path = new_stream_path();
    let (at, _) = create_expiring(&s, &path, 800);
    let mut sse = Sse::open(s.addr, &format!("{path}?offset=-1&live=sse"));
    assert_eq!(
        sse.expect_data(Duration::from_secs(5)).json(),
        serde_json::json!([1])
    );
    while let Some(event) = sse.next(Duration::from_secs(5)) {
        assert_eq!(event.name, "control", "{:?}", event.data);
    }
    let ended = now_ms();
    assert!(ended >= at, "ended at the expiry, not before");
    // Then, not at the next keep-alive (the cleaner would reap it at 10 s).
    assert!(
        ended < at + 3_000,
        "ended {} ms after the expiry",
        ended - at
    );
    assert!(
        sse.server_closes(Duration::from_secs(5)),
        "the connection closes"
    );
}

#[test]
fn a_producer_append_waiting_on_an_expired_stream_is_not_applied_to_its_successor() {
    let s = Server::start(&["--producer-gap-wait-ms", "3000"]);
    let path = new_stream_path();
    let (at, _) = create_expiring(&s, &path, 800);
    let produce = |addr, seq: u64, body: &'static [u8]| {
        let seq = seq.to_string();
        let headers = [
            ("Content-Type", JSON),
            ("Producer-Id", "p"),
            ("Producer-Epoch", "0"),
            ("Producer-Seq", seq.as_str()),
        ];
        req(addr, "POST", &path.clone(), &headers, body)
    };
    assert_eq!(produce(s.addr, 0, b"[\"old0\"]").status, 200);
    let addr = s.addr;
    let ahead = thread::scope(|scope| {
        // Seq 2 before seq 1: it waits for seq 1 in the gap window.
        let waiting = scope.spawn(|| produce(addr, 2, b"[\"old2\"]"));
        sleep_until(at + 100);
        let r = req(s.addr, "PUT", &path, &[("Content-Type", JSON)], b"");
        assert_eq!(r.status, 201, "{}", r.text());
        assert_eq!(produce(s.addr, 0, b"[\"new0\"]").status, 200);
        assert_eq!(produce(s.addr, 1, b"[\"new1\"]").status, 200);
        waiting.join().unwrap()
    });
    assert_eq!(ahead.status, 404, "{}", ahead.text());
    assert_eq!(
        produce(s.addr, 2, b"[\"new2\"]").status,
        200,
        "not a duplicate"
    );
    let r = req(s.addr, "GET", &format!("{path}?offset=-1"), &[], b"");
    assert_eq!(r.text(), r#"["new0","new1","new2"]"#);
}
