//! Black-box tests of the base protocol's live modes on `/v1/stream/...`
//! (PROTOCOL.md §5.6 long-poll, §5.7 SSE, §8.2 SSE cycle; extensions §7
//! base64 SSE for binary streams), HTTP timeouts and graceful shutdown of the
//! real `rill` binary. `Server::start` runs with `--long-poll-timeout-ms 1000`.

mod common;

use base64::Engine;
use common::sse::{Event, Sse};
use common::{Conn, ReadError, Response, Server, enc, req, unique_name};
use serde_json::Value;
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

const TEXT: &str = "text/plain";
const OCTET: &str = "application/octet-stream";
const LONG_POLL: Duration = Duration::from_millis(1000);

fn new_path() -> String {
    format!("/v1/stream/{}", unique_name("live"))
}

fn next_offset(r: &Response) -> String {
    r.header("stream-next-offset")
        .unwrap_or_else(|| panic!("no Stream-Next-Offset: {} {:?}", r.status, r.headers))
        .to_string()
}

fn create(s: &Server, path: &str, ct: &str, body: &[u8]) -> String {
    let r = req(s.addr, "PUT", path, &[("Content-Type", ct)], body);
    assert_eq!(r.status, 201, "create {path}: {:?} {}", r.headers, r.text());
    next_offset(&r)
}

fn append(s: &Server, path: &str, ct: &str, body: &[u8]) -> String {
    let r = req(s.addr, "POST", path, &[("Content-Type", ct)], body);
    assert_eq!(r.status, 204, "append {path}: {:?} {}", r.headers, r.text());
    next_offset(&r)
}

fn close(s: &Server, path: &str, ct: &str) -> String {
    let r = req(
        s.addr,
        "POST",
        path,
        &[("Content-Type", ct), ("Stream-Closed", "true")],
        b"",
    );
    assert_eq!(r.status, 204, "close {path}: {:?} {}", r.headers, r.text());
    next_offset(&r)
}

fn is_true(r: &Response, name: &str) -> bool {
    r.header(name)
        .is_some_and(|v| v.eq_ignore_ascii_case("true"))
}

fn assert_digits(what: &str, v: Option<&str>) {
    assert!(
        v.is_some_and(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit())),
        "{what} must be a decimal interval number, got {v:?}"
    );
}

fn long_poll_path(path: &str, offset: &str) -> String {
    format!("{path}?live=long-poll&offset={}", enc(offset))
}

/// No response head arrives on `c` within `wait` (the request is waiting).
fn assert_no_response_within(c: &mut Conn, wait: Duration) {
    c.stream.set_read_timeout(Some(wait)).unwrap();
    let r = c.try_read_head();
    c.stream
        .set_read_timeout(Some(common::READ_TIMEOUT))
        .unwrap();
    match r {
        Err(ReadError::Timeout) => {}
        other => panic!("expected the request to wait, got {other:?}"),
    }
}

// ---------------------------------------------------------------- long-poll

