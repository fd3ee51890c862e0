//! systemd notifications of the real binary (`src/notify.rs`): with
//! `NOTIFY_SOCKET` set, `READY=1` arrives only once every shard recovered
//! its log (here ~50 MiB written before a SIGKILL), and `STOPPING=1` on
//! SIGTERM before a clean exit. Filesystem and abstract socket addresses.

mod common;

use std::fs::{self, File};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr as UnixAddr, UnixDatagram};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Conn, Server, enc, unique_name};

const MIB: usize = 1 << 20;
const STREAMS: usize = 4;
/// 1 MiB appends per stream: 4 x 13 MiB = 52 MiB to recover.
const APPENDS: usize = 13;

/// The same arguments `common::Server` passes, so the data dir it wrote is
/// read with the same segment size.
const SERVE_ARGS: &[&str] = &[
    "--cores",
    "2",
    "--segment-bytes",
    "4194304",
    "--max-body-bytes",
    "2097152",
];

fn block(stream: usize, i: usize) -> Vec<u8> {
    let mut x = (stream as u64 + 1) * 0x9E37_79B9 + i as u64;
    (0..MIB)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn stream_path(n: usize) -> String {
    format!("/v1/stream/notify-{n}")
}

/// Writes every stream, returning the tail offset each append acknowledged last.
fn prefill(s: &Server) -> Vec<String> {
    let mut c = Conn::open(s.addr);
    let ct = [("Content-Type", "application/octet-stream")];
    let mut tails = Vec::new();
    for n in 0..STREAMS {
        assert_eq!(c.request("PUT", &stream_path(n), &ct, b"").status, 201);
        let mut tail = String::new();
        for i in 0..APPENDS {
            let r = c.request("POST", &stream_path(n), &ct, &block(n, i));
            assert_eq!(r.status, 204, "append {i} to stream {n}");
            tail = r.header("stream-next-offset").unwrap().to_string();
        }
        tails.push(tail);
    }
    tails
}

/// Reads all of stream `n` on `c`, paging with Stream-Next-Offset.
fn read_all(c: &mut Conn, n: usize) -> (Vec<u8>, String) {
    let (mut data, mut offset) = (Vec::new(), "-1".to_string());
    loop {
        let path = format!("{}?offset={}", stream_path(n), enc(&offset));
        let r = c.request("GET", &path, &[], b"");
        assert_eq!(r.status, 200, "GET {path}: {}", r.text());
        data.extend_from_slice(&r.body);
        let next = r.header("stream-next-offset").unwrap().to_string();
        if r.header("stream-up-to-date") == Some("true") || next == offset {
            return (data, next);
        }
        offset = next;
    }
}

/// `rill serve` on `addr`/`data_dir` with NOTIFY_SOCKET=`notify`, stderr to `log`.
fn spawn_notified(addr: &str, data_dir: &Path, notify: &str, log: &Path) -> Child {
    let log = File::create(log).expect("create stderr log");
    Command::new(env!("CARGO_BIN_EXE_rill"))
        .args(["serve", "--listen", addr])
        .arg("--data-dir")
        .arg(data_dir)
        .args(SERVE_ARGS)
        .env("NOTIFY_SOCKET", notify)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(log))
        .spawn()
        .expect("spawn rill")
}

/// Receives datagrams until one contains `line`; returns all received.
/// Panics (with the server's stderr) on timeout or if the server exits.
fn wait_for(socket: &UnixDatagram, child: &mut Child, line: &str, log: &Path) -> Vec<String> {
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        if let Ok(n) = socket.recv(&mut buf) {
            got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
            if got.last().unwrap().lines().any(|l| l == line) {
                return got;
            }
            continue;
        }
        let stderr = fs::read_to_string(log).unwrap_or_default();
        if let Some(status) = child.try_wait().unwrap() {
            panic!("rill exited ({status}) before {line}; got {got:?}\n{stderr}");
        }
        assert!(
            Instant::now() < deadline,
            "no {line} within 60 s; got {got:?}\n{stderr}"
        );
    }
}

fn wait_exit(child: &mut Child, within: Duration) -> Option<i32> {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code();
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

fn sigterm(child: &Child) {
    // SAFETY: kill(2) on our own child's pid with a plain signal number.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
}

/// Kills the child when the test ends, however it ends.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn temp_socket() -> (PathBuf, UnixDatagram) {
    let path = std::env::temp_dir().join(unique_name("rill-notify.sock"));
    let socket = UnixDatagram::bind(&path).expect("bind notify socket");
    (path, socket)
}

