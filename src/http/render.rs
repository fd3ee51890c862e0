//! Response serialization: status line, the headers every response carries
//! (PROTOCOL.md §10.7 browser security headers, CORS for browser clients),
//! Content-Length bodies and chunked streaming bodies (SSE).

use crate::protocol::Response;

/// Request headers a browser may send cross-origin (CORS preflight).
pub const ALLOW_HEADERS: &str = "content-type, authorization, if-match, if-none-match, \
    cache-control, \
    stream-seq, stream-ttl, stream-expires-at, stream-closed, producer-id, producer-epoch, \
    producer-seq, stream-forked-from, stream-fork-offset, stream-fork-sub-offset, \
    stream-attrs, stream-snapshot-match, stream-record-match, last-event-id";
/// Response headers a browser client may read.
pub const EXPOSE_HEADERS: &str = "stream-next-offset, stream-cursor, stream-up-to-date, \
    stream-closed, stream-ttl, stream-expires-at, stream-sse-data-encoding, \
    stream-data-content-type, stream-extensions, producer-epoch, producer-seq, \
    producer-expected-seq, producer-received-seq, stream-record-start, stream-record-next, \
    stream-record-first, stream-snapshot-offset, stream-snapshot-digest, etag, content-type, \
    location, retry-after";

pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        400 => "Bad Request",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        410 => "Gone",
        412 => "Precondition Failed",
        413 => "Content Too Large",
        414 => "URI Too Long",
        415 => "Unsupported Media Type",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        503 => "Service Unavailable",
        505 => "HTTP Version Not Supported",
        507 => "Insufficient Storage",
        _ => "Unknown",
    }
}

/// How the body of a response is framed on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Framing {
    /// `Content-Length` (omitted where the status forbids a body).
    Length,
    /// `Content-Length` of a body the caller writes after the head, in
    /// pieces (a whole catch-up of bytes).
    Sized(u64),
    /// `Transfer-Encoding: chunked`, for streamed bodies.
    Chunked,
    /// No length: the body ends when the connection closes (RFC 9112
    /// §6.3), for streamed bodies to HTTP/1.0 clients.
    UntilClose,
}

/// Whether the connection stays open after a response, and whether the
/// response must say so: an HTTP/1.0 client takes its connection as closing
/// unless the answer carries `Connection: keep-alive` (RFC 9112 §9.3 and
/// its Appendix C.2.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Persistence {
    Close,
    KeepAlive,
    /// Kept open for an HTTP/1.0 client, which must be told.
    KeepAliveAnnounced,
}

impl Persistence {
    pub fn of(keep_alive: bool, http11: bool) -> Persistence {
        match (keep_alive, http11) {
            (false, _) => Persistence::Close,
            (true, true) => Persistence::KeepAlive,
            (true, false) => Persistence::KeepAliveAnnounced,
        }
    }

    pub fn alive(self) -> bool {
        self != Persistence::Close
    }

    /// Closes unless `stays` too.
    pub fn and(self, stays: bool) -> Persistence {
        match stays {
            true => self,
            false => Persistence::Close,
        }
    }
}

/// How a streamed body (SSE, bootstrap) goes on the wire: chunked to
/// HTTP/1.1 clients, raw until the connection closes to HTTP/1.0 ones
/// (RFC 9112 §6.1: no Transfer-Encoding in answers to HTTP/1.0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Streamed {
    chunked: bool,
}

impl Streamed {
    pub fn for_request(http11: bool) -> Streamed {
        Streamed { chunked: http11 }
    }

    pub fn framing(self) -> Framing {
        match self.chunked {
            true => Framing::Chunked,
            false => Framing::UntilClose,
        }
    }

    /// Whether the connection may serve another request after the body.
    pub fn keeps_alive(self) -> bool {
        self.chunked
    }

