//! Shared helpers for black-box tests that start the real `rill` binary.
//!
//! std only, no async runtime: [`Server`] runs `rill serve` on a free
//! loopback port with its own temp data dir, and [`Conn`] is a minimal
//! HTTP/1.1 client over a blocking `TcpStream` (keep-alive, pipelining,
//! chunked bodies, raw bytes for malformed-input tests).
#![allow(dead_code)]

pub mod batch;
pub mod disk;
pub mod sse;

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long [`Server::start`] waits for the server to accept connections.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Read timeout of every [`Conn`].
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest response head [`Conn`] accepts.
const MAX_HEAD: usize = 1 << 20;

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

/// A parsed HTTP response.
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Response {
    /// The first header named `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as (lossy) UTF-8.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    fn has_token(&self, name: &str, token: &str) -> bool {
        self.headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case(name))
            .flat_map(|(_, v)| v.split(','))
            .any(|t| t.trim().eq_ignore_ascii_case(token))
    }
}

/// Why a response could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// The peer closed (or reset) the connection before a response head began.
    Closed,
    /// No bytes within the read timeout.
    Timeout,
    /// Anything else: I/O error mid-response, unparsable response, ...
    Other(String),
}

impl std::fmt::Display for ReadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadError::Closed => write!(f, "connection closed"),
            ReadError::Timeout => write!(f, "read timed out"),
            ReadError::Other(s) => write!(f, "{s}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Chunk {
    Size,
    Data(usize),
    DataEnd,
    Trailer,
    Done,
}

/// A blocking HTTP/1.1 client connection.
pub struct Conn {
    pub stream: TcpStream,
    addr: SocketAddr,
    /// Bytes read from the socket but not consumed yet.
    buf: Vec<u8>,
    /// Incremental chunked decoder state for [`Conn::read_chunked_until`].
    chunk: Chunk,
    decoded: Vec<u8>,
}

impl Conn {
    /// Sends a GET (a live read) on a fresh connection and checks that it
    /// is still waiting 300 ms later.
    pub fn waiting_get(addr: SocketAddr, path_and_query: &str) -> Conn {
        let mut c = Conn::open(addr);
        let request = c.build_request("GET", path_and_query, &[], b"");
        c.send_raw(&request);
        c.stream
            .set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        match c.try_read_head() {
            Err(ReadError::Timeout) => {}
            other => panic!("{path_and_query} should wait for data, got {other:?}"),
        }
        c.stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        c
    }

    pub fn open(addr: SocketAddr) -> Conn {
        let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        stream.set_write_timeout(Some(READ_TIMEOUT)).unwrap();
        stream.set_nodelay(true).unwrap();
        Conn {
            stream,
            addr,
            buf: Vec::new(),
            chunk: Chunk::Size,
            decoded: Vec::new(),
        }
    }

    /// Write bytes as they are. Panics on error.
    pub fn send_raw(&mut self, bytes: &[u8]) {
        self.try_send_raw(bytes)
            .unwrap_or_else(|e| panic!("write to {}: {e}", self.addr));
    }

