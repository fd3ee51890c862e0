//! The server under test: [`Server`] runs the real `rill serve` on a free
//! loopback port with a temp data dir of its own (or one the test gives),
//! waits until it answers `/v1/health`, and kills it and removes its dirs
//! on drop; [`unique_name`] names streams and dirs.

use std::fs::{self, File};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long [`Server::start`] waits for the server to accept connections.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A name unique within this test process run (and very likely across runs).
pub fn unique_name(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("{prefix}-{}-{n}-{nanos}", std::process::id())
}

/// Whether the server answers `GET /v1/health` with 200. A bare TCP
/// connect is not enough: right after a SIGKILL the killed process's
/// listener can linger (its io_uring teardown holds it) and accept
/// connections that are then reset.
fn health_ok(addr: &SocketAddr) -> bool {
    let Ok(mut stream) = TcpStream::connect_timeout(addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let request = format!("GET /v1/health HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    if stream.write_all(request.as_bytes()).is_err() {
        return false;
    }
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).is_ok() && head.starts_with(b"HTTP/1.1 200")
}

/// The binary under test: `RILL_TEST_BIN` if set (to point the tests at
/// another build), else the `rill` binary Cargo built for this test.
fn binary() -> PathBuf {
    match std::env::var_os("RILL_TEST_BIN") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_rill")),
    }
}

/// A port free now and never handed to another server of this test
/// process: the kernel may give a port back to `bind(0)` once its probe
/// closes, and a server that then waits for the port to be free would let
/// its test's readiness check reach another test's server.
fn free_port() -> u16 {
    static HANDED: std::sync::Mutex<Vec<u16>> = std::sync::Mutex::new(Vec::new());
    let mut handed = HANDED.lock().unwrap_or_else(|e| e.into_inner());
    loop {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = l.local_addr().expect("local_addr").port();
        if !handed.contains(&port) {
            handed.push(port);
            return port;
        }
    }
}

/// A running `rill serve` process. Dropping it kills the process and removes
/// its data dir.
pub struct Server {
    pub addr: SocketAddr,
    /// The directory passed as `--data-dir`.
    pub data_dir: PathBuf,
    child: Child,
    /// Holds `data_dir` and the stderr log (kept outside the data dir so the
    /// server never sees a foreign file there).
    root: PathBuf,
    stderr_path: PathBuf,
    args: Vec<String>,
}

impl Server {
    /// Start `rill serve --listen 127.0.0.1:PORT --data-dir DIR
    /// --long-poll-timeout-ms 1000 ARGS...` and wait until it accepts TCP
    /// connections. Retries on a new port (up to 3 attempts) if the process
    /// exits early, e.g. because the port was taken meanwhile.
    pub fn start(args: &[&str]) -> Server {
        let root = std::env::temp_dir().join(unique_name("rill-test"));
        Self::start_rooted(root.clone(), root.join("data"), args)
    }

    /// `start` with the data dir at `data_dir` (on a filesystem of the
    /// test's own, say), which the test removes; the stderr log stays in a
    /// temp dir of its own.
    pub fn start_in(data_dir: PathBuf, args: &[&str]) -> Server {
        let root = std::env::temp_dir().join(unique_name("rill-test"));
        Self::start_rooted(root, data_dir, args)
    }

    /// Starts with the stderr log in `root`, which is removed on drop.
    fn start_rooted(root: PathBuf, data_dir: PathBuf, args: &[&str]) -> Server {
        fs::create_dir_all(&root).expect("create temp dir");
        fs::create_dir_all(&data_dir).expect("create data dir");
        let stderr_path = root.join("server.stderr.log");
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();

        let mut last_err = String::new();
        for attempt in 1..=3 {
            let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
            let child = spawn(&addr, &data_dir, &stderr_path, &args);
            let mut server = Server {
                addr,
                data_dir: data_dir.clone(),
                child,
                root: root.clone(),
                stderr_path: stderr_path.clone(),
                args: args.clone(),
            };
            match server.wait_ready() {
                Ok(()) => return server,
                Err(e) => {
                    last_err = format!("attempt {attempt} on {addr}: {e}");
                    // Dropping would delete the data dir; keep it for the
                    // next attempt and only reap the process.
                    let _ = server.child.kill();
                    let _ = server.child.wait();
                    std::mem::forget(server);
                }
            }
        }
        let stderr = fs::read_to_string(&stderr_path).unwrap_or_default();
        let _ = fs::remove_dir_all(&root);
        panic!(
            "rill did not start after 3 attempts; last: {last_err}\n--- server stderr ---\n{stderr}"
        );
    }

