//! Helpers shared by the restart tests (`restart.rs`, `restart_durability.rs`):
//! stopping and restarting the real binary, small HTTP shorthands, and
//! running a second `rill serve` on a data dir.
#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use crate::common::{Conn, Response, Server, enc, req};

pub const TEXT: &str = "text/plain";
pub const OCTET: &str = "application/octet-stream";
pub const JSON: &str = "application/json";

#[derive(Clone, Copy, Debug)]
pub enum Restart {
    /// SIGKILL, then start (`Server::restart`).
    Kill,
    /// SIGTERM, wait for a clean exit (code 0), then start.
    Term,
}

pub fn restart(s: &mut Server, how: Restart) {
    stop(s, how);
    s.restart();
}

/// Stops the server without starting it again.
pub fn stop(s: &mut Server, how: Restart) {
    match how {
        Restart::Kill => s.kill(),
        Restart::Term => {
            let code = s.signal_and_wait(libc::SIGTERM, Duration::from_secs(10));
            assert_eq!(
                code,
                Some(0),
                "SIGTERM must stop the server cleanly\n--- stderr ---\n{}",
                s.stderr()
            );
        }
    }
}

pub fn start2(extra: &[&str]) -> Server {
    let mut args = vec!["--cores", "2"];
    args.extend_from_slice(extra);
    Server::start(&args)
}

pub fn next_offset(r: &Response) -> String {
    r.header("stream-next-offset")
        .unwrap_or_else(|| panic!("no Stream-Next-Offset in {} {:?}", r.status, r.headers))
        .to_string()
}

pub fn expect(r: &Response, status: u16, what: &str) {
    assert_eq!(r.status, status, "{what}: {:?} {}", r.headers, r.text());
}

pub fn put(s: &Server, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
    let r = req(s.addr, "PUT", path, headers, body);
    expect(&r, 201, &format!("PUT {path}"));
    r
}

pub fn post(s: &Server, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Response {
    req(s.addr, "POST", path, headers, body)
}

/// POST that must be a 204; returns the new tail.
pub fn append(c: &mut Conn, path: &str, ct: &str, body: &[u8]) -> String {
    let r = c.request("POST", path, &[("Content-Type", ct)], body);
    expect(&r, 204, &format!("append to {path}"));
    next_offset(&r)
}

pub fn head(s: &Server, path: &str) -> Response {
    req(s.addr, "HEAD", path, &[], b"")
}

pub fn get(s: &Server, path: &str, offset: &str) -> Response {
    req(
        s.addr,
        "GET",
        &format!("{path}?offset={}", enc(offset)),
        &[],
        b"",
    )
}

/// Everything from `offset` to the tail, paging with Stream-Next-Offset
/// (byte streams and bucketed reads only: v1 JSON pages are arrays).
pub fn read_from(s: &Server, path: &str, offset: &str) -> Vec<u8> {
    let mut data = Vec::new();
    let mut offset = offset.to_string();
    loop {
        let r = get(s, path, &offset);
        expect(&r, 200, &format!("GET {path} at {offset}"));
        data.extend_from_slice(&r.body);
        let next = next_offset(&r);
        if r.header("stream-up-to-date") == Some("true") || next == offset {
            return data;
        }
        offset = next;
    }
}

pub fn producer_post(
    s: &Server,
    path: &str,
    id: &str,
    epoch: u64,
    seq: u64,
    body: &[u8],
) -> Response {
    let (epoch, seq) = (epoch.to_string(), seq.to_string());
    post(
        s,
        path,
        &[
            ("Content-Type", TEXT),
            ("Producer-Id", id),
            ("Producer-Epoch", &epoch),
            ("Producer-Seq", &seq),
        ],
        body,
    )
}

pub fn seq_post(s: &Server, path: &str, seq: &str, body: &[u8]) -> Response {
    post(
        s,
        path,
        &[("Content-Type", TEXT), ("Stream-Seq", seq)],
        body,
    )
}

/// The binary under test (as in `common`).
pub fn binary() -> PathBuf {
    match std::env::var_os("RILL_TEST_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_rill")),
    }
}

pub fn free_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    l.local_addr().unwrap()
}

/// Runs `rill serve` on `data_dir` with `args` on a fresh port and waits up
/// to `wait` for it to exit. Returns the exit code (`None`: still running
/// after `wait`, then killed) and everything it printed.
pub fn run_rill(data_dir: &Path, args: &[&str], wait: Duration) -> (Option<i32>, String) {
    let mut child = Command::new(binary())
        .arg("serve")
        .arg("--listen")
        .arg(free_addr().to_string())
        .arg("--data-dir")
        .arg(data_dir)
        .args(["--segment-bytes", "4194304", "--max-body-bytes", "2097152"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn rill");
    let deadline = Instant::now() + wait;
    let mut code = None;
    loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            code = Some(status.code().unwrap_or(-1));
            break;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            break;
        }
        thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("wait_with_output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (code, text)
}