    /// Write bytes as they are.
    pub fn try_send_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes)?;
        self.stream.flush()
    }

    /// Half-close: the server sees EOF after what was sent.
    pub fn shutdown_write(&mut self) {
        let _ = self.stream.shutdown(Shutdown::Write);
    }

    /// The bytes of a request: request line, `Host`, the given headers, a
    /// `Content-Length` when the body is non-empty or the method is PUT/POST
    /// (unless the caller gave `Content-Length` or `Transfer-Encoding`), then
    /// the body.
    pub fn build_request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Vec<u8> {
        build_request(&self.addr, method, path, headers, body)
    }

    /// Send one request and read its response (interim 1xx responses are
    /// skipped; HEAD responses have no body). Panics on I/O errors.
    pub fn request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Response {
        let req = self.build_request(method, path, headers, body);
        self.send_raw(&req);
        self.read_response_for(method)
    }

    /// Like [`Conn::request`] but returns errors instead of panicking.
    pub fn try_request(
        &mut self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Response, ReadError> {
        let req = self.build_request(method, path, headers, body);
        self.try_send_raw(&req)
            .map_err(|e| ReadError::Other(format!("write: {e}")))?;
        self.try_read_response_for(method)
    }

    /// Read the next (final) response to a non-HEAD request. Panics on error.
    pub fn read_response(&mut self) -> Response {
        self.read_response_for("GET")
    }

    /// Read the next (final) response to a `method` request. Panics on error.
    pub fn read_response_for(&mut self, method: &str) -> Response {
        self.try_read_response_for(method)
            .unwrap_or_else(|e| panic!("reading response ({method}) from {}: {e}", self.addr))
    }

    /// Read the next (final) response to a non-HEAD request.
    pub fn try_read_response(&mut self) -> Result<Response, ReadError> {
        self.try_read_response_for("GET")
    }

    /// Read the next final response, skipping interim 1xx responses (other
    /// than 101). The body is delimited by, in order: no body (HEAD, 1xx,
    /// 204, 304), chunked encoding, Content-Length, else end of stream.
    pub fn try_read_response_for(&mut self, method: &str) -> Result<Response, ReadError> {
        loop {
            let mut resp = self.try_read_head()?;
            if (100..200).contains(&resp.status) && resp.status != 101 {
                continue;
            }
            let no_body = method.eq_ignore_ascii_case("HEAD")
                || resp.status == 204
                || resp.status == 304
                || (100..200).contains(&resp.status);
            if no_body {
                return Ok(resp);
            }
            if resp.has_token("transfer-encoding", "chunked") {
                resp.body = self.read_chunked_body()?;
            } else if let Some(cl) = resp.header("content-length") {
                let n: usize = cl
                    .trim()
                    .parse()
                    .map_err(|_| ReadError::Other(format!("bad Content-Length {cl:?}")))?;
                resp.body = self.read_exact_body(n)?;
            } else {
                resp.body = self.read_to_eof()?;
            }
            return Ok(resp);
        }
    }

    /// Read only a response head (status line and headers), whatever its
    /// status (a `100 Continue` is returned as is). Panics on error.
    pub fn read_head(&mut self) -> Response {
        self.try_read_head()
            .unwrap_or_else(|e| panic!("reading response head from {}: {e}", self.addr))
    }

    /// Read only a response head (status line and headers).
    pub fn try_read_head(&mut self) -> Result<Response, ReadError> {
        let end = loop {
            if let Some(i) = find(&self.buf, b"\r\n\r\n") {
                break i;
            }
            if self.buf.len() > MAX_HEAD {
                return Err(ReadError::Other("response head too large".into()));
            }
            let had = !self.buf.is_empty();
            match self.fill() {
                Ok(0) if had => {
                    return Err(ReadError::Other(format!(
                        "connection closed in response head: {:?}",
                        String::from_utf8_lossy(&self.buf)
                    )));
                }
                Ok(0) => return Err(ReadError::Closed),
                Ok(_) => {}
                Err(e) if is_timeout(&e) => return Err(ReadError::Timeout),
                Err(e) if is_reset(&e) && !had => return Err(ReadError::Closed),
                Err(e) => return Err(ReadError::Other(format!("read: {e}"))),
            }
        };
        let head: Vec<u8> = self.buf.drain(..end + 4).collect();
        let head = String::from_utf8_lossy(&head[..end]).into_owned();
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap_or("");
        let mut parts = status_line.splitn(3, ' ');
        let version = parts.next().unwrap_or("");
        let status = parts.next().and_then(|s| s.parse::<u16>().ok());
        let status = match (version.starts_with("HTTP/1."), status) {
            (true, Some(s)) => s,
            _ => return Err(ReadError::Other(format!("bad status line {status_line:?}"))),
        };
        let mut headers = Vec::new();
        for line in lines {
            let Some((k, v)) = line.split_once(':') else {
                return Err(ReadError::Other(format!("bad header line {line:?}")));
            };
            headers.push((k.trim().to_string(), v.trim().to_string()));
        }
        self.chunk = Chunk::Size;
        self.decoded.clear();
        Ok(Response {
            status,
            headers,
            body: Vec::new(),
        })
    }

    /// After [`Conn::read_head`] of a chunked (e.g. SSE) response: decode body
    /// bytes until the decoded data contains `needle`, and return everything
    /// decoded up to and including the first occurrence (the rest is kept
    /// for the next call). Panics on timeout, EOF or end of the body.
    pub fn read_chunked_until(&mut self, needle: &[u8], timeout: Duration) -> Vec<u8> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(i) = find(&self.decoded, needle) {
                return self.decoded.drain(..i + needle.len()).collect();
            }
            self.decode_available()
                .unwrap_or_else(|e| panic!("bad chunked body: {e}"));
            if let Some(i) = find(&self.decoded, needle) {
                return self.decoded.drain(..i + needle.len()).collect();
            }
            if self.chunk == Chunk::Done {
                panic!(
                    "chunked body ended without {:?}; got {:?}",
                    String::from_utf8_lossy(needle),
                    String::from_utf8_lossy(&self.decoded)
                );
            }
            let now = Instant::now();
            if now >= deadline {
                panic!(
                    "timed out after {timeout:?} waiting for {:?}; got {:?}",
                    String::from_utf8_lossy(needle),
                    String::from_utf8_lossy(&self.decoded)
                );
            }
            self.stream
                .set_read_timeout(Some((deadline - now).max(Duration::from_millis(1))))
                .unwrap();
            let r = self.fill();
            self.stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
            match r {
                Ok(0) => panic!(
                    "connection closed waiting for {:?}; got {:?}",
                    String::from_utf8_lossy(needle),
                    String::from_utf8_lossy(&self.decoded)
                ),
                Ok(_) => {}
                Err(e) if is_timeout(&e) => {}
                Err(e) => panic!("read: {e}"),
            }
        }
    }

    /// Decode as much of `self.buf` as possible into `self.decoded`.
    fn decode_available(&mut self) -> Result<(), String> {
        loop {
            match self.chunk {
                Chunk::Size => {
                    let Some(i) = find(&self.buf, b"\r\n") else {
                        return Ok(());
                    };
                    let line: Vec<u8> = self.buf.drain(..i + 2).collect();
                    let line = String::from_utf8_lossy(&line[..i]).into_owned();
                    let hex = line.split(';').next().unwrap_or("").trim();
                    let size = usize::from_str_radix(hex, 16)
                        .map_err(|_| format!("bad chunk size line {line:?}"))?;
                    if size == 0 {
                        self.chunk = Chunk::Trailer;
                        continue;
                    }
                    self.chunk = Chunk::Data(size);
                }
                Chunk::Data(n) => {
                    if self.buf.is_empty() {
                        return Ok(());
                    }
                    let take = n.min(self.buf.len());
                    self.decoded.extend(self.buf.drain(..take));
                    self.chunk = if take == n {
                        Chunk::DataEnd
                    } else {
                        Chunk::Data(n - take)
                    };
                }
                Chunk::DataEnd => {
                    if self.buf.len() < 2 {
                        return Ok(());
                    }
                    if &self.buf[..2] != b"\r\n" {
                        return Err("missing CRLF after chunk data".into());
                    }
                    self.buf.drain(..2);
                    self.chunk = Chunk::Size;
                }
                Chunk::Trailer => {
                    // Trailer fields (ignored) up to the empty line.
                    let Some(j) = find(&self.buf, b"\r\n") else {
                        return Ok(());
                    };
                    self.buf.drain(..j + 2);
                    if j == 0 {
                        self.chunk = Chunk::Done;
                    }
                }
                Chunk::Done => return Ok(()),
            }
        }
    }

    fn read_chunked_body(&mut self) -> Result<Vec<u8>, ReadError> {
        self.chunk = Chunk::Size;
        self.decoded.clear();
        loop {
            self.decode_available().map_err(ReadError::Other)?;
            if self.chunk == Chunk::Done {
                return Ok(std::mem::take(&mut self.decoded));
            }
            match self.fill() {
                Ok(0) => return Err(ReadError::Other("connection closed in chunked body".into())),
                Ok(_) => {}
                Err(e) => return Err(ReadError::Other(format!("read chunked body: {e}"))),
            }
        }
    }

    fn read_exact_body(&mut self, n: usize) -> Result<Vec<u8>, ReadError> {
        while self.buf.len() < n {
            match self.fill() {
                Ok(0) => {
                    return Err(ReadError::Other(format!(
                        "connection closed after {} of {n} body bytes",
                        self.buf.len()
                    )));
                }
                Ok(_) => {}
                Err(e) => return Err(ReadError::Other(format!("read body: {e}"))),
            }
        }
        Ok(self.buf.drain(..n).collect())
    }

    fn read_to_eof(&mut self) -> Result<Vec<u8>, ReadError> {
        loop {
            match self.fill() {
                Ok(0) => return Ok(std::mem::take(&mut self.buf)),
                Ok(_) => {}
                // A server that closes right after an error response may
                // reset the connection (unread request bytes): end of body.
                Err(e) if is_reset(&e) => return Ok(std::mem::take(&mut self.buf)),
                Err(e) => return Err(ReadError::Other(format!("read body to EOF: {e}"))),
            }
        }
    }

    /// Is the connection closed by the peer (EOF or reset) within `wait`?
    /// Pending unread bytes count as "not closed".
    pub fn is_closed_within(&mut self, wait: Duration) -> bool {
        if !self.buf.is_empty() {
            return false;
        }
        self.stream.set_read_timeout(Some(wait)).unwrap();
        let r = self.fill();
        self.stream.set_read_timeout(Some(READ_TIMEOUT)).unwrap();
        match r {
            Ok(0) => true,
            Ok(_) => false,
            Err(e) => is_reset(&e),
        }
    }

    fn fill(&mut self) -> io::Result<usize> {
        let mut tmp = [0u8; 64 * 1024];
        loop {
            match self.stream.read(&mut tmp) {
                Ok(n) => {
                    self.buf.extend_from_slice(&tmp[..n]);
                    return Ok(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
    }
}

/// The bytes of a request (see [`Conn::build_request`]).
pub fn build_request(
    addr: &SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Vec<u8> {
    let mut out = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\n");
    let mut has_length = false;
    for (k, v) in headers {
        if k.eq_ignore_ascii_case("content-length") || k.eq_ignore_ascii_case("transfer-encoding") {
            has_length = true;
        }
        out.push_str(&format!("{k}: {v}\r\n"));
    }
    let needs_length = !body.is_empty() || method == "PUT" || method == "POST";
    if needs_length && !has_length {
        out.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    out.push_str("\r\n");
    let mut bytes = out.into_bytes();
    bytes.extend_from_slice(body);
    bytes
}

/// One request on a fresh connection.
pub fn req(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    Conn::open(addr).request(method, path, headers, body)
}

/// Percent-encode everything but RFC 3986 unreserved characters (for query
/// values such as offsets).
pub fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if needle.is_empty() {
        return Some(0);
    }
    hay.windows(needle.len()).position(|w| w == needle)
}

fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
    )
}

fn is_reset(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof
    )
}
