//! HTTP/1.1 request head parsing per RFC 9112 with explicit limits.
//!
//! Owns: the request line (HTTP versions, RFC 9110 §2.5) and header fields
//! (via `httparse`; `target` decodes the request target), message-body
//! framing (Content-Length / Transfer-Encoding, with request-smuggling
//! defences), `Expect: 100-continue`, connection persistence, and the
//! `HttpError` type shared with the chunked decoder.

use std::fmt;
use std::mem::MaybeUninit;

use super::fields::Fields;
use super::target::{parse_query, percent_decode, split_target};

/// Size limits applied while parsing a request.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Maximum bytes of the request head, including the final CRLFCRLF.
    pub max_head_bytes: usize,
    /// Maximum number of header fields.
    pub max_headers: usize,
    /// Maximum decoded body size in bytes.
    pub max_body_bytes: u64,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_head_bytes: 32 * 1024,
            max_headers: 100,
            max_body_bytes: 64 * 1024 * 1024,
        }
    }
}

/// Request method; anything not listed is `Other`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Put,
    Post,
    Delete,
    Options,
    Patch,
    Other,
}

impl Method {
    fn from_token(token: &str) -> Method {
        match token {
            "GET" => Method::Get,
            "HEAD" => Method::Head,
            "PUT" => Method::Put,
            "POST" => Method::Post,
            "DELETE" => Method::Delete,
            "OPTIONS" => Method::Options,
            "PATCH" => Method::Patch,
            _ => Method::Other,
        }
    }

    /// The method's token (`OTHER` for the unlisted ones).
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Put => "PUT",
            Method::Post => "POST",
            Method::Delete => "DELETE",
            Method::Options => "OPTIONS",
            Method::Patch => "PATCH",
            Method::Other => "OTHER",
        }
    }
}

/// How the request body is framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyKind {
    None,
    Length(u64),
    Chunked,
}

/// A fully parsed request head.
#[derive(Debug, Clone)]
pub struct RequestHead {
    pub method: Method,
    /// Percent-decoded path (before '?').
    pub path: String,
    /// The path exactly as sent (before '?').
    pub raw_path: String,
    /// An absolute-form target's `host[:port]`: it stands for the Host
    /// field (RFC 9112 §3.2.2).
    pub authority: Option<String>,
    /// An absolute-form target named the `https` scheme (rill itself
    /// speaks plain HTTP: a TLS proxy in front may forward such targets).
    pub https: bool,
    /// Decoded query pairs in order; '+' is kept literally.
    pub query: Vec<(String, String)>,
    /// Header names lower-cased, values trimmed.
    pub headers: Fields,
    pub body: BodyKind,
    pub expect_continue: bool,
    pub keep_alive: bool,
    /// HTTP/1.1 (else HTTP/1.0).
    pub http11: bool,
    /// Bytes of the head including the final CRLFCRLF.
    pub head_len: usize,
}

impl RequestHead {
    /// The host the request names: an absolute-form target's authority,
    /// else the Host field (RFC 9112 §3.2.2: the former wins).
    pub fn host(&self) -> Option<&str> {
        self.authority.as_deref().or_else(|| self.header("host"))
    }

    /// First value of the header `name_lowercase`.
    pub fn header(&self, name_lowercase: &str) -> Option<&str> {
        self.headers.first(name_lowercase)
    }

    /// Every line of the list field `name_lowercase` as one value (RFC
    /// 9110 §5.3: a list sent on several lines is one comma-joined list).
    pub fn list_header(&self, name_lowercase: &str) -> Option<String> {
        let mut lines = self.headers.values(name_lowercase);
        let first = lines.next()?.to_string();
        Some(lines.fold(first, |joined, line| joined + ", " + line))
    }