#[test]
fn long_poll_at_tail_is_woken_by_an_append() {
    // A timeout far beyond the waits below: a loaded machine must not turn
    // "still waiting" into a 204.
    let s = Server::start(&["--long-poll-timeout-ms", "10000"]);
    let path = new_path();
    create(&s, &path, TEXT, b"old");
    let tail = append(&s, &path, TEXT, b"-data");

    let mut waiter = Conn::open(s.addr);
    let sent = Instant::now();
    let poll = waiter.build_request("GET", &long_poll_path(&path, &tail), &[], b"");
    waiter.send_raw(&poll);
    assert_no_response_within(&mut waiter, Duration::from_millis(300));

    let posted = Instant::now();
    let new_tail = append(&s, &path, TEXT, b"fresh bytes");
    let r = waiter.read_response();
    let woke_after = posted.elapsed();
    assert_eq!(r.status, 200, "{:?} {}", r.headers, r.text());
    assert_eq!(r.body, b"fresh bytes", "exactly the new bytes");
    assert_eq!(next_offset(&r), new_tail);
    assert!(is_true(&r, "stream-up-to-date"), "{:?}", r.headers);
    assert_digits("Stream-Cursor", r.header("stream-cursor"));
    assert!(
        woke_after < Duration::from_secs(5) && sent.elapsed() < Duration::from_secs(10),
        "woken {woke_after:?} after the append, {:?} after the request",
        sent.elapsed()
    );

    // The connection is reusable, and a second poll from the new tail with
    // the cursor echoed waits again and is woken again.
    let cursor = r.header("stream-cursor").unwrap().to_string();
    let p = format!("{}&cursor={cursor}", long_poll_path(&path, &new_tail));
    let poll = waiter.build_request("GET", &p, &[], b"");
    waiter.send_raw(&poll);
    assert_no_response_within(&mut waiter, Duration::from_millis(200));
    append(&s, &path, TEXT, b"again");
    let r = waiter.read_response();
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"again");
    assert_digits("Stream-Cursor", r.header("stream-cursor"));
    let next: u64 = r.header("stream-cursor").unwrap().parse().unwrap();
    assert!(
        next > cursor.parse::<u64>().unwrap(),
        "echoed cursor {cursor} must give a strictly greater one, got {next}"
    );
}

#[test]
fn long_poll_times_out_with_204_up_to_date() {
    let s = Server::start(&[]);
    let path = new_path();
    let tail = create(&s, &path, TEXT, b"some bytes");
    let mut c = Conn::open(s.addr);
    let started = Instant::now();
    let r = c.request("GET", &long_poll_path(&path, &tail), &[], b"");
    let took = started.elapsed();
    assert_eq!(r.status, 204, "{:?} {}", r.headers, r.text());
    assert!(r.body.is_empty());
    assert!(is_true(&r, "stream-up-to-date"), "{:?}", r.headers);
    assert_eq!(next_offset(&r), tail);
    assert_digits("Stream-Cursor", r.header("stream-cursor"));
    assert!(
        took >= LONG_POLL - Duration::from_millis(100) && took < LONG_POLL * 3,
        "timed out after {took:?}, configured {LONG_POLL:?}"
    );
    // offset=now waits the same way.
    let started = Instant::now();
    let r = c.request("GET", &long_poll_path(&path, "now"), &[], b"");
    assert_eq!(r.status, 204);
    assert_eq!(next_offset(&r), tail);
    assert!(started.elapsed() >= LONG_POLL - Duration::from_millis(100));
    // Keep-alive after the 204s.
    let r = c.request("GET", &format!("{path}?offset=-1"), &[], b"");
    assert_eq!(r.body, b"some bytes");
}

#[test]
fn long_poll_on_closed_stream_at_tail_returns_at_once() {
    let s = Server::start(&[]);
    let path = new_path();
    let start = create(&s, &path, TEXT, b"");
    append(&s, &path, TEXT, b"last words");
    let tail = close(&s, &path, TEXT);

    let started = Instant::now();
    let r = req(s.addr, "GET", &long_poll_path(&path, &tail), &[], b"");
    assert_eq!(r.status, 204, "{:?} {}", r.headers, r.text());
    assert!(is_true(&r, "stream-closed"), "{:?}", r.headers);
    assert!(is_true(&r, "stream-up-to-date"), "{:?}", r.headers);
    assert_eq!(next_offset(&r), tail);
    assert!(
        started.elapsed() < Duration::from_millis(500),
        "must not wait: {:?}",
        started.elapsed()
    );
    // Behind the tail: the remaining data at once, marked closed.
    let r = req(s.addr, "GET", &long_poll_path(&path, &start), &[], b"");
    assert_eq!(r.status, 200);
    assert_eq!(r.body, b"last words");
    assert!(is_true(&r, "stream-closed"), "{:?}", r.headers);
}

