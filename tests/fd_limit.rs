//! The descriptor limit as a connection limit (`shard/fd_spare.rs`): once
//! the process has no descriptor left, clients waiting to connect get the
//! 503 of a full server, not silence; the server serves again once the
//! limit allows.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{Server, req};

/// Sets the soft descriptor limit of process `pid`.
fn set_fd_limit(pid: u32, soft: u64) {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: reads the limit of a process of ours into `old`.
    let got = unsafe { libc::prlimit(pid as i32, libc::RLIMIT_NOFILE, std::ptr::null(), &mut old) };
    assert_eq!(got, 0, "prlimit read");
    let new = libc::rlimit {
        rlim_cur: soft,
        rlim_max: old.rlim_max,
    };
    // SAFETY: sets the soft limit of a process of ours below its hard one.
    let set = unsafe { libc::prlimit(pid as i32, libc::RLIMIT_NOFILE, &new, std::ptr::null_mut()) };
    assert_eq!(set, 0, "prlimit set");
}

fn open_fds(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count() as u64
}

/// The status of the answer to a health check on a new connection, or
/// `None` when none came within the timeout.
fn status_of_new_client(s: &Server) -> (TcpStream, Option<u16>) {
    let mut c = TcpStream::connect(s.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let _ = c.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut head = [0u8; 12];
    let status = match c.read_exact(&mut head) {
        Ok(()) => std::str::from_utf8(&head[9..12])
            .ok()
            .and_then(|s| s.parse().ok()),
        Err(_) => None,
    };
    (c, status)
}

#[test]
fn clients_past_the_descriptor_limit_get_503() {
    let s = Server::start(&["--cores", "1"]);
    let pid = s.pid();
    set_fd_limit(pid, open_fds(pid) + 4);
    // Each client keeps its connection (and the server's descriptor).
    let clients: Vec<(TcpStream, Option<u16>)> =
        (0..12).map(|_| status_of_new_client(&s)).collect();
    let statuses: Vec<Option<u16>> = clients.iter().map(|(_, status)| *status).collect();
    assert!(
        statuses.iter().all(|st| matches!(st, Some(200 | 503))),
        "every client answered: {statuses:?}"
    );
    assert!(statuses.contains(&Some(503)), "{statuses:?}");
    drop(clients);
    set_fd_limit(pid, 4096);
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(req(s.addr, "GET", "/v1/health", &[], b"").status, 200);
}
