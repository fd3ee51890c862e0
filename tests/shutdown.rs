//! Graceful shutdown of the real binary under load: SIGTERM while writer
//! threads append (`--fsync always` and `--fsync interval:200`) exits 0;
//! every append acknowledged with a 2xx is there after a restart, in order;
//! the long-poll and SSE responses open at the time end cleanly (a 204, the
//! last chunk, then EOF, not a reset); an idle keep-alive connection does
//! not hold the shutdown up, nor does a reader that stopped reading (its
//! write is dropped half the timeout after the stop). And
//! `--shutdown-timeout-ms` bounds a shutdown that a stalled request body
//! holds up: exit status 1.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use common::{Conn, Server, enc};

const WRITERS: usize = 4;
const TEXT: (&str, &str) = ("Content-Type", "text/plain");

fn writer_path(w: usize) -> String {
    format!("/v1/stream/shutdown-w{w}")
}

fn record(w: usize, i: usize) -> String {
    format!("w{w}-{i:08}\n")
}

/// Appends records 0, 1, ... to its stream on one keep-alive connection
/// until the server stops answering; returns how many got a 2xx.
fn write_until_stopped(addr: SocketAddr, w: usize, acked: Arc<AtomicUsize>) -> usize {
    let mut c = Conn::open(addr);
    for i in 0.. {
        match c.try_request("POST", &writer_path(w), &[TEXT], record(w, i).as_bytes()) {
            Ok(r) if (200..300).contains(&r.status) => acked.store(i + 1, Ordering::SeqCst),
            _ => break,
        }
    }
    acked.load(Ordering::SeqCst)
}

/// A raw connection whose request is sent and whose response is read whole
/// only after the server exited.
fn raw_request(addr: SocketAddr, path: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    s.write_all(request.as_bytes()).unwrap();
    s
}