#[test]
fn long_poll_is_woken_by_close() {
    let s = Server::start(&["--long-poll-timeout-ms", "10000"]);
    let path = new_path();
    let tail = create(&s, &path, TEXT, b"abc");
    let mut waiter = Conn::open(s.addr);
    let poll = waiter.build_request("GET", &long_poll_path(&path, &tail), &[], b"");
    waiter.send_raw(&poll);
    assert_no_response_within(&mut waiter, Duration::from_millis(300));
    let closed_at = Instant::now();
    close(&s, &path, TEXT);
    let r = waiter.read_response();
    assert!(
        closed_at.elapsed() < Duration::from_secs(5),
        "woken, not timed out"
    );
    assert_eq!(r.status, 204, "{:?}", r.headers);
    assert!(is_true(&r, "stream-closed"), "{:?}", r.headers);
    assert_eq!(next_offset(&r), tail);
}

// ---------------------------------------------------------------------- SSE

fn sse_path(path: &str, offset: &str) -> String {
    format!("{path}?live=sse&offset={}", enc(offset))
}

fn assert_sse_head(sse: &Sse) {
    let h = &sse.head;
    assert_eq!(h.status, 200, "{:?}", h.headers);
    assert!(
        h.header("content-type")
            .is_some_and(|c| c.to_ascii_lowercase().starts_with("text/event-stream")),
        "{:?}",
        h.headers
    );
    assert!(
        h.header("transfer-encoding")
            .is_some_and(|t| t.eq_ignore_ascii_case("chunked")),
        "{:?}",
        h.headers
    );
}

fn assert_control(e: &Event, offset: &str, up_to_date: bool) -> Value {
    assert_eq!(e.name, "control", "{e:?}");
    let v = e.json();
    assert_eq!(v["streamNextOffset"], offset, "{v}");
    assert_digits("streamCursor", v["streamCursor"].as_str());
    if up_to_date {
        assert_eq!(v["upToDate"], true, "{v}");
    }
    v
}

#[test]
fn sse_text_stream_catch_up_live_and_close() {
    let s = Server::start(&[]);
    let path = new_path();
    create(&s, &path, TEXT, b"hello");
    let tail = append(&s, &path, TEXT, b" world\nline two");

    let mut sse = Sse::open(s.addr, &sse_path(&path, "-1"));
    assert_sse_head(&sse);
    let d = sse.expect("data", Duration::from_secs(3));
    assert_eq!(d.data, "hello world\nline two");
    let c = sse.expect("control", Duration::from_secs(3));
    assert_control(&c, &tail, true);

    // Live: a POST reaches the open response.
    let t2 = append(&s, &path, TEXT, b"live!");
    let d = sse.expect_data(Duration::from_secs(3));
    assert_eq!(d.data, "live!");
    let c = sse.expect("control", Duration::from_secs(3));
    assert_control(&c, &t2, true);

    // Close: a final control with streamClosed, then the body ends.
    let closed_tail = close(&s, &path, TEXT);
    assert_eq!(closed_tail, t2);
    let last = loop {
        let e = sse.expect("control", Duration::from_secs(3));
        if e.json()["streamClosed"] == true {
            break e;
        }
    };
    assert_eq!(last.json()["streamNextOffset"], t2.as_str());
    assert!(
        sse.next(Duration::from_secs(3)).is_none(),
        "the SSE body ends after streamClosed"
    );
    // §5.8: "after emitting the final control event, servers MUST close
    // the SSE connection".
    assert!(sse.server_closes(Duration::from_secs(3)));
}

#[test]
fn sse_from_now_starts_at_the_tail() {
    let s = Server::start(&[]);
    let path = new_path();
    let tail = create(&s, &path, TEXT, b"history");
    let mut sse = Sse::open(s.addr, &sse_path(&path, "now"));
    assert_sse_head(&sse);
    let c = sse.expect("control", Duration::from_secs(3));
    assert_control(&c, &tail, true);
    append(&s, &path, TEXT, b"future");
    assert_eq!(sse.expect_data(Duration::from_secs(3)).data, "future");
}