    /// Wait for a TCP connect to succeed. Panics (with the stderr contents)
    /// if the server is alive but not listening after [`START_TIMEOUT`];
    /// returns `Err` if the process exited.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Err(format!(
                    "server exited early with {status}: {}",
                    self.stderr()
                ));
            }
            if health_ok(&self.addr) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let _ = self.child.kill();
                panic!(
                    "rill did not accept connections on {} within {:?}\n--- server stderr ---\n{}",
                    self.addr,
                    START_TIMEOUT,
                    self.stderr()
                );
            }
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL the server (no graceful shutdown) and reap it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Kill the server if it is running, then start it again with the same
    /// port, data dir and arguments. Retries for a short while if the port is
    /// not free yet.
    pub fn restart(&mut self) {
        self.kill();
        let mut last_err = String::new();
        for _ in 0..10 {
            self.child = spawn(&self.addr, &self.data_dir, &self.stderr_path, &self.args);
            match self.wait_ready() {
                Ok(()) => return,
                Err(e) => {
                    last_err = e;
                    thread::sleep(Duration::from_millis(200));
                }
            }
        }
        panic!("rill did not restart on {}: {last_err}", self.addr);
    }

    /// Like `restart`, with other arguments (same port and data dir).
    pub fn restart_with(&mut self, args: &[&str]) {
        self.args = args.iter().map(|a| a.to_string()).collect();
        self.restart();
    }

    /// Like `restart_with`, without waiting until it serves (a test that
    /// signals it while it starts).
    pub fn restart_unready(&mut self, args: &[&str]) {
        self.kill();
        self.args = args.iter().map(|a| a.to_string()).collect();
        self.child = spawn(&self.addr, &self.data_dir, &self.stderr_path, &self.args);
    }

    /// Everything the server wrote to stderr (and stdout) so far.
    pub fn stderr(&self) -> String {
        fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    /// Waits (up to [`START_TIMEOUT`]) until stderr contains `needle`; its
    /// stderr then. A shard answers as soon as it has recovered, so a log
    /// line written once every shard has may come after the first answer.
    pub fn stderr_once_it_says(&self, needle: &str) -> String {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let text = self.stderr();
            if text.contains(needle) || Instant::now() >= deadline {
                return text;
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// `http://127.0.0.1:PORT{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Is the server process still running?
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The server's peak resident memory so far (VmHWM), in bytes.
    pub fn peak_rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
        let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
        kib << 10
    }

    /// Sends `signal` (e.g. `libc::SIGTERM`) and waits up to `wait` for the
    /// process to exit; returns its exit code if it exited.
    pub fn signal_and_wait(&mut self, signal: i32, wait: Duration) -> Option<i32> {
        // SAFETY: kill(2) on our own child's pid with a plain signal number.
        unsafe { libc::kill(self.child.id() as i32, signal) };
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.code();
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if thread::panicking() {
            eprintln!("---- server stderr ({}) ----\n{}", self.addr, self.stderr());
        }
        let _ = fs::remove_dir_all(&self.root);
    }
}

fn spawn(addr: &SocketAddr, data_dir: &PathBuf, stderr_path: &PathBuf, args: &[String]) -> Child {
    let log = File::options()
        .create(true)
        .append(true)
        .open(stderr_path)
        .expect("open server stderr log");
    let log2 = log.try_clone().expect("clone log fd");
    let bin = binary();
    Command::new(&bin)
        .arg("serve")
        .arg("--listen")
        .arg(addr.to_string())
        .arg("--data-dir")
        .arg(data_dir)
        .arg("--long-poll-timeout-ms")
        .arg("1000")
        // Small log segments: every server start preallocates one per shard.
        .args(["--segment-bytes", "4194304", "--max-body-bytes", "2097152"])
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(log2))
        .stderr(Stdio::from(log))
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {}: {e}", bin.display()))
}
