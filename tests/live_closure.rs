//! Live reads meeting a stream's closure (PROTOCOL.md §8 `now`, §5.8,
//! §10.1): SSE at `now` on a closed stream carries the closure signal in
//! its headers too; an SSE response that delivers the closure closes its
//! connection; a long-poll at `now` is no fixed range of the stream, so it
//! has no ETag and is not cached.

mod common;

use std::thread;
use std::time::Duration;

use common::sse::Sse;
use common::{Server, req};

const WAIT: Duration = Duration::from_secs(5);
const TEXT: (&str, &str) = ("Content-Type", "text/plain");
const CLOSE: (&str, &str) = ("Stream-Closed", "true");

#[test]
fn sse_now_on_a_closed_stream_has_the_closure_headers() {
    let s = Server::start(&["--cores", "1"]);
    let path = "/v1/stream/shut";
    assert_eq!(req(s.addr, "PUT", path, &[TEXT, CLOSE], b"x").status, 201);
    let mut sse = Sse::open(s.addr, &format!("{path}?offset=now&live=sse"));
    let tail = req(s.addr, "HEAD", path, &[], b"");
    assert_eq!(sse.head.header("stream-closed"), Some("true"));
    assert_eq!(sse.head.header("stream-up-to-date"), Some("true"));
    assert_eq!(
        sse.head.header("stream-next-offset"),
        tail.header("stream-next-offset")
    );
    assert_eq!(sse.expect("control", WAIT).json()["streamClosed"], true);
}

#[test]
fn an_sse_response_that_delivers_the_closure_closes_its_connection() {
    let s = Server::start(&["--cores", "1"]);
    let path = "/v1/stream/closing";
    assert_eq!(req(s.addr, "PUT", path, &[TEXT], b"a").status, 201);
    let mut sse = Sse::open(s.addr, &format!("{path}?offset=-1&live=sse"));
    assert_eq!(sse.head.header("stream-closed"), None);
    sse.expect_data(WAIT);
    assert_eq!(req(s.addr, "POST", path, &[TEXT, CLOSE], b"b").status, 204);
    while sse.next(WAIT).is_some() {}
    assert!(sse.server_closes(WAIT), "the connection stayed open");
}

#[test]
fn a_long_poll_at_now_is_neither_tagged_nor_cached() {
    let s = Server::start(&["--cores", "1"]);
    let path = "/v1/stream/polled";
    assert_eq!(req(s.addr, "PUT", path, &[TEXT], b"old").status, 201);
    let addr = s.addr;
    let poll = format!("{path}?offset=now&live=long-poll");
    let waiter = thread::spawn(move || req(addr, "GET", &poll, &[], b""));
    thread::sleep(Duration::from_millis(300));
    assert_eq!(req(s.addr, "POST", path, &[TEXT], b"new").status, 204);
    let r = waiter.join().unwrap();
    assert_eq!((r.status, r.text().as_str()), (200, "new"));
    assert_eq!(r.header("etag"), None);
    assert_eq!(r.header("cache-control"), Some("no-store"));
    let tail = r.header("stream-next-offset").unwrap();
    let from_offset = format!("{path}?offset={tail}&live=long-poll");
    let waiter = thread::spawn(move || req(addr, "GET", &from_offset, &[], b""));
    thread::sleep(Duration::from_millis(300));
    assert_eq!(req(s.addr, "POST", path, &[TEXT], b"more").status, 204);
    let r = waiter.join().unwrap();
    assert!(
        r.header("etag").is_some(),
        "a long-poll at an offset is tagged"
    );
}