/// §5.5: "for non-live reads without data beyond the requested offset,
/// servers SHOULD return 200 OK with an empty body"; a well-formed token past
/// the tail (here one of a deleted predecessor) reads as the tail. A
/// long-poll answers 204 at once with the tail as its next offset (it must
/// not wait and then serve bytes before the offset asked for); SSE's first
/// control event names the tail, and data from there follows.
#[test]
fn a_token_past_the_tail_reads_as_the_tail() {
    let s = Server::start(&[]);
    let path = new_path();
    create(&s, &path, "application/json", b"");
    let old_tail = append(&s, &path, "application/json", br#"[{"a":1},{"b":2}]"#);
    assert_eq!(req(s.addr, "DELETE", &path, &[], b"").status, 204);
    let tail = create(&s, &path, "application/json", b"");

    let r = req(
        s.addr,
        "GET",
        &format!("{path}?offset={old_tail}"),
        &[],
        b"",
    );
    assert_eq!(r.status, 200, "{:?} {}", r.headers, r.text());
    assert_eq!(r.body, b"[]");
    assert_eq!(next_offset(&r), tail);
    assert!(is_true(&r, "stream-up-to-date"), "{:?}", r.headers);

    let r = req(s.addr, "GET", &long_poll_path(&path, &old_tail), &[], b"");
    assert_eq!(r.status, 204, "{:?} {}", r.headers, r.text());
    assert_eq!(next_offset(&r), tail);
    let mut waiter = Conn::open(s.addr);
    let poll = waiter.build_request("GET", &long_poll_path(&path, &tail), &[], b"");
    waiter.send_raw(&poll);
    assert_no_response_within(&mut waiter, Duration::from_millis(200));
    let mut sse = Sse::open(s.addr, &sse_path(&path, &old_tail));
    assert_sse_head(&sse);
    assert_control(&sse.expect("control", Duration::from_secs(3)), &tail, true);

    let new_tail = append(&s, &path, "application/json", br#"{"c":3}"#);
    let r = waiter.read_response();
    assert_eq!((r.status, r.text()), (200, r#"[{"c":3}]"#.to_string()));
    assert_eq!(next_offset(&r), new_tail);
    let d = sse.expect_data(Duration::from_secs(3));
    assert_eq!(d.data.replace('\n', ""), r#"[{"c":3}]"#);
}

#[test]
fn sse_text_payload_starting_with_a_space_survives() {
    // PROTOCOL.md §5.7: "Data is emitted in Server-Sent Events format"; an
    // SSE parser removes one space after `data:`, so the server must not
    // let a payload's own leading space be eaten.
    let s = Server::start(&[]);
    let path = new_path();
    create(&s, &path, TEXT, b" indented\n  two spaces");
    let mut sse = Sse::open(s.addr, &sse_path(&path, "-1"));
    assert_sse_head(&sse);
    let d = sse.expect("data", Duration::from_secs(3));
    assert_eq!(d.data, " indented\n  two spaces");
}

#[test]
fn sse_binary_stream_is_base64() {
    let s = Server::start(&[]);
    let path = new_path();
    let first: Vec<u8> = (0..=255u8).collect();
    create(&s, &path, OCTET, &first);
    let second: Vec<u8> = b"\n\r\n\0\xff\xfe data: x\n\n".to_vec();

    let mut sse = Sse::open(s.addr, &sse_path(&path, "-1"));
    assert_sse_head(&sse);
    assert_eq!(
        sse.head.header("stream-sse-data-encoding"),
        Some("base64"),
        "{:?}",
        sse.head.headers
    );
    let b64 = base64::engine::general_purpose::STANDARD;
    let d = sse.expect("data", Duration::from_secs(3));
    let got = b64
        .decode(d.data.replace('\n', ""))
        .expect("data is base64");
    assert_eq!(got, first);
    sse.expect("control", Duration::from_secs(3));

    append(&s, &path, OCTET, &second);
    let d = sse.expect_data(Duration::from_secs(3));
    let got = b64
        .decode(d.data.replace('\n', ""))
        .expect("data is base64");
    assert_eq!(got, second);

    // Text streams are not base64-encoded.
    let tpath = new_path();
    create(&s, &tpath, TEXT, b"t");
    let sse = Sse::open(s.addr, &sse_path(&tpath, "-1"));
    assert_eq!(sse.head.header("stream-sse-data-encoding"), None);

    // A text stream in another charset is base64 too: its bytes are not
    // UTF-8, so as text they would arrive altered (U+FFFD for 0xE9).
    let latin1 = "text/plain; charset=iso-8859-1";
    let lpath = new_path();
    create(&s, &lpath, latin1, b"caf\xe9");
    let mut sse = Sse::open(s.addr, &sse_path(&lpath, "-1"));
    assert_eq!(sse.head.header("stream-sse-data-encoding"), Some("base64"));
    let d = sse.expect("data", Duration::from_secs(3));
    assert_eq!(b64.decode(d.data.replace('\n', "")).unwrap(), b"caf\xe9");
}

#[test]
fn sse_response_ends_after_the_cycle_and_connection_stays_usable() {
    let s = Server::start(&["--sse-cycle-ms", "1500"]);
    let path = new_path();
    let tail = create(&s, &path, TEXT, b"abc");
    let started = Instant::now();
    let mut sse = Sse::open(s.addr, &sse_path(&path, &tail));
    assert_sse_head(&sse);
    let c = sse.expect("control", Duration::from_secs(3));
    assert_control(&c, &tail, true);
    // Only (keep-alive) controls until the body ends by itself.
    while let Some(e) = sse.next(Duration::from_secs(5)) {
        assert_control(&e, &tail, true);
    }
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(1300) && took < Duration::from_millis(4000),
        "SSE cycle ended after {took:?}, configured 1.5 s"
    );
    // The same connection serves a plain request afterwards.
    let r = common::build_request(&s.addr, "GET", &format!("{path}?offset=-1"), &[], b"");
    let text = sse.send_raw_until(&r, b"abc");
    assert!(text.starts_with("HTTP/1.1 200"), "{text:?}");
}

// ------------------------------------------------------------ HTTP timeouts

/// Either a 408 response or the connection closed, within `within`.
fn assert_408_or_closed(c: &mut Conn, within: Duration, what: &str) {
    c.stream.set_read_timeout(Some(within)).unwrap();
    match c.try_read_response() {
        Ok(r) => assert_eq!(r.status, 408, "{what}: {:?} {}", r.headers, r.text()),
        Err(ReadError::Closed) => {}
        Err(e) => panic!("{what}: expected 408 or close, got {e}"),
    }
}

#[test]
fn stalled_request_gets_408_and_others_are_served() {
    let s = Server::start(&["--idle-timeout-ms", "1000"]);
    let path = new_path();
    create(&s, &path, TEXT, b"ok");

    let mut slow = Conn::open(s.addr);
    let started = Instant::now();
    slow.send_raw(format!("GET {path}?offset=-1 HTTP/1.1\r\nHost: x\r\nAccept:").as_bytes());
    let mut slow_body = Conn::open(s.addr);
    slow_body.send_raw(
        format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: {TEXT}\r\nContent-Length: 10\r\n\r\n12345"
        )
        .as_bytes(),
    );

    // Others are served meanwhile.
    for _ in 0..3 {
        let r = req(s.addr, "GET", &format!("{path}?offset=-1"), &[], b"");
        assert_eq!(r.body, b"ok");
        thread::sleep(Duration::from_millis(100));
    }
    assert_408_or_closed(&mut slow, Duration::from_secs(4), "stalled head");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(800) && took < Duration::from_secs(4),
        "stalled head answered after {took:?}"
    );
    assert_408_or_closed(&mut slow_body, Duration::from_secs(4), "stalled body");
    // The half body was not appended.
    let r = req(s.addr, "GET", &format!("{path}?offset=-1"), &[], b"");
    assert_eq!(r.body, b"ok");

    // A connection idle between requests is closed without a response.
    let mut idle = Conn::open(s.addr);
    let r = idle.request("GET", &format!("{path}?offset=-1"), &[], b"");
    assert_eq!(r.status, 200);
    assert!(
        idle.is_closed_within(Duration::from_secs(4)),
        "idle keep-alive connection closes after the idle timeout"
    );
}

// ----------------------------------------------------------------- shutdown

struct Proc {
    child: std::process::Child,
    root: std::path::PathBuf,
    addr: SocketAddr,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn spawn_own() -> Proc {
    let root = std::env::temp_dir().join(unique_name("rill-live-term"));
    std::fs::create_dir_all(&root).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_rill"))
        .args(["serve", "--cores", "2", "--listen", &addr.to_string()])
        .arg("--data-dir")
        .arg(root.join("data"))
        .args(["--long-poll-timeout-ms", "30000"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn rill");
    let mut p = Proc { child, root, addr };
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        assert!(p.child.try_wait().unwrap().is_none(), "rill exited early");
        assert!(Instant::now() < deadline, "rill did not start");
        thread::sleep(Duration::from_millis(20));
    }
    p
}

fn sigterm_and_wait(p: &mut Proc, within: Duration) -> std::process::ExitStatus {
    let pid = p.child.id().to_string();
    let st = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("run kill");
    assert!(st.success());
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = p.child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "rill did not exit within {within:?} of SIGTERM"
        );
        thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_exits_cleanly() {
    let mut p = spawn_own();
    let path = new_path();
    let r = req(p.addr, "PUT", &path, &[("Content-Type", TEXT)], b"x");
    assert_eq!(r.status, 201);
    let status = sigterm_and_wait(&mut p, Duration::from_secs(5));
    assert!(status.success(), "exit status {status}");
}

#[test]
fn sigterm_exits_cleanly_with_open_connections() {
    let mut p = spawn_own();
    let path = new_path();
    let r = req(p.addr, "PUT", &path, &[("Content-Type", TEXT)], b"x");
    assert_eq!(r.status, 201);
    let tail = next_offset(&r);
    // An idle keep-alive connection, a 30 s long-poll, and an SSE reader.
    let mut idle = Conn::open(p.addr);
    assert_eq!(
        idle.request("GET", &format!("{path}?offset=-1"), &[], b"")
            .status,
        200
    );
    let mut poller = Conn::open(p.addr);
    let lp = poller.build_request("GET", &long_poll_path(&path, &tail), &[], b"");
    poller.send_raw(&lp);
    let mut sse = Sse::open(p.addr, &sse_path(&path, &tail));
    sse.expect("control", Duration::from_secs(3));
    thread::sleep(Duration::from_millis(200));

    let status = sigterm_and_wait(&mut p, Duration::from_secs(5));
    assert!(status.success(), "exit status {status}");
    // The long-poll was answered (204) or its connection closed.
    poller
        .stream
        .set_read_timeout(Some(Duration::from_secs(1)))
        .unwrap();
    match poller.try_read_response() {
        Ok(r) => assert_eq!(r.status, 204, "{:?}", r.headers),
        Err(ReadError::Closed) => {}
        Err(e) => panic!("long-poll during shutdown: {e}"),
    }
}

/// RFC 9112 §6.1: no Transfer-Encoding in an answer to HTTP/1.0. An SSE
/// response (and a bootstrap) to an HTTP/1.0 request carries its events
/// raw and ends by closing the connection.
#[test]
fn http_1_0_streamed_bodies_are_raw_and_end_with_the_connection() {
    use std::io::{Read, Write};
    let s = Server::start(&["--sse-cycle-ms", "300"]);
    assert_eq!(req(s.addr, "PUT", "/legacy-clients", &[], b"").status, 201);
    let text = [("Content-Type", "text/plain")];
    for path in ["/v1/stream/old-client", "/legacy-clients/client"] {
        assert_eq!(req(s.addr, "PUT", path, &text, b"hello").status, 201);
    }
    // Each body starts with what the client must see first: no chunk size.
    let cases = [
        (
            "/v1/stream/old-client?offset=-1&live=sse",
            "event:",
            "data:hello",
        ),
        ("/legacy-clients/client/bootstrap", "--", "hello"),
    ];
    for (target, first, needle) in cases {
        let mut socket = TcpStream::connect(s.addr).unwrap();
        socket
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        write!(socket, "GET {target} HTTP/1.0\r\n\r\n").unwrap();
        let mut answer = Vec::new();
        socket
            .read_to_end(&mut answer)
            .expect("the server closes the connection");
        let answer = String::from_utf8_lossy(&answer).to_ascii_lowercase();
        let (head, body) = answer.split_once("\r\n\r\n").expect("a head");
        assert!(head.starts_with("http/1.1 200"), "{target}: {head}");
        assert!(!head.contains("transfer-encoding"), "{target}: {head}");
        assert!(head.contains("connection: close"), "{target}: {head}");
        assert!(body.contains(needle), "{target}: {body}");
        assert!(body.starts_with(first), "{target}: {body}");
    }
}

/// The data lines of an SSE body's `data` events, one string per event.
fn data_events(body: &str) -> Vec<String> {
    body.split("\n\n")
        .filter(|event| event.starts_with("event: data\n"))
        .map(|event| {
            let lines: Vec<&str> = event
                .lines()
                .skip(1)
                .map(|l| l.strip_prefix("data:").unwrap())
                .collect();
            lines.join("\n")
        })
        .collect()
}

#[test]
fn sse_text_events_are_utf8() {
    // PROTOCOL.md §5.8: data events carry UTF-8 text. Bytes of a text
    // stream that are not UTF-8 go out as U+FFFD; valid text cut into
    // small windows (max_bytes=2) keeps every character whole.
    let s = Server::start(&[]);
    let closed = [("Content-Type", TEXT), ("Stream-Closed", "true")];
    let path = new_path();
    assert_eq!(
        req(s.addr, "PUT", &path, &closed, b"ok \xff\xfe!").status,
        201
    );
    let r = req(s.addr, "GET", &sse_path(&path, "-1"), &[], b"");
    let body = String::from_utf8(r.body).expect("an SSE body is UTF-8");
    assert_eq!(data_events(&body), ["ok \u{FFFD}\u{FFFD}!"]);

    assert_eq!(req(s.addr, "PUT", "/utf8", &[], b"").status, 201);
    let text = "aé€😀b";
    assert_eq!(
        req(s.addr, "PUT", "/utf8/chars", &closed, text.as_bytes()).status,
        201
    );
    let r = req(
        s.addr,
        "GET",
        "/utf8/chars?live=sse&offset=-1&max_bytes=2",
        &[],
        b"",
    );
    let body = String::from_utf8(r.body).expect("an SSE body is UTF-8");
    let events = data_events(&body);
    assert_eq!(events.concat(), text, "{events:?}");
    assert_eq!(events, ["a", "é", "\u{20ac}", "😀", "b"]);
}

/// PROTOCOL.md §10.1: an `If-None-Match` naming the current ETag gets 304
/// with no body, also on a long-poll that has data at once.
#[test]
fn long_poll_with_a_matching_if_none_match_is_304() {
    let s = Server::start(&[]);
    let path = new_path();
    create(&s, &path, TEXT, b"hello");
    let read = req(s.addr, "GET", &format!("{path}?offset=-1"), &[], b"");
    let tag = read.header("etag").expect("ETag").to_string();
    let poll = long_poll_path(&path, "-1");
    let same = req(s.addr, "GET", &poll, &[("If-None-Match", &tag)], b"");
    assert_eq!(same.status, 304, "{:?}", same.headers);
    assert!(same.body.is_empty());
    assert_eq!(same.header("etag"), Some(tag.as_str()));
    let other = req(s.addr, "GET", &poll, &[("If-None-Match", "\"other\"")], b"");
    assert_eq!(other.status, 200);
    assert_eq!(other.body, b"hello");
}

/// A long-poll at an offset past the tail (one this incarnation never
/// issued) answers at once, 204 with the tail as `Stream-Next-Offset`: it
/// once waited at the tail and then served the next append, bytes before
/// the offset asked for (PROTOCOL.md §5.6 "bytes starting from").
#[test]
fn long_poll_past_the_tail_answers_at_once_with_the_tail() {
    let s = Server::start(&["--long-poll-timeout-ms", "10000"]);
    let path = new_path();
    let tail = create(&s, &path, TEXT, b"abc");
    let past = "0000000000000000_0000000000000050";
    let (addr, url) = (s.addr, long_poll_path(&path, past));
    let poll = thread::spawn(move || req(addr, "GET", &url, &[], b""));
    thread::sleep(Duration::from_millis(300));
    append(&s, &path, TEXT, b"defg");
    let r = poll.join().unwrap();
    assert_eq!(r.status, 204, "{:?} {}", r.headers, r.text());
    assert_eq!(next_offset(&r), tail);
    assert!(is_true(&r, "stream-up-to-date"));
    assert_digits("Stream-Cursor", r.header("stream-cursor"));
}

/// A long-poll window of a text stream ends on a character boundary, also
/// when it is sent from the cache's chunks and the cut falls in a later
/// chunk than the first; the next poll takes the rest.
#[test]
fn long_poll_windows_of_cached_text_end_between_characters() {
    let s = Server::start(&[]);
    let path = new_path();
    create(&s, &path, TEXT, b"a");
    let accents = "\u{e9}".repeat(1 << 20);
    for _ in 0..3 {
        append(&s, &path, TEXT, accents.as_bytes());
    }
    let poll = |offset: &str| {
        let target = format!("{path}?offset={offset}&live=long-poll");
        let r = req(s.addr, "GET", &target, &[], b"");
        assert_eq!(r.status, 200);
        let text = String::from_utf8(r.body.clone()).expect("whole characters");
        (next_offset(&r), text)
    };
    let (next, first) = poll("-1");
    assert_eq!(
        first.len(),
        (4 << 20) - 1,
        "cut back to the character's start"
    );
    let (_, rest) = poll(&next);
    assert_eq!(first + &rest, format!("a{}", accents.repeat(3)));
}

/// PROTOCOL.md §5.8: text data events never carry invalid UTF-8; a window
/// ending inside a code point is shortened and `streamNextOffset` names
/// the byte actually sent. At the live tail, a character split across two
/// appends waits for its end (not U+FFFD for each half); one left
/// unfinished when the stream closes goes out as U+FFFD with the close.
#[test]
fn sse_live_text_holds_a_character_an_append_split() {
    let s = Server::start(&[]);
    let path = new_path();
    create(&s, &path, TEXT, b"");
    let mut sse = Sse::open(s.addr, &sse_path(&path, "-1"));
    sse.expect("control", Duration::from_secs(3));
    let wait = Duration::from_secs(3);

    let tail = append(&s, &path, TEXT, b"x\xE2\x82");
    assert_eq!(sse.expect_data(wait).data, "x");
    let c = sse.expect("control", wait).json();
    assert_ne!(
        c["streamNextOffset"],
        tail.as_str(),
        "the held bytes are not sent"
    );
    let at_x = c["streamNextOffset"].as_str().unwrap().to_string();
    assert_eq!(c["upToDate"], true);

    let tail = append(&s, &path, TEXT, b"\xAC");
    assert_eq!(sse.expect_data(wait).data, "\u{20ac}");
    assert_control(&sse.expect("control", wait), &tail, true);
    // A reader resuming where the first control pointed gets it whole.
    let r = req(s.addr, "GET", &format!("{path}?offset={at_x}"), &[], b"");
    assert_eq!(r.body, "€".as_bytes());

    append(&s, &path, TEXT, b"y\xF0\x9F");
    assert_eq!(sse.expect_data(wait).data, "y");
    sse.expect("control", wait);
    let closed_tail = close(&s, &path, TEXT);
    assert_eq!(sse.expect_data(wait).data, "\u{FFFD}");
    let last = sse.expect("control", wait).json();
    assert_eq!(last["streamClosed"], true);
    assert_eq!(last["streamNextOffset"], closed_tail.as_str());
}