/// Reads until `needle` appeared; returns what was read.
fn read_until(s: &mut TcpStream, needle: &[u8]) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while common::find(&got, needle).is_none() {
        let n = s.read(&mut buf).expect("read before shutdown");
        assert!(n > 0, "closed early: {:?}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    got
}

/// The rest of the response up to EOF; a reset fails the test.
fn read_to_eof(s: &mut TcpStream, what: &str, mut got: Vec<u8>) -> String {
    if let Err(e) = s.read_to_end(&mut got) {
        panic!(
            "{what}: {e} after {:?} (expected a clean end)",
            String::from_utf8_lossy(&got)
        );
    }
    String::from_utf8_lossy(&got).into_owned()
}

/// Reads stream `path` from the start; the text of every page.
fn read_text(addr: SocketAddr, path: &str) -> String {
    let mut c = Conn::open(addr);
    let (mut text, mut offset) = (String::new(), "-1".to_string());
    loop {
        let r = c.request("GET", &format!("{path}?offset={}", enc(&offset)), &[], b"");
        assert_eq!(r.status, 200, "GET {path}: {}", r.text());
        text.push_str(&r.text());
        let next = r.header("stream-next-offset").unwrap().to_string();
        if r.header("stream-up-to-date") == Some("true") || next == offset {
            return text;
        }
        offset = next;
    }
}

/// Records 0..n in order, nothing else; n covers every acknowledged append
/// and at most the one that was in flight.
fn check_writer(s: &Server, w: usize, acked: usize) {
    let text = read_text(s.addr, &writer_path(w));
    let lines: Vec<&str> = text.lines().collect();
    for (i, line) in lines.iter().enumerate() {
        assert_eq!(format!("{line}\n"), record(w, i), "writer {w} record {i}");
    }
    assert!(
        lines.len() >= acked && lines.len() <= acked + 1,
        "writer {w}: {acked} acknowledged, {} after restart",
        lines.len()
    );
}

fn sigterm_under_load(fsync: &str) {
    let mut s = Server::start(&[
        "--cores",
        "2",
        "--fsync",
        fsync,
        "--long-poll-timeout-ms",
        "30000",
    ]);
    let mut c = Conn::open(s.addr);
    for w in 0..WRITERS {
        assert_eq!(c.request("PUT", &writer_path(w), &[TEXT], b"").status, 201);
    }
    let live = "/v1/stream/shutdown-live";
    let r = c.request("PUT", live, &[TEXT], b"");
    assert_eq!(r.status, 201);
    let tail = r.header("stream-next-offset").unwrap().to_string();
    // `c` stays open and idle: it must not hold the shutdown up.

    let mut poll = raw_request(
        s.addr,
        &format!("{live}?live=long-poll&offset={}", enc(&tail)),
    );
    let mut sse = raw_request(s.addr, &format!("{live}?live=sse&offset={}", enc(&tail)));
    let sse_start = read_until(&mut sse, b"event: control");
    let counters: Vec<Arc<AtomicUsize>> = (0..WRITERS).map(|_| Arc::default()).collect();
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (addr, acked) = (s.addr, counters[w].clone());
            thread::spawn(move || write_until_stopped(addr, w, acked))
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(10);
    while counters.iter().any(|n| n.load(Ordering::SeqCst) < 50) {
        assert!(Instant::now() < deadline, "writers made no progress");
        thread::sleep(Duration::from_millis(10));
    }

    let code = s.signal_and_wait(libc::SIGTERM, Duration::from_secs(15));
    let stderr = s.stderr();
    assert_eq!(code, Some(0), "SIGTERM under load\n{stderr}");
    if fsync.starts_with("interval") {
        for shard in 0..2 {
            let line = format!("level=info shard={shard} msg=\"log synced at shutdown\"");
            assert!(stderr.contains(&line), "no final sync:\n{stderr}");
        }
    }
    let acked: Vec<usize> = writers.into_iter().map(|t| t.join().unwrap()).collect();
    let poll_reply = read_to_eof(&mut poll, "long-poll", Vec::new());
    assert!(poll_reply.starts_with("HTTP/1.1 204"), "{poll_reply:?}");
    let sse_reply = read_to_eof(&mut sse, "SSE", sse_start);
    assert!(
        sse_reply.ends_with("\r\n0\r\n\r\n"),
        "no last chunk: {sse_reply:?}"
    );
    drop(c);

    s.restart();
    for (w, &n) in acked.iter().enumerate() {
        check_writer(&s, w, n);
    }
}

#[test]
fn sigterm_under_load_fsync_always() {
    sigterm_under_load("always");
}

#[test]
fn sigterm_under_load_fsync_interval() {
    sigterm_under_load("interval:200");
}

#[test]
fn shutdown_timeout_bounds_a_stalled_shutdown() {
    let mut s = Server::start(&["--shutdown-timeout-ms", "500"]);
    let mut c = Conn::open(s.addr);
    assert_eq!(
        c.request("PUT", "/v1/stream/stalled", &[TEXT], b"").status,
        201
    );
    // A request whose body stops halfway: its connection waits for the
    // rest (up to the 60 s idle timeout), holding its shard's shutdown up.
    c.send_raw(b"POST /v1/stream/stalled HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 100\r\n\r\nhalf");
    thread::sleep(Duration::from_millis(200));
    let code = s.signal_and_wait(libc::SIGTERM, Duration::from_secs(10));
    let stderr = s.stderr();
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("did not stop within 500 ms"), "{stderr}");
}