    /// First value of the query parameter `key`.
    pub fn query_param(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Whether the query parameter `key` is present (with or without a value).
    pub fn has_query_param(&self, key: &str) -> bool {
        self.query.iter().any(|(k, _)| k == key)
    }
}

/// Errors produced while parsing a request head or body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpError {
    HeadTooLarge,
    /// The request line alone filled the head limit (RFC 9112 §3: 414).
    TargetTooLong,
    TooManyHeaders,
    /// A chunked body's trailer section passed the head limit.
    TrailersTooLarge,
    BodyTooLarge,
    Malformed(&'static str),
    UnsupportedTransferEncoding,
    UnsupportedVersion,
}

impl HttpError {
    /// HTTP status code to answer with.
    pub fn status(&self) -> u16 {
        match self {
            HttpError::HeadTooLarge | HttpError::TooManyHeaders => 431,
            HttpError::TrailersTooLarge => 431,
            HttpError::TargetTooLong => 414,
            HttpError::BodyTooLarge => 413,
            HttpError::Malformed(_) => 400,
            // RFC 9112 §6.1: a coding the server does not understand.
            HttpError::UnsupportedTransferEncoding => 501,
            HttpError::UnsupportedVersion => 505,
        }
    }

    /// Stable machine-readable error code.
    pub fn code(&self) -> &'static str {
        match self {
            HttpError::HeadTooLarge => "head_too_large",
            HttpError::TargetTooLong => "uri_too_long",
            HttpError::TooManyHeaders => "too_many_headers",
            HttpError::TrailersTooLarge => "trailers_too_large",
            HttpError::BodyTooLarge => "body_too_large",
            HttpError::Malformed(_) => "malformed_request",
            HttpError::UnsupportedTransferEncoding => "unsupported_transfer_encoding",
            HttpError::UnsupportedVersion => "unsupported_version",
        }
    }

    /// Human-readable description.
    pub fn message(&self) -> String {
        match self {
            HttpError::HeadTooLarge => "request head exceeds the size limit".to_owned(),
            HttpError::TargetTooLong => "request target exceeds the head size limit".to_owned(),
            HttpError::TooManyHeaders => "request has too many header fields".to_owned(),
            HttpError::TrailersTooLarge => {
                "request trailer fields exceed the head size limit".to_owned()
            }
            HttpError::BodyTooLarge => "request body exceeds the size limit".to_owned(),
            HttpError::Malformed(why) => format!("malformed request: {why}"),
            HttpError::UnsupportedTransferEncoding => {
                "only the chunked transfer coding is implemented".to_owned()
            }
            HttpError::UnsupportedVersion => "only HTTP/1.0 and HTTP/1.1 are supported".to_owned(),
        }
    }
}

impl fmt::Display for HttpError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for HttpError {}

/// Parses a request head from the start of `buf`.
///
/// Ok(None) when buf does not yet hold a complete head (and buf.len() < max_head_bytes);
/// Err(HeadTooLarge) as soon as buf holds max_head_bytes without a complete head.
pub fn parse_head(buf: &[u8], limits: &Limits) -> Result<Option<RequestHead>, HttpError> {
    let window = buf.get(..limits.max_head_bytes).unwrap_or(buf);
    if !has_blank_line(window) {
        return incomplete(buf, limits);
    }
    parse_window(window, limits)
}

/// Header slots kept on the stack: up to this `--max-headers` a parse
/// allocates no header array (one per request otherwise, ~1 µs of
/// `parse_head` in `benches/hot_paths.rs`).
const STACK_HEADERS: usize = 128;

/// Parses the head in `window` (at most `max_head_bytes` of the buffer).
fn parse_window(window: &[u8], limits: &Limits) -> Result<Option<RequestHead>, HttpError> {
    let slots = limits.max_headers;
    if slots <= STACK_HEADERS {
        let mut headers = [const { MaybeUninit::uninit() }; STACK_HEADERS];
        return parse_with_slots(window, limits, &mut headers[..slots]);
    }
    let mut headers = Vec::with_capacity(slots);
    headers.resize_with(slots, MaybeUninit::uninit);
    parse_with_slots(window, limits, &mut headers)
}

/// `parse_window` with `headers` as httparse's header slots.
fn parse_with_slots<'b>(
    window: &'b [u8],
    limits: &Limits,
    headers: &mut [MaybeUninit<httparse::Header<'b>>],
) -> Result<Option<RequestHead>, HttpError> {
    let mut req = httparse::Request::new(&mut []);
    match req.parse_with_uninit_headers(window, headers) {
        Ok(httparse::Status::Complete(len)) => build_head(&req, len, limits).map(Some),
        Ok(httparse::Status::Partial) => incomplete(window, limits),
        // RFC 9110 §2.5: a message of a later HTTP/1.x minor version SHOULD
        // be processed as the highest minor version the recipient conforms
        // to, 1.1. httparse refuses any version but 1.0 and 1.1, so the
        // head is parsed again from a copy whose version says 1.1 (only on
        // this rare path).
        Err(httparse::Error::Version) => match later_minor_version(window) {
            Some(minor) => {
                let mut copy = window.to_vec();
                copy[minor] = b'1';
                parse_window(&copy, limits)
            }
            None => Err(map_httparse_error(httparse::Error::Version, window)),
        },
        Err(e) => Err(map_httparse_error(e, window)),
    }
}