#[test]
fn ready_only_after_recovery_and_stopping_on_sigterm() {
    let mut s = Server::start(SERVE_ARGS);
    let tails = prefill(&s);
    s.kill();

    let (sock_path, socket) = temp_socket();
    let log = s.data_dir.with_file_name("notified.stderr.log");
    let addr = s.addr.to_string();
    let child = spawn_notified(&addr, &s.data_dir, sock_path.to_str().unwrap(), &log);
    let mut child = Reaped(child);
    let got = wait_for(&socket, &mut child.0, "READY=1", &log);

    // (a) READY=1 came, after the "recovering" status and only once every
    // shard logged what it recovered (those lines precede the report each
    // shard sends before `shard::start` returns).
    let stderr = fs::read_to_string(&log).unwrap();
    assert!(got[0].contains("STATUS=recovering"), "{got:?}");
    for shard in 0..2 {
        let line = stderr
            .lines()
            .find(|l| l.starts_with(&format!("level=info shard={shard} msg=\"recovered ")))
            .unwrap_or_else(|| panic!("READY=1 before shard {shard} recovered:\n{stderr}"));
        assert!(!line.contains("recovered 0 records"), "{line}");
    }
    // (b) A request made at once sees everything written before the kill.
    let mut c = Conn::open(s.addr);
    for (n, tail) in tails.iter().enumerate() {
        let (data, next) = read_all(&mut c, n);
        assert_eq!(&next, tail, "stream {n} tail after recovery");
        assert_eq!(data.len(), APPENDS * MIB, "stream {n} length");
        for i in 0..APPENDS {
            assert!(
                data[i * MIB..(i + 1) * MIB] == block(n, i),
                "stream {n} block {i}"
            );
        }
    }
    drop(c);

    // (c) SIGTERM: STOPPING=1, then exit 0.
    sigterm(&child.0);
    wait_for(&socket, &mut child.0, "STOPPING=1", &log);
    let code = wait_exit(&mut child.0, Duration::from_secs(15));
    let stderr = fs::read_to_string(&log).unwrap();
    assert_eq!(code, Some(0), "exit after SIGTERM\n{stderr}");
    let _ = fs::remove_file(&sock_path);
}

#[test]
fn abstract_notify_socket_gets_ready_and_stopping() {
    let name = unique_name("rill-notify-abstract");
    let bound = UnixAddr::from_abstract_name(name.as_bytes()).unwrap();
    let socket = UnixDatagram::bind_addr(&bound).expect("bind abstract socket");
    let root = std::env::temp_dir().join(unique_name("rill-notify"));
    fs::create_dir_all(&root).unwrap();
    let log = root.join("stderr.log");
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let child = spawn_notified(&addr, &root.join("data"), &format!("@{name}"), &log);
    let mut child = Reaped(child);
    let got = wait_for(&socket, &mut child.0, "READY=1", &log);
    assert!(got.last().unwrap().contains("STATUS=serving"), "{got:?}");
    sigterm(&child.0);
    wait_for(&socket, &mut child.0, "STOPPING=1", &log);
    let code = wait_exit(&mut child.0, Duration::from_secs(15));
    assert_eq!(code, Some(0), "{}", fs::read_to_string(&log).unwrap());
    drop(child);
    let _ = fs::remove_dir_all(&root);
}

/// A shard whose log cannot be opened for appending (its next segment
/// cannot be created: a full disk, here a directory in the way) fails the
/// startup: exit 1 and no `READY=1`, not a process that looks ready while
/// part of the keyspace has no shard.
#[test]
fn a_shard_that_cannot_append_fails_the_startup() {
    let mut s = Server::start(SERVE_ARGS);
    s.kill();
    let shard = s.data_dir.join("shard-01");
    for entry in fs::read_dir(&shard).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "seg") {
            fs::remove_file(path).unwrap();
        }
    }
    fs::create_dir(shard.join("00000000000000000001.seg.tmp")).unwrap();

    let (sock_path, socket) = temp_socket();
    socket
        .set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let log = s.data_dir.with_file_name("unappendable.stderr.log");
    let addr = s.addr.to_string();
    let child = spawn_notified(&addr, &s.data_dir, sock_path.to_str().unwrap(), &log);
    let mut child = Reaped(child);
    let code = wait_exit(&mut child.0, Duration::from_secs(30));
    let stderr = fs::read_to_string(&log).unwrap();
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("startup failed: shard 1: cannot open the log for appending"),
        "{stderr}"
    );
    let mut buf = [0u8; 4096];
    while let Ok(n) = socket.recv(&mut buf) {
        let datagram = String::from_utf8_lossy(&buf[..n]);
        assert!(!datagram.lines().any(|l| l == "READY=1"), "{datagram}");
    }
    let _ = fs::remove_file(&sock_path);
}
