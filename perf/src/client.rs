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
    pub up_to_date: bool,
    pub content_type: Option<String>,
    pub body_len: usize,
    /// The whole response body (already read; cloning is cheap).
    pub body: Bytes,
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
            let stream = TcpStream::connect(&self.target.authority).await?;
            stream.set_nodelay(true)?;
            let (sender, conn) =
                hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
            tokio::spawn(async move {
                let _ = conn.await;
            });
            self.sender = Some(sender);
        }
        Ok(self.sender.as_mut().expect("connected above"))
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
        let result = self.send_inner(method, path, content_type, body).await;
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
    ) -> Result<Reply, Error> {
        let uri = format!("{}{}", self.target.prefix, path);
        let host = self.target.authority.clone();
        let sender = self.connect().await?;
        sender.ready().await?;
        let mut request = Request::builder()
            .method(method)
            .uri(uri)
            .header(hyper::header::HOST, host);
        if let Some(ct) = content_type {
            request = request.header(hyper::header::CONTENT_TYPE, ct);
        }
        let response = sender.send_request(request.body(Full::new(body))?).await?;
        let status = response.status();
        let headers = response.headers();
        let next_offset = headers
            .get("stream-next-offset")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let up_to_date = headers.contains_key("stream-up-to-date");
        let content_type = headers
            .get(hyper::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = response.into_body().collect().await?.to_bytes();
        Ok(Reply {
            status,
            next_offset,
            up_to_date,
            content_type,
            body_len: body.len(),
            body,
        })
    }
}