/// The position of the minor digit when the request line ends in
/// `HTTP/1.d` with d at least 2.
fn later_minor_version(window: &[u8]) -> Option<usize> {
    let version = request_line_version(window)?;
    match window.get(version..version + 8)? {
        [b'H', b'T', b'T', b'P', b'/', b'1', b'.', minor] if (b'2'..=b'9').contains(minor) => {
            Some(version + 7)
        }
        _ => None,
    }
}

/// Where the last word of the first non-empty line starts.
fn request_line_version(window: &[u8]) -> Option<usize> {
    let mut start = 0;
    for line in window.split(|&b| b == b'\n') {
        let trimmed = line.strip_suffix(b"\r").unwrap_or(line);
        if !trimmed.is_empty() {
            let word = trimmed
                .iter()
                .rposition(|&b| b == b' ')
                .map_or(0, |i| i + 1);
            return Some(start + word);
        }
        start += line.len() + 1;
    }
    None
}

fn incomplete(buf: &[u8], limits: &Limits) -> Result<Option<RequestHead>, HttpError> {
    if !could_start_a_request(buf) {
        return Err(HttpError::Malformed("invalid request line"));
    }
    // RFC 9112 §2.2: a bare CR is invalid. Refused as it arrives: a head
    // whose lines end in CR alone would otherwise wait for its deadline.
    let head = buf.get(..limits.max_head_bytes).unwrap_or(buf);
    if memchr::memchr_iter(b'\r', head).any(|at| head.get(at + 1).is_some_and(|&b| b != b'\n')) {
        return Err(HttpError::Malformed("bare CR in the request head"));
    }
    if buf.len() < limits.max_head_bytes {
        return Ok(None);
    }
    let window = &buf[..limits.max_head_bytes];
    let line = window.trim_ascii_start();
    match (memchr::memchr(b'\n', line), memchr::memchr(b' ', line)) {
        // A method, then a target that has not ended within the limit.
        (None, Some(_)) => Err(HttpError::TargetTooLong),
        _ => Err(HttpError::HeadTooLarge),
    }
}

/// Whether the bytes so far could begin a request: after any empty lines
/// (RFC 9112 §2.2), a method token up to its space. Anything else (a TLS
/// hello, binary noise) is refused at once rather than at the idle timeout.
fn could_start_a_request(buf: &[u8]) -> bool {
    let start = buf
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(buf.len());
    let rest = &buf[start..];
    let method_end = memchr::memchr(b' ', rest).unwrap_or(rest.len());
    (method_end > 0 || rest.is_empty()) && rest[..method_end].iter().all(|&b| is_tchar(b))
}

/// RFC 9110 §5.6.2 token characters.
pub(crate) fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// Cheap pre-check: a head can only be complete once an empty line exists.
fn has_blank_line(window: &[u8]) -> bool {
    memchr::memchr_iter(b'\n', window).any(|i| {
        matches!(
            (window.get(i + 1), window.get(i + 2)),
            (Some(b'\n'), _) | (Some(b'\r'), Some(b'\n'))
        )
    })
}

fn map_httparse_error(e: httparse::Error, window: &[u8]) -> HttpError {
    match e {
        httparse::Error::TooManyHeaders => HttpError::TooManyHeaders,
        httparse::Error::Version if looks_like_http_version(window) => {
            HttpError::UnsupportedVersion
        }
        httparse::Error::Version => HttpError::Malformed("invalid HTTP version"),
        httparse::Error::HeaderName => HttpError::Malformed("invalid header name"),
        httparse::Error::HeaderValue => HttpError::Malformed("invalid header value"),
        httparse::Error::NewLine => HttpError::Malformed("invalid line ending"),
        _ => HttpError::Malformed("invalid request line"),
    }
}

