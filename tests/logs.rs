//! Log lines (issue 7 "Logs"): every line the server writes is logfmt with
//! a level (`level=info shard=0 msg="..."`), prefixed with the syslog
//! priority journald reads when `JOURNAL_STREAM` is set; `--access-log true`
//! adds one `kind=access` line per answered request.

mod common;

use std::io::Read;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::req;

/// The server process, killed if a test panics before `stop` reaps it.
struct Running(Option<Child>);

impl Drop for Running {
    fn drop(&mut self) {
        if let Some(mut child) = self.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A server on a free port with extra env; returns it and its address.
fn spawn(args: &[&str], env: &[(&str, &str)]) -> (Running, std::net::SocketAddr, tempdir::Dir) {
    let dir = tempdir::Dir::new();
    let addr = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_rill"))
        .args(["serve", "--listen", &addr.to_string(), "--data-dir"])
        .arg(&dir.0)
        .args(["--segment-bytes", "4194304", "--max-body-bytes", "2097152"])
        .args(args)
        .envs(env.iter().copied())
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("spawn rill");
    let child = Running(Some(child));
    let deadline = Instant::now() + Duration::from_secs(10);
    while req_ok(addr).is_none() {
        assert!(Instant::now() < deadline, "rill did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    (child, addr, dir)
}

/// Whether the server answers `/v1/health/ready` with 200; any I/O error
/// (a listener accepting before its shard serves, say) means not yet.
fn req_ok(addr: std::net::SocketAddr) -> Option<()> {
    use std::io::Write;
    let mut stream =
        std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(100)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    let request =
        format!("GET /v1/health/ready HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).ok()?;
    let mut status = [0u8; 12];
    stream.read_exact(&mut status).ok()?;
    status.starts_with(b"HTTP/1.1 200").then_some(())
}

/// Stops the server (SIGTERM) and returns everything it wrote on stderr.
fn stop(mut running: Running) -> String {
    let mut child = running.0.take().expect("running");
    // SAFETY: kill only sends a signal to the child we spawned.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(child.wait().unwrap().success());
    stderr
}

mod tempdir {
    pub struct Dir(pub std::path::PathBuf);

    impl Dir {
        pub fn new() -> Dir {
            let dir = std::env::temp_dir().join(super::common::unique_name("rill-logs"));
            std::fs::create_dir_all(&dir).unwrap();
            Dir(dir)
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[test]
fn every_line_is_structured_and_requests_are_logged() {
    let (child, addr, _dir) = spawn(&["--cores", "2", "--access-log", "true"], &[]);
    let ct = [("Content-Type", "text/plain")];
    assert_eq!(req(addr, "PUT", "/v1/stream/logged", &ct, b"x").status, 201);
    assert_eq!(req(addr, "GET", "/v1/stream/missing", &[], b"").status, 404);
    // A request refused before its head parsed is logged too.
    let mut garbage = std::net::TcpStream::connect(addr).unwrap();
    std::io::Write::write_all(&mut garbage, b"\x16\x03\x01 not http\r\n\r\n").unwrap();
    let mut answer = String::new();
    let _ = std::io::Read::read_to_string(&mut garbage, &mut answer);
    assert!(answer.starts_with("HTTP/1.1 400 "), "{answer}");
    let stderr = stop(child);
    assert!(!stderr.is_empty());
    for line in stderr.lines() {
        assert!(line.starts_with("level="), "unstructured line: {line}");
    }
    assert!(stderr.contains("msg=\"listening on "), "{stderr}");
    let access: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains(" kind=access "))
        .collect();
    let created = access
        .iter()
        .find(|l| l.contains("method=PUT path=/v1/stream/logged status=201 us="));
    assert!(created.is_some(), "{access:?}");
    let missing = access
        .iter()
        .find(|l| l.contains("method=GET path=/v1/stream/missing status=404 us="));
    assert!(missing.is_some(), "{access:?}");
    let unparsed = access
        .iter()
        .find(|l| l.contains("method=- path=- status=400 us="));
    assert!(unparsed.is_some(), "{access:?}");
}

#[test]
fn journald_gets_priorities_and_no_access_log_by_default() {
    let (child, addr, _dir) = spawn(&["--cores", "1"], &[("JOURNAL_STREAM", "8:1234")]);
    assert_eq!(req(addr, "GET", "/v1/stream/missing", &[], b"").status, 404);
    let stderr = stop(child);
    for line in stderr.lines() {
        let prioritized = ["<3>level=error", "<4>level=warn", "<6>level=info"]
            .iter()
            .any(|p| line.starts_with(p));
        assert!(prioritized, "line without a journald priority: {line}");
    }
    assert!(!stderr.contains("kind=access"), "{stderr}");
}

/// A log line that cannot be written (stderr a closed pipe: a restarted
/// journal, a reader gone; or a file on a full disk) is dropped: the
/// request that logs it is still answered and the server keeps serving.
#[test]
fn an_unwritable_stderr_loses_lines_not_requests() {
    let (mut child, addr, _dir) = spawn(&["--cores", "1", "--access-log", "true"], &[]);
    drop(child.0.as_mut().unwrap().stderr.take());
    let ct = [("Content-Type", "text/plain")];
    for i in 0..20 {
        let path = format!("/v1/stream/unlogged-{i}");
        assert_eq!(req(addr, "PUT", &path, &ct, b"x").status, 201, "PUT {i}");
        assert_eq!(req(addr, "GET", &path, &[], b"").status, 200, "GET {i}");
    }
    let running = child.0.as_mut().unwrap();
    assert!(running.try_wait().unwrap().is_none(), "the server exited");
    // SAFETY: kill only sends a signal to the child we spawned.
    unsafe { libc::kill(running.id() as i32, libc::SIGTERM) };
    assert!(running.wait().unwrap().success());
}
