//! Shared helpers for black-box tests that start the real `rill` binary.
//!
//! std only, no async runtime: [`Server`] runs `rill serve` on a free
//! loopback port with its own temp data dir (`server.rs`), and [`Conn`] is a minimal
//! HTTP/1.1 client over a blocking `TcpStream` (keep-alive, pipelining,
//! chunked bodies, raw bytes for malformed-input tests).
#![allow(dead_code)]

pub mod batch;
pub mod disk;
mod server;
pub mod sse;

#[allow(unused_imports)]
pub use server::{START_TIMEOUT, Server, unique_name};

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Read timeout of every [`Conn`].
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Largest response head [`Conn`] accepts.
const MAX_HEAD: usize = 1 << 20;

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
        // Bytes before `searched` hold no needle: each search covers what
        // arrived since (a long body is not searched again per read).
        let mut searched = 0;
        loop {
            if let Some(i) = find(&self.decoded[searched..], needle) {
                return self.decoded.drain(..searched + i + needle.len()).collect();
            }
            searched = self.decoded.len().saturating_sub(needle.len() - 1);
            self.decode_available()
                .unwrap_or_else(|e| panic!("bad chunked body: {e}"));
            if let Some(i) = find(&self.decoded[searched..], needle) {
                return self.decoded.drain(..searched + i + needle.len()).collect();
            }
            searched = self.decoded.len().saturating_sub(needle.len() - 1);
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
