//! One keep-alive HTTP/1.1 connection and the requests the scenarios send.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// Where the server is: `host:port` for the socket and a path prefix
/// (`http://127.0.0.1:4437/base` gives `/base`).
#[derive(Clone, Debug)]
pub struct Target {
    pub authority: String,
    pub prefix: String,
}

impl Target {
    pub fn parse(url: &str) -> Result<Target, Error> {
        let uri: hyper::Uri = url.parse()?;
        if uri.scheme_str() != Some("http") {
            return Err(format!("only http:// URLs are supported, got {url}").into());
        }
        let authority = uri
            .authority()
            .ok_or_else(|| format!("no host in {url}"))?
            .to_string();
        let authority = if authority.contains(':') {
            authority
        } else {
            format!("{authority}:80")
        };
        let prefix = uri.path().trim_end_matches('/').to_string();
        Ok(Target { authority, prefix })
    }
}

/// The parts of a response the scenarios look at.
pub struct Reply {
    pub status: StatusCode,
    pub next_offset: Option<String>,
    pub cursor: Option<String>,
    pub up_to_date: bool,
    pub content_type: Option<String>,
    pub body_len: usize,
    /// The whole response body (already read; cloning is cheap); empty
    /// from `Conn::get_counted`.
    pub body: Bytes,
}

/// Opens one keep-alive HTTP/1.1 connection (TCP_NODELAY); its driver runs
/// as a task of its own.
pub async fn open(target: &Target) -> Result<SendRequest<Full<Bytes>>, Error> {
    let stream = TcpStream::connect(&target.authority).await?;
    stream.set_nodelay(true)?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    Ok(sender)
}

/// A request to `path` under the target's prefix, with its Host header.
pub fn request(target: &Target, method: Method, path: &str) -> hyper::http::request::Builder {
    Request::builder()
        .method(method)
        .uri(format!("{}{}", target.prefix, path))
        .header(hyper::header::HOST, target.authority.as_str())
}

pub struct Conn {
    target: Target,
    sender: Option<SendRequest<Full<Bytes>>>,
}

impl Conn {
    pub fn new(target: Target) -> Conn {
        Conn {
            target,
            sender: None,
        }
    }

    async fn connect(&mut self) -> Result<&mut SendRequest<Full<Bytes>>, Error> {
        if self.sender.as_ref().is_none_or(|s| s.is_closed()) {
            self.sender = Some(open(&self.target).await?);
        }
        Ok(self.sender.as_mut().expect("connected above"))
    }

    /// Opens the connection now rather than on the first request.
    pub async fn open(&mut self) -> Result<(), Error> {
        self.connect().await.map(|_| ())
    }

    /// Sends one request on the connection (reconnecting if it was closed)
    /// and reads the whole response body. A transport error drops the
    /// connection so the next call opens a new one.
    pub async fn send(
        &mut self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Bytes,
    ) -> Result<Reply, Error> {
        let result = self
            .send_inner(method, path, content_type, body, true)
            .await;
        if result.is_err() {
            self.sender = None;
        }
        result
    }

    /// A GET whose body is counted as it arrives and not kept (`body` is
    /// empty): what a reader that processes a stream as it comes costs,
    /// when one answer may carry hundreds of MiB (a whole catch-up).
    pub async fn get_counted(&mut self, path: &str) -> Result<Reply, Error> {
        let result = self
            .send_inner(Method::GET, path, None, Bytes::new(), false)
            .await;
        if result.is_err() {
            self.sender = None;
        }
        result
    }

    async fn send_inner(
        &mut self,
        method: Method,
        path: &str,
        content_type: Option<&str>,
        body: Bytes,
        keep_body: bool,
    ) -> Result<Reply, Error> {
        let mut request = request(&self.target, method, path);
        let sender = self.connect().await?;
        sender.ready().await?;
        if let Some(ct) = content_type {
            request = request.header(hyper::header::CONTENT_TYPE, ct);
        }
        let response = sender.send_request(request.body(Full::new(body))?).await?;
        let status = response.status();
        let headers = response.headers();
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        let next_offset = header("stream-next-offset");
        let cursor = header("stream-cursor");
        let up_to_date = headers.contains_key("stream-up-to-date");
        let content_type = header("content-type");
        let (body_len, body) = match keep_body {
            true => {
                let body = response.into_body().collect().await?.to_bytes();
                (body.len(), body)
            }
            false => (count_body(response.into_body()).await?, Bytes::new()),
        };
        Ok(Reply {
            status,
            next_offset,
            cursor,
            up_to_date,
            content_type,
            body_len,
            body,
        })
    }
}

/// Reads a response body to its end, counting its bytes.
async fn count_body(mut body: hyper::body::Incoming) -> Result<usize, Error> {
    let mut bytes = 0;
    while let Some(frame) = body.frame().await {
        bytes += frame?.data_ref().map_or(0, Bytes::len);
    }
    Ok(bytes)
}
