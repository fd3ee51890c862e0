//! A raw SSE client for black-box tests: one chunked `text/event-stream`
//! response read event by event (WHATWG field rules), strict about chunk
//! framing and the terminator, reusable for the next GET on the same
//! connection.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Response, build_request, find};

#[derive(Debug, Clone)]
pub struct Event {
    pub name: String,
    pub data: String,
}

impl Event {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data)
            .unwrap_or_else(|e| panic!("control data is not JSON ({e}): {:?}", self.data))
    }
}

/// A raw HTTP/1.1 connection reading one chunked SSE response event by
/// event (parsed per the WHATWG SSE rules), noticing the chunked terminator.
pub struct Sse {
    sock: TcpStream,
    addr: SocketAddr,
    raw: Vec<u8>,
    decoded: Vec<u8>,
    ended: bool,
    pub head: Response,
}

impl Sse {
    pub fn open(addr: SocketAddr, path: &str) -> Sse {
        let sock = TcpStream::connect(addr).expect("connect");
        sock.set_nodelay(true).unwrap();
        let mut sse = Sse {
            sock,
            addr,
            raw: Vec::new(),
            decoded: Vec::new(),
            ended: false,
            head: Response {
                status: 0,
                headers: Vec::new(),
                body: Vec::new(),
            },
        };
        sse.get(path);
        sse
    }

    /// Send a GET and read its response head.
    pub fn get(&mut self, path: &str) {
        let r = build_request(&self.addr, "GET", path, &[], b"");
        self.sock.write_all(&r).unwrap();
        self.decoded.clear();
        self.ended = false;
        let deadline = Instant::now() + Duration::from_secs(5);
        let end = loop {
            if let Some(i) = find(&self.raw, b"\r\n\r\n") {
                break i;
            }
            assert!(self.read_more(deadline), "connection closed before head");
        };
        let head: Vec<u8> = self.raw.drain(..end + 4).collect();
        let head = String::from_utf8(head[..end].to_vec()).unwrap();
        let mut lines = head.split("\r\n");
        let status = lines.next().unwrap().split(' ').nth(1).unwrap();
        self.head = Response {
            status: status.parse().unwrap(),
            headers: lines
                .map(|l| {
                    let (k, v) = l.split_once(':').unwrap();
                    (k.trim().to_string(), v.trim().to_string())
                })
                .collect(),
            body: Vec::new(),
        };
    }

    /// Reads more bytes; false on EOF. Panics at `deadline`.
    fn read_more(&mut self, deadline: Instant) -> bool {
        let now = Instant::now();
        assert!(
            now < deadline,
            "timed out; decoded so far {:?}",
            self.text()
        );
        self.sock.set_read_timeout(Some(deadline - now)).unwrap();
        let mut tmp = [0u8; 16 << 10];
        match self.sock.read(&mut tmp) {
            Ok(0) => false,
            Ok(n) => {
                self.raw.extend_from_slice(&tmp[..n]);
                true
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                panic!("timed out; decoded so far {:?}", self.text())
            }
            Err(e) => panic!("read: {e}"),
        }
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.decoded).into_owned()
    }

    /// Decodes the complete chunks in `raw`.
    fn decode(&mut self) {
        while !self.ended {
            let Some(i) = find(&self.raw, b"\r\n") else {
                return;
            };
            let line = std::str::from_utf8(&self.raw[..i]).unwrap();
            let size = usize::from_str_radix(line.split(';').next().unwrap().trim(), 16)
                .unwrap_or_else(|_| panic!("bad chunk size line {line:?}"));
            if size == 0 {
                if self.raw.len() < i + 4 {
                    return;
                }
                assert_eq!(&self.raw[i + 2..i + 4], b"\r\n", "no trailers expected");
                self.raw.drain(..i + 4);
                self.ended = true;
                return;
            }
            if self.raw.len() < i + 2 + size + 2 {
                return;
            }
            self.decoded
                .extend_from_slice(&self.raw[i + 2..i + 2 + size]);
            assert_eq!(&self.raw[i + 2 + size..i + 4 + size], b"\r\n");
            self.raw.drain(..i + 4 + size);
        }
    }

    /// The next event, or `None` once the response body ended.
    pub fn next(&mut self, timeout: Duration) -> Option<Event> {
        let deadline = Instant::now() + timeout;
        loop {
            self.decode();
            if let Some(i) = find(&self.decoded, b"\n\n") {
                let block: Vec<u8> = self.decoded.drain(..i + 2).collect();
                return Some(parse_event(&block[..i]));
            }
            if self.ended {
                assert!(
                    self.decoded.is_empty(),
                    "body ended inside an event: {:?}",
                    self.text()
                );
                return None;
            }
            assert!(
                self.read_more(deadline),
                "connection closed without the chunked terminator; decoded {:?}",
                self.text()
            );
        }
    }

    /// After the response ended: whether the server closes the connection
    /// (end of file, nothing more) within `timeout`.
    pub fn server_closes(&mut self, timeout: Duration) -> bool {
        assert!(self.ended, "the response has not ended");
        self.sock.set_read_timeout(Some(timeout)).unwrap();
        let mut tmp = [0u8; 64];
        matches!(self.sock.read(&mut tmp), Ok(0)) && self.raw.is_empty()
    }

    /// Sends raw `request` bytes on the same connection (the SSE response
    /// having ended) and returns what comes back, undecoded, once it ends
    /// with `suffix`.
    pub fn send_raw_until(&mut self, request: &[u8], suffix: &[u8]) -> String {
        self.sock.write_all(request).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !self.raw.ends_with(suffix) {
            assert!(self.read_more(deadline), "closed; got {:?}", self.raw);
        }
        String::from_utf8_lossy(&self.raw).into_owned()
    }

    /// The next event, which must exist.
    pub fn event(&mut self, timeout: Duration) -> Event {
        self.next(timeout)
            .unwrap_or_else(|| panic!("SSE body ended; expected another event"))
    }

    /// The next event, which must exist and be named `name`.
    pub fn expect(&mut self, name: &str, timeout: Duration) -> Event {
        let e = self
            .next(timeout)
            .unwrap_or_else(|| panic!("SSE body ended; expected a {name} event"));
        assert_eq!(e.name, name, "{e:?}");
        e
    }

    /// The next non-keep-alive event: skips controls that carry no news
    /// (same offset, up to date) while waiting for a data event.
    pub fn expect_data(&mut self, timeout: Duration) -> Event {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let e = self
                .next(left)
                .unwrap_or_else(|| panic!("SSE body ended; expected a data event"));
            if e.name == "data" {
                return e;
            }
            assert_eq!(e.name, "control", "{e:?}");
        }
    }
}

/// WHATWG SSE field parsing: `field: value` with one optional space
/// removed; `data` lines joined by LF; `event` names the event.
fn parse_event(block: &[u8]) -> Event {
    let text = std::str::from_utf8(block).expect("SSE is UTF-8");
    let mut name = "message".to_string();
    let mut data: Vec<&str> = Vec::new();
    for line in text.split('\n') {
        if line.starts_with(':') {
            continue;
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => name = value.to_string(),
            "data" => data.push(value),
            _ => {}
        }
    }
    Event {
        name,
        data: data.join("\n"),
    }
}
