//! An SSE reader far behind the tail (PROTOCOL.md §5.7): its response is
//! a run of windows with no idle moment between them, and it still ends
//! with the `--sse-cycle-ms` cycle and stops with the shard (SIGTERM),
//! ending cleanly (a control event that says where to resume, then the
//! chunked terminator) rather than running to the tail.

mod common;

use std::thread;
use std::time::Duration;

use common::sse::{Event, Sse};
use common::{Server, enc, req};

/// A bucketed text stream of 1 MiB read one byte per data event
/// (`max_bytes=1`): ~100 MB of events, far more than a cycle can send.
fn one_byte_events(s: &Server) -> (String, String) {
    assert_eq!(req(s.addr, "PUT", "/backlog", &[], b"").status, 201);
    let text = [("Content-Type", "text/plain")];
    let created = req(s.addr, "PUT", "/backlog/s", &text, &[b'x'; 1 << 20]);
    assert_eq!(created.status, 201, "{}", created.text());
    let tail = created.header("stream-next-offset").unwrap().to_string();
    (
        "/backlog/s?offset=-1&live=sse&max_bytes=1".to_string(),
        tail,
    )
}

/// Reads the response to its end; its last control event.
fn last_control(sse: &mut Sse) -> Event {
    let mut last = None;
    let mut data = 0usize;
    while let Some(event) = sse.next(Duration::from_secs(20)) {
        match event.name.as_str() {
            "control" => last = Some(event),
            "data" => data += event.data.len(),
            other => panic!("unexpected event {other}"),
        }
    }
    assert!(data > 0, "some data went out before the end");
    last.expect("a control event")
}

/// The response ended short of the tail, saying where to resume.
fn assert_paused(control: &Event, tail: &str) {
    let json = control.json();
    let next = json["streamNextOffset"].as_str().expect("an offset");
    assert_ne!(next, tail, "the response ran to the tail: {json}");
    assert_eq!(json.get("upToDate"), None, "{json}");
    assert_eq!(json.get("streamClosed"), None, "{json}");
}

#[test]
fn a_reader_far_behind_ends_with_its_cycle() {
    let s = Server::start(&["--cores", "1", "--sse-cycle-ms", "500"]);
    let (path, tail) = one_byte_events(&s);
    let mut sse = Sse::open(s.addr, &path);
    assert_eq!(sse.head.status, 200);
    let control = last_control(&mut sse);
    assert_paused(&control, &tail);
    // The connection stays usable: the client resumes where it was told.
    let next = control.json()["streamNextOffset"]
        .as_str()
        .unwrap()
        .to_string();
    let rest = req(
        s.addr,
        "GET",
        &format!("/backlog/s?offset={}", enc(&next)),
        &[],
        b"",
    );
    assert_eq!(rest.status, 200);
    assert!(!rest.body.is_empty() && rest.body.iter().all(|&b| b == b'x'));
}

#[test]
fn a_reader_far_behind_does_not_hold_up_a_sigterm() {
    let mut s = Server::start(&["--cores", "1", "--shutdown-timeout-ms", "10000"]);
    let (path, tail) = one_byte_events(&s);
    let mut sse = Sse::open(s.addr, &path);
    assert_eq!(sse.head.status, 200);
    let reader = thread::spawn(move || last_control(&mut sse));
    thread::sleep(Duration::from_millis(300));
    let code = s.signal_and_wait(libc::SIGTERM, Duration::from_secs(8));
    assert_eq!(code, Some(0), "{}", s.stderr());
    assert_paused(&reader.join().expect("the response ended cleanly"), &tail);
}