    /// Appends `data` as the next piece of the body.
    pub fn frame(self, data: &[u8], out: &mut Vec<u8>) {
        match self.chunked {
            true => chunk(data, out),
            false => out.extend_from_slice(data),
        }
    }

    /// A piece already framed as a chunk (shared by many responses), as
    /// this body sends it.
    pub fn from_chunk(self, framed: &bytes::Bytes) -> bytes::Bytes {
        if self.chunked || framed.is_empty() {
            return framed.clone();
        }
        let data_at = memchr::memmem::find(framed, b"\r\n").expect("a chunk has a size line") + 2;
        framed.slice(data_at..framed.len() - 2)
    }

    /// What ends the body.
    pub fn end(self) -> &'static [u8] {
        match self.chunked {
            true => LAST_CHUNK,
            false => b"",
        }
    }
}

/// Writes the status line and headers of `resp`, then its body unless the
/// request was HEAD or the body is streamed.
pub fn encode(
    resp: &Response,
    framing: Framing,
    persistence: Persistence,
    head_request: bool,
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(resp.status.to_string().as_bytes());
    out.push(b' ');
    out.extend_from_slice(reason(resp.status).as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in &resp.headers {
        push_header(out, name, value);
    }
    crate::clock::with_http_date_now(|date| push_header(out, "date", date));
    push_header(out, "x-content-type-options", "nosniff");
    push_header(out, "cross-origin-resource-policy", "cross-origin");
    push_header(out, "access-control-allow-origin", "*");
    push_header(out, "access-control-expose-headers", EXPOSE_HEADERS);
    let bodiless = resp.status == 204 || resp.status == 304 || resp.status < 200;
    // A HEAD answered without the GET's body cannot know its length, and
    // RFC 9110 §8.6 forbids a Content-Length that differs from it.
    let unknown_length = head_request && resp.body.is_empty();
    match framing {
        Framing::Chunked => push_header(out, "transfer-encoding", "chunked"),
        Framing::Length if !bodiless && !unknown_length => {
            push_header(out, "content-length", &resp.body.len().to_string())
        }
        Framing::Sized(len) if !bodiless => push_header(out, "content-length", &len.to_string()),
        Framing::Length | Framing::Sized(_) | Framing::UntilClose => {}
    }
    match persistence.and(framing != Framing::UntilClose) {
        Persistence::Close => push_header(out, "connection", "close"),
        Persistence::KeepAliveAnnounced => push_header(out, "connection", "keep-alive"),
        Persistence::KeepAlive => {}
    }
    out.extend_from_slice(b"\r\n");
    if framing == Framing::Length && !head_request && !bodiless {
        out.extend_from_slice(&resp.body);
    }
}

fn push_header(out: &mut Vec<u8>, name: &str, value: &str) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b": ");
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// One chunk of a chunked body; empty `data` writes nothing (an empty chunk
/// would end the body).
pub fn chunk(data: &[u8], out: &mut Vec<u8>) {
    if data.is_empty() {
        return;
    }
    out.extend_from_slice(format!("{:x}\r\n", data.len()).as_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// The last chunk: ends a chunked body.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// The longest `Access-Control-Request-Headers` a preflight echoes.
const MAX_REQUESTED_HEADERS: usize = 1024;

/// The CORS preflight answer (any path). The headers a browser asks for
/// (`requested`, its `Access-Control-Request-Headers`) are allowed as
/// asked when they are a plain list of field names, so an application's
/// own headers (a request id, a tenant) pass too; otherwise the protocol's.
pub fn preflight(requested: Option<&str>) -> Response {
    let allowed = match requested {
        Some(list) if is_field_name_list(list) => list.to_string(),
        _ => ALLOW_HEADERS.to_string(),
    };
    Response::new(204)
        .header(
            "access-control-allow-methods",
            "GET, POST, PUT, DELETE, HEAD, OPTIONS",
        )
        .header("access-control-allow-headers", allowed)
        .header("access-control-max-age", "86400")
}

/// A non-empty, bounded list of RFC 9110 §5.1 field names (tokens) apart
/// by commas and spaces.
fn is_field_name_list(list: &str) -> bool {
    let token = |b: u8| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
    !list.trim().is_empty()
        && list.len() <= MAX_REQUESTED_HEADERS
        && list.bytes().all(|b| token(b) || b == b',' || b == b' ')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preflight_allows_the_field_names_asked_for_and_nothing_else() {
        let allowed = |requested| {
            preflight(requested)
                .get_header("access-control-allow-headers")
                .map(str::to_string)
        };
        let asked = "if-match, x-request-id,producer-id";
        assert_eq!(allowed(Some(asked)).as_deref(), Some(asked));
        for odd in [None, Some(""), Some("a\tb"), Some("x:y"), Some("\"q\"")] {
            assert_eq!(allowed(odd).as_deref(), Some(ALLOW_HEADERS), "{odd:?}");
        }
        let long = "x,".repeat(MAX_REQUESTED_HEADERS);
        assert_eq!(allowed(Some(&long)).as_deref(), Some(ALLOW_HEADERS));
        assert!(ALLOW_HEADERS.contains("if-match,"), "conditional writes");
    }

    #[test]
    fn every_status_rill_sends_has_its_reason_phrase() {
        let sent = [
            100, 200, 201, 204, 304, 307, 400, 403, 404, 405, 408, 409, 410, 412,
        ];
        let more = [413, 414, 415, 429, 431, 500, 501, 503, 505, 507];
        for status in sent.into_iter().chain(more) {
            assert_ne!(reason(status), "Unknown", "{status}");
        }
    }

    #[test]
    fn every_response_carries_security_headers() {
        let mut out = Vec::new();
        encode(
            &Response::error(404, "not_found", "x"),
            Framing::Length,
            Persistence::KeepAlive,
            false,
            &mut out,
        );
        let text = String::from_utf8(out).unwrap();
        assert!(text.starts_with("HTTP/1.1 404 Not Found\r\n"));
        assert!(text.contains("\r\ndate: "));
        assert!(text.contains("x-content-type-options: nosniff\r\n"));
        assert!(text.contains("cross-origin-resource-policy: cross-origin\r\n"));
        assert!(text.contains("content-length: "));
        assert!(
            text.ends_with("\"message\":\"x\"}}") || text.ends_with("\"code\":\"not_found\"}}")
        );
    }

    #[test]
    fn no_body_on_204_or_head() {
        let mut out = Vec::new();
        let close = Persistence::Close;
        encode(&Response::new(204), Framing::Length, close, false, &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(!text.contains("content-length") && text.contains("connection: close"));
        let mut out = Vec::new();
        encode(
            &Response::new(200).with_body(b"abc".to_vec()),
            Framing::Length,
            Persistence::KeepAlive,
            true,
            &mut out,
        );
        assert!(
            String::from_utf8(out)
                .unwrap()
                .ends_with("content-length: 3\r\n\r\n")
        );
    }

    #[test]
    fn an_http10_client_is_told_its_connection_stays_open() {
        let text = |persistence, framing| {
            let mut out = Vec::new();
            encode(&Response::new(200), framing, persistence, false, &mut out);
            String::from_utf8(out).unwrap()
        };
        let told = Persistence::of(true, false);
        assert!(text(told, Framing::Length).contains("\r\nconnection: keep-alive\r\n"));
        assert!(text(told, Framing::UntilClose).contains("\r\nconnection: close\r\n"));
        let http11 = text(Persistence::of(true, true), Framing::Length);
        assert!(!http11.contains("connection:"));
        assert!(text(Persistence::of(false, false), Framing::Length).contains("connection: close"));
    }

    #[test]
    fn chunks() {
        let mut out = Vec::new();
        chunk(b"hello", &mut out);
        chunk(b"", &mut out);
        assert_eq!(out, b"5\r\nhello\r\n");
    }
}