/// A reader that stops reading does not hold the shutdown up: writes get
/// half of `--shutdown-timeout-ms` after the stop, then the connection is
/// dropped (its body is cut short either way) and the shard exits 0.
#[test]
fn a_reader_that_stops_reading_does_not_hold_up_the_shutdown() {
    let mut s = Server::start(&["--cores", "1", "--shutdown-timeout-ms", "3000"]);
    let path = "/v1/stream/never-read";
    let octets = [("Content-Type", "application/octet-stream")];
    let mut c = Conn::open(s.addr);
    assert_eq!(c.request("PUT", path, &octets, b"").status, 201);
    for _ in 0..4 {
        assert_eq!(
            c.request("POST", path, &octets, &[7u8; 2 << 20]).status,
            204
        );
    }
    let stalled = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    stalled.set_recv_buffer_size(4096).unwrap();
    stalled.connect(&s.addr.into()).unwrap();
    let mut stalled: TcpStream = stalled.into();
    write!(stalled, "GET {path}?offset=-1 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    thread::sleep(Duration::from_millis(300));
    let stopping = Instant::now();
    let code = s.signal_and_wait(libc::SIGTERM, Duration::from_secs(10));
    assert_eq!(code, Some(0), "{}", s.stderr());
    assert!(
        stopping.elapsed() < Duration::from_millis(2900),
        "{:?}",
        stopping.elapsed()
    );
    drop(stalled);
}

/// A request that arrives after one shard already stopped but needs every
/// shard's answer (a metrics scrape gathers from all) is answered in full:
/// a stopped shard keeps answering the mesh until every shard stopped. It
/// once waited until the shutdown timeout and the process exited 1.
#[test]
fn a_request_gathering_from_a_stopped_shard_is_answered() {
    let mut s = Server::start(&["--cores", "2", "--shutdown-timeout-ms", "20000"]);
    let mut late = TcpStream::connect(s.addr).unwrap();
    late.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    // Half a body: its shard waits for the rest; the other one stops.
    late.write_all(b"GET /v1/metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nab")
        .unwrap();
    thread::sleep(Duration::from_millis(300));
    let stopping = Instant::now();
    // SAFETY: kill(2) on our own child's pid with a plain signal number.
    unsafe { libc::kill(s.pid() as i32, libc::SIGTERM) };
    thread::sleep(Duration::from_millis(700));
    late.write_all(b"cd").unwrap();
    let reply = read_to_eof(&mut late, "the late scrape", Vec::new());
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    for shard in ["shard=\"0\"", "shard=\"1\""] {
        assert!(reply.contains(shard), "no {shard} in {reply}");
    }
    let code = s.signal_and_wait(0, Duration::from_secs(15));
    assert_eq!(code, Some(0), "{}", s.stderr());
    assert!(
        stopping.elapsed() < Duration::from_secs(15),
        "{:?}",
        stopping.elapsed()
    );
}

/// A connection lingering after its 413 (draining what its client still
/// sends) ends when the shard stops: a client that keeps trickling bytes
/// once held the drain for the whole linger, past a short shutdown timeout.
#[test]
fn a_lingering_refused_connection_does_not_hold_up_the_shutdown() {
    let args = [
        "--cores",
        "1",
        "--max-body-bytes",
        "1048576",
        "--shutdown-timeout-ms",
        "1000",
    ];
    let mut s = Server::start(&args);
    let mut c = upload_begun(&s, "/v1/stream/linger-shutdown", 64 << 20);
    c.write_all(&[b'x'; 16 << 10]).unwrap();
    let got = read_until(&mut c, b"\r\n");
    assert!(
        got.starts_with(b"HTTP/1.1 413"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    // Keeps the linger alive: a chunk well inside its idle bound.
    let trickle = thread::spawn(move || {
        let until = Instant::now() + Duration::from_secs(3);
        while Instant::now() < until && c.write_all(&[b'y'; 4096]).is_ok() {
            thread::sleep(Duration::from_millis(100));
        }
    });
    let code = s.signal_and_wait(libc::SIGTERM, Duration::from_secs(10));
    trickle.join().unwrap();
    assert_eq!(code, Some(0), "{}", s.stderr());
}

/// A request body still arriving when the server stops gets a second more,
/// then 503 `shutting_down`: slow uploads once held the stop for the whole
/// shutdown timeout (exit status 1), though nothing of theirs was durable.
#[test]
fn a_slow_upload_does_not_hold_up_the_shutdown() {
    let args = ["--cores", "1", "--shutdown-timeout-ms", "4000"];
    let mut s = Server::start(&args);
    let mut c = upload_begun(&s, "/v1/stream/slow-upload", 1 << 20);
    c.write_all(&[b'x'; 1024]).unwrap();
    let reader = c.try_clone().unwrap();
    // Well inside the idle timeout and above the minimum rate.
    let trickle = thread::spawn(move || {
        let until = Instant::now() + Duration::from_secs(6);
        while Instant::now() < until && c.write_all(&[b'y'; 2048]).is_ok() {
            thread::sleep(Duration::from_millis(200));
        }
    });
    thread::sleep(Duration::from_millis(300));
    let stopping = Instant::now();
    let code = s.signal_and_wait(libc::SIGTERM, Duration::from_secs(10));
    assert_eq!(code, Some(0), "{}", s.stderr());
    assert!(stopping.elapsed() < Duration::from_millis(3500));
    let mut reader = reader;
    let got = read_until(&mut reader, b"\r\n");
    assert!(
        got.starts_with(b"HTTP/1.1 503"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    trickle.join().unwrap();
}

/// Creates the text stream `path` and sends the head of a POST of `len`
/// bytes to it on a new connection (reads time out after 8 s).
fn upload_begun(s: &Server, path: &str, len: usize) -> TcpStream {
    assert_eq!(
        Conn::open(s.addr).request("PUT", path, &[TEXT], b"").status,
        201
    );
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(8))).unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: {len}\r\n\r\n"
    );
    c.write_all(head.as_bytes()).unwrap();
    c
}