/// Whether the request line is `method SP target SP HTTP/d.d`: a version
/// refused for its number (505), not a line whose target holds a raw space
/// (400, RFC 9112 §3.2).
fn looks_like_http_version(window: &[u8]) -> bool {
    let Some(start) = request_line_version(window) else {
        return false;
    };
    let rest = &window[start..];
    let end = memchr::memchr2(b'\r', b'\n', rest).unwrap_or(rest.len());
    let line_start = window[..start]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1);
    let spaces = memchr::memchr_iter(b' ', &window[line_start..start]).count();
    spaces == 2
        && matches!(&rest[..end], [b'H', b'T', b'T', b'P', b'/', major, b'.', minor]
        if major.is_ascii_digit() && minor.is_ascii_digit())
}

fn build_head(
    req: &httparse::Request<'_, '_>,
    head_len: usize,
    limits: &Limits,
) -> Result<RequestHead, HttpError> {
    let method = Method::from_token(req.method.ok_or(HttpError::Malformed("missing method"))?);
    let http11 = match req.version {
        Some(1) => true,
        Some(0) => false,
        _ => return Err(HttpError::UnsupportedVersion),
    };
    let target = req
        .path
        .ok_or(HttpError::Malformed("missing request target"))?;
    let target = split_target(target, method)?;
    let headers = Fields::collect(req.headers)?;
    // RFC 9112 §6.1: an HTTP/1.0 message with Transfer-Encoding is framed
    // faultily (§6.3: 400, then close), a request-smuggling shape.
    if !http11 && headers.values("transfer-encoding").next().is_some() {
        return Err(HttpError::Malformed(
            "Transfer-Encoding in an HTTP/1.0 request",
        ));
    }
    let body = body_kind(&headers, limits)?;
    let keep_alive = keep_alive(&headers, http11);
    // RFC 9110 §10.1.1: an HTTP/1.0 client's expectation is ignored (no
    // 1xx may be sent to it, §15.2).
    let expect_continue = http11
        && headers
            .values("expect")
            .any(|v| v.eq_ignore_ascii_case("100-continue"));
    Ok(RequestHead {
        method,
        path: percent_decode(target.path)?,
        query: parse_query(target.query)?,
        raw_path: target.path.to_owned(),
        authority: target.authority.map(str::to_owned),
        https: target.https,
        expect_continue,
        headers,
        body,
        keep_alive,
        http11,
        head_len,
    })
}

/// RFC 9112 §3.2: an HTTP/1.1 request needs exactly one Host field, and no
/// request may carry two or an invalid one (the server answers 400).
pub fn check_host(head: &RequestHead) -> Result<(), HttpError> {
    let mut hosts = head.headers.values("host");
    match (hosts.next(), hosts.next()) {
        (None, _) if head.http11 => Err(HttpError::Malformed("missing Host header")),
        (None, _) => Ok(()),
        (Some(_), Some(_)) => Err(HttpError::Malformed("more than one Host header")),
        (Some(host), None) if valid_host(host) => Ok(()),
        (Some(_), None) => Err(HttpError::Malformed("invalid Host header")),
    }
}

/// `uri-host [ ":" port ]` (RFC 3986 §3.2.2-3.2.3): a bracketed IP literal
/// or a registered name (IPv4 included: unreserved, sub-delims and `%HH`),
/// then an optional port of digits; empty is allowed.
pub(super) fn valid_host(host: &str) -> bool {
    let (name_ok, port) = match host.strip_prefix('[') {
        Some(rest) => match rest.split_once(']') {
            Some((literal, after)) => (valid_ip_literal(literal), after),
            None => return false,
        },
        // A port needs a host before it.
        None => match host.rfind(':') {
            Some(colon) => (colon > 0 && valid_reg_name(&host[..colon]), &host[colon..]),
            None => (valid_reg_name(host), ""),
        },
    };
    let port_ok = port.is_empty()
        || port
            .strip_prefix(':')
            .is_some_and(|digits| digits.bytes().all(|b| b.is_ascii_digit()));
    name_ok && port_ok
}

