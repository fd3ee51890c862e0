//! A subscriber's raw HTTP/1.1 connection for the `fanout` scenario: it
//! writes each GET itself and decodes the chunked `text/event-stream`
//! response in place, handing every chunk's bytes to the caller. Through
//! hyper's body channel (a task wake-up and a frame per chunk) the
//! generator spent more CPU per delivery than the server spent sending
//! it, on the same two cores (perf/RESULTS.md). Keep-alive: after the
//! terminating chunk the connection takes the next GET unless the server
//! said `Connection: close`.

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::client::{Error, Target};

/// Largest response head accepted.
const MAX_HEAD: usize = 64 << 10;

pub struct SseConn {
    stream: TcpStream,
    buf: Vec<u8>,
    /// Where the unread bytes of `buf` start.
    at: usize,
    /// Whether the connection may carry another request.
    pub reusable: bool,
}

impl SseConn {
    pub async fn open(target: &Target) -> Result<SseConn, Error> {
        let stream = TcpStream::connect(&target.authority).await?;
        stream.set_nodelay(true)?;
        Ok(SseConn {
            stream,
            buf: Vec::with_capacity(16 << 10),
            at: 0,
            reusable: true,
        })
    }

    /// Sends `GET path` and reads the response head; returns the status.
    /// A non-200 answer leaves the connection unusable (its body unread).
    pub async fn get(&mut self, target: &Target, path: &str) -> Result<u16, Error> {
        let request = format!(
            "GET {}{path} HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n\r\n",
            target.prefix, target.authority
        );
        self.stream.write_all(request.as_bytes()).await?;
        let end = loop {
            if let Some(i) = memchr::memmem::find(&self.buf[self.at..], b"\r\n\r\n") {
                break self.at + i;
            }
            if self.buf.len() - self.at > MAX_HEAD {
                return Err("response head too large".into());
            }
            self.fill().await?;
        };
        let head = String::from_utf8_lossy(&self.buf[self.at..end]).to_ascii_lowercase();
        self.at = end + 4;
        let status = head
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse::<u16>().ok())
            .ok_or("malformed status line")?;
        let header = |name: &str| head.lines().any(|l| l.replace(' ', "") == name);
        self.reusable = status == 200 && !header("connection:close");
        if status == 200 && !header("transfer-encoding:chunked") {
            return Err("SSE response is not chunked".into());
        }
        Ok(status)
    }

    /// Reads the chunked body to its terminating chunk, calling `on_data`
    /// with each chunk's data as soon as the whole chunk is in.
    pub async fn body(&mut self, mut on_data: impl FnMut(&[u8])) -> Result<(), Error> {
        loop {
            let Some((size, data_at)) = self.complete_chunk()? else {
                self.fill().await?;
                continue;
            };
            self.at = data_at + size + 2;
            if size == 0 {
                return Ok(());
            }
            on_data(&self.buf[data_at..data_at + size]);
        }
    }

    /// The next chunk's size and data start, once the whole chunk (and its
    /// CRLF) is in the buffer.
    fn complete_chunk(&self) -> Result<Option<(usize, usize)>, Error> {
        let Some((size, data_at)) = self.chunk_head()? else {
            return Ok(None);
        };
        if self.buf.len() < data_at + size + 2 {
            return Ok(None);
        }
        if &self.buf[data_at + size..data_at + size + 2] != b"\r\n" {
            return Err("chunk not followed by CRLF".into());
        }
        Ok(Some((size, data_at)))
    }

    /// The next chunk's size and where its data starts, once its size line
    /// is in the buffer.
    fn chunk_head(&self) -> Result<Option<(usize, usize)>, Error> {
        let rest = &self.buf[self.at..];
        let Some(eol) = memchr::memmem::find(rest, b"\r\n") else {
            return Ok(None);
        };
        let line = std::str::from_utf8(&rest[..eol]).map_err(|_| "bad chunk size")?;
        let hex = line.split(';').next().unwrap_or("").trim();
        let size =
            usize::from_str_radix(hex, 16).map_err(|_| format!("bad chunk size {line:?}"))?;
        Ok(Some((size, self.at + eol + 2)))
    }

    /// Reads more bytes, first dropping the consumed ones.
    async fn fill(&mut self) -> Result<(), Error> {
        if self.at > 0 {
            self.buf.drain(..self.at);
            self.at = 0;
        }
        self.buf.reserve(16 << 10);
        if self.stream.read_buf(&mut self.buf).await? == 0 {
            return Err("connection closed mid-response".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Serves one canned response, written a few bytes at a time.
    async fn serve_once(response: &'static [u8]) -> Target {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let authority = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = [0u8; 1024];
            let _ = socket.read(&mut request).await.unwrap();
            for piece in response.chunks(3) {
                socket.write_all(piece).await.unwrap();
                socket.flush().await.unwrap();
            }
        });
        Target {
            authority,
            prefix: String::new(),
        }
    }

    #[tokio::test]
    async fn decodes_chunks_cut_anywhere_and_stops_at_the_last_chunk() {
        let target = serve_once(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
              Transfer-Encoding: chunked\r\n\r\n\
              6\r\nevent:\r\na;ext=1\r\n data:xy\n\n\r\n0\r\n\r\n",
        )
        .await;
        let mut conn = SseConn::open(&target).await.unwrap();
        assert_eq!(conn.get(&target, "/s?live=sse").await.unwrap(), 200);
        let mut chunks = Vec::new();
        conn.body(|data| chunks.push(data.to_vec())).await.unwrap();
        assert_eq!(chunks, [b"event:".to_vec(), b" data:xy\n\n".to_vec()]);
        assert!(conn.reusable);
    }

    #[tokio::test]
    async fn a_body_cut_short_is_an_error() {
        let target = serve_once(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
              a\r\nshort",
        )
        .await;
        let mut conn = SseConn::open(&target).await.unwrap();
        assert_eq!(conn.get(&target, "/s").await.unwrap(), 200);
        assert!(!conn.reusable);
        assert!(conn.body(|_| {}).await.is_err());
    }
}