/// Between the brackets: an IPv6 address (perhaps with an IPv4 tail and a
/// zone id, RFC 6874, `%25` escaped or, as some clients send it, raw) or an
/// IPvFuture (`v` hex `.` ...).
fn valid_ip_literal(literal: &str) -> bool {
    if let Some(future) = literal.strip_prefix(['v', 'V']) {
        return future.split_once('.').is_some_and(|(version, rest)| {
            !version.is_empty()
                && version.bytes().all(|b| b.is_ascii_hexdigit())
                && !rest.is_empty()
                && valid_reg_name(&rest.replace(':', ""))
        });
    }
    let (address, zone) = literal.split_once('%').unwrap_or((literal, ""));
    let zone = zone.strip_prefix("25").unwrap_or(zone);
    address.matches(':').count() >= 2
        && address
            .bytes()
            .all(|b| b.is_ascii_hexdigit() || b == b':' || b == b'.')
        && (literal.len() == address.len() || (!zone.is_empty() && valid_reg_name(zone)))
}

fn valid_reg_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        let escaped = b == b'%'
            && bytes.get(i + 1).is_some_and(u8::is_ascii_hexdigit)
            && bytes.get(i + 2).is_some_and(u8::is_ascii_hexdigit);
        if escaped {
            i += 3;
        } else if b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=".contains(&b) {
            i += 1;
        } else {
            return false;
        }
    }
    true
}

/// Comma-separated list elements across all fields named `name`, trimmed, empties skipped.
fn list_tokens<'a>(headers: &'a Fields, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
    headers
        .values(name)
        .flat_map(|v| v.split(','))
        .map(|t| t.trim_matches([' ', '\t']))
        .filter(|t| !t.is_empty())
}

fn body_kind(headers: &Fields, limits: &Limits) -> Result<BodyKind, HttpError> {
    let has_te = headers.values("transfer-encoding").next().is_some();
    let has_cl = headers.values("content-length").next().is_some();
    match (has_te, has_cl) {
        (true, true) => Err(HttpError::Malformed(
            "both Content-Length and Transfer-Encoding present",
        )),
        (true, false) => transfer_encoding(headers),
        (false, true) => content_length(headers, limits),
        (false, false) => Ok(BodyKind::None),
    }
}

/// RFC 9112 §6.1 and §6.3: a request body's length is known only when
/// chunked is its final coding, once (else 400 and close); codings before
/// it are ones rill does not implement (501).
fn transfer_encoding(headers: &Fields) -> Result<BodyKind, HttpError> {
    let tokens: Vec<&str> = list_tokens(headers, "transfer-encoding").collect();
    let is_chunked = |t: &str| t.eq_ignore_ascii_case("chunked");
    match tokens.as_slice() {
        [] => Err(HttpError::Malformed("empty Transfer-Encoding")),
        [.., last] if !is_chunked(last) => Err(HttpError::Malformed(
            "the final transfer coding is not chunked (which takes no parameters)",
        )),
        [_] => Ok(BodyKind::Chunked),
        _ if tokens.iter().filter(|t| is_chunked(t)).count() > 1 => Err(HttpError::Malformed(
            "the chunked transfer coding is applied more than once",
        )),
        _ => Err(HttpError::UnsupportedTransferEncoding),
    }
}

fn content_length(headers: &Fields, limits: &Limits) -> Result<BodyKind, HttpError> {
    let mut found: Option<u64> = None;
    for value in headers.values("content-length").flat_map(|v| v.split(',')) {
        let len = parse_length(value.trim_matches([' ', '\t']))?;
        if found.is_some_and(|prev| prev != len) {
            return Err(HttpError::Malformed("conflicting Content-Length values"));
        }
        found = Some(len);
    }
    let len = found.ok_or(HttpError::Malformed("empty Content-Length"))?;
    if len > limits.max_body_bytes {
        return Err(HttpError::BodyTooLarge);
    }
    Ok(BodyKind::Length(len))
}

fn parse_length(s: &str) -> Result<u64, HttpError> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(HttpError::Malformed("invalid Content-Length"));
    }
    // All digits, so the only possible failure is overflow: a huge body.
    s.parse::<u64>().map_err(|_| HttpError::BodyTooLarge)
}

fn keep_alive(headers: &Fields, http11: bool) -> bool {
    let has =
        |token: &str| list_tokens(headers, "connection").any(|t| t.eq_ignore_ascii_case(token));
    if has("close") {
        return false;
    }
    http11 || has("keep-alive")
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
