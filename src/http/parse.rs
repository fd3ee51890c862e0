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
    /// First value of the header `name_lowercase`.
    pub fn header(&self, name_lowercase: &str) -> Option<&str> {
        self.headers.first(name_lowercase)
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
    TooManyHeaders,
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
            HttpError::BodyTooLarge => 413,
            HttpError::Malformed(_) | HttpError::UnsupportedTransferEncoding => 400,
            HttpError::UnsupportedVersion => 505,
        }
    }

    /// Stable machine-readable error code.
    pub fn code(&self) -> &'static str {
        match self {
            HttpError::HeadTooLarge => "head_too_large",
            HttpError::TooManyHeaders => "too_many_headers",
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
            HttpError::TooManyHeaders => "request has too many header fields".to_owned(),
            HttpError::BodyTooLarge => "request body exceeds the size limit".to_owned(),
            HttpError::Malformed(why) => format!("malformed request: {why}"),
            HttpError::UnsupportedTransferEncoding => {
                "only 'Transfer-Encoding: chunked' is supported".to_owned()
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
    if buf.len() >= limits.max_head_bytes {
        Err(HttpError::HeadTooLarge)
    } else {
        Ok(None)
    }
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
    let (raw_path, query_str) = split_target(target, method)?;
    let headers = Fields::collect(req.headers)?;
    let body = body_kind(&headers, limits)?;
    // RFC 9112 §6.1: an HTTP/1.0 message with Transfer-Encoding must close after.
    let keep_alive = (http11 || body != BodyKind::Chunked) && keep_alive(&headers, http11);
    let expect_continue = headers
        .values("expect")
        .any(|v| v.eq_ignore_ascii_case("100-continue"));
    Ok(RequestHead {
        method,
        path: percent_decode(raw_path)?,
        query: parse_query(query_str)?,
        raw_path: raw_path.to_owned(),
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

/// `uri-host [ ":" port ]` (RFC 3986 §3.2.2): registered names, IPv4 and
/// bracketed IPv6 literals use only these characters; empty is allowed.
fn valid_host(host: &str) -> bool {
    host.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=%:[]".contains(&b))
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

fn transfer_encoding(headers: &Fields) -> Result<BodyKind, HttpError> {
    let mut tokens = list_tokens(headers, "transfer-encoding");
    match (tokens.next(), tokens.next()) {
        (None, _) => Err(HttpError::Malformed("empty Transfer-Encoding")),
        (Some(t), None) if t.eq_ignore_ascii_case("chunked") => Ok(BodyKind::Chunked),
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
mod tests {
    use super::*;
    use HttpError::*;

    fn lim(max_head_bytes: usize, max_headers: usize, max_body_bytes: u64) -> Limits {
        Limits {
            max_head_bytes,
            max_headers,
            max_body_bytes,
        }
    }

    fn parse(s: &str) -> Result<Option<RequestHead>, HttpError> {
        parse_head(s.as_bytes(), &Limits::default())
    }

    fn ok(s: &str) -> RequestHead {
        parse(s)
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("no head for {s:?}: {:?}", parse(s)))
    }

    fn err(s: &str) -> HttpError {
        parse(s)
            .err()
            .unwrap_or_else(|| panic!("expected error for {s:?}"))
    }

    fn malformed(s: &str) -> bool {
        matches!(parse(s), Err(Malformed(_)))
    }

    /// Body framing of a PUT with the given extra header lines.
    fn body(extra: &str) -> Result<BodyKind, HttpError> {
        let req = format!("PUT / HTTP/1.1\r\n{extra}\r\n\r\n");
        parse_head(req.as_bytes(), &lim(999, 9, 1000)).map(|h| h.map_or(BodyKind::None, |h| h.body))
    }

    #[test]
    fn simple_get() {
        let req = "GET /a/b?x=1&y HTTP/1.1\r\nHost: h\r\nX-Foo:  bar \r\n\r\nBODY";
        let h = ok(req);
        assert_eq!(
            (h.method, h.path.as_str(), h.raw_path.as_str()),
            (Method::Get, "/a/b", "/a/b")
        );
        assert_eq!(
            (h.query_param("x"), h.query_param("y")),
            (Some("1"), Some(""))
        );
        assert!(h.has_query_param("y") && !h.has_query_param("z"));
        assert_eq!(
            (h.header("x-foo"), h.header("host")),
            (Some("bar"), Some("h"))
        );
        assert!(h.body == BodyKind::None && h.keep_alive && !h.expect_continue);
        assert_eq!(h.head_len, req.len() - 4);
    }

    #[test]
    fn host_rules_of_rfc_9112() {
        let check = |s: &str| check_host(&ok(s));
        assert_eq!(
            check("GET / HTTP/1.1\r\nHost: a.example:80\r\n\r\n"),
            Ok(())
        );
        assert_eq!(check("GET / HTTP/1.1\r\nHost: [::1]:4437\r\n\r\n"), Ok(()));
        assert_eq!(check("GET / HTTP/1.1\r\nHost:\r\n\r\n"), Ok(()));
        assert_eq!(check("GET / HTTP/1.0\r\n\r\n"), Ok(()));
        let missing = check("GET / HTTP/1.1\r\n\r\n");
        assert_eq!(missing, Err(Malformed("missing Host header")));
        let two = check("GET / HTTP/1.0\r\nHost: a\r\nhost: b\r\n\r\n");
        assert_eq!(two, Err(Malformed("more than one Host header")));
        let bad = check("GET / HTTP/1.1\r\nHost: a b/c\r\n\r\n");
        assert_eq!(bad, Err(Malformed("invalid Host header")));
    }

    #[test]
    fn methods() {
        use Method::*;
        let names = "GET HEAD PUT POST DELETE OPTIONS PATCH BREW get".split(' ');
        let got: Vec<Method> = names
            .map(|m| ok(&format!("{m} / HTTP/1.1\n\n")).method)
            .collect();
        assert_eq!(
            got,
            [Get, Head, Put, Post, Delete, Options, Patch, Other, Other]
        );
    }

    #[test]
    fn percent_decoding_of_path_and_query() {
        let h = ok("GET /s/a%20b%2Fc?k%3D=v%26w&p=a+b&q=%E2%82%AC&&p=2 HTTP/1.1\r\n\r\n");
        assert_eq!(
            (h.path.as_str(), h.raw_path.as_str()),
            ("/s/a b/c", "/s/a%20b%2Fc")
        );
        let pairs = [("k=", "v&w"), ("p", "a+b"), ("q", "\u{20ac}"), ("p", "2")];
        let want: Vec<_> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert_eq!((&h.query, h.query_param("p")), (&want, Some("a+b")));
        assert_eq!(percent_decode("%41%62c+d"), Ok("Abc+d".to_owned()));
        for bad in ["%", "%4", "%zz", "%FF", "%C3%28", "a%2"] {
            assert!(matches!(percent_decode(bad), Err(Malformed(_))), "{bad}");
        }
        for bad in ["/a%ZZ", "/a%FF", "/?a=%E2%82", "/?%zz=1"] {
            assert!(malformed(&format!("GET {bad} HTTP/1.1\r\n\r\n")), "{bad}");
        }
        let raw = parse_head(b"GET /\xff HTTP/1.1\r\n\r\n", &Limits::default());
        assert!(matches!(raw, Err(Malformed(_))));
    }

    #[test]
    fn target_forms() {
        let path = |t: &str| ok(&format!("OPTIONS {t} HTTP/1.1\r\n\r\n"));
        assert_eq!(
            (path("*").path, path("*").raw_path),
            ("*".into(), "*".into())
        );
        let h = path("http://example.com/x%20y?o=1");
        assert_eq!((h.path.as_str(), h.raw_path.as_str()), ("/x y", "/x%20y"));
        let h = path("HTTPS://example.com?o=1");
        assert_eq!((h.path.as_str(), h.query_param("o")), ("/", Some("1")));
        assert_eq!(
            (path("http://h").path, path("/p#frag").path),
            ("/".into(), "/p".into())
        );
        for bad in ["*", "foo", "ftp://h/x", "http:/x"] {
            assert!(malformed(&format!("GET {bad} HTTP/1.1\r\n\r\n")), "{bad}");
        }
    }

    #[test]
    fn incomplete_heads() {
        let full = "PUT /s HTTP/1.1\r\nContent-Length: 3\r\n\r\n";
        for i in 0..full.len() {
            assert!(matches!(parse(&full[..i]), Ok(None)), "prefix {i}");
        }
        assert_eq!(ok(full).head_len, full.len());
        assert!(matches!(parse("\r\n\r\nGET / HTTP/1.1\r\n"), Ok(None)));
    }

    #[test]
    fn head_too_large() {
        let limits = lim(64, 100, 100);
        let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(100));
        let at = |n: usize| parse_head(&long.as_bytes()[..n.min(long.len())], &limits);
        assert!(matches!(at(63), Ok(None)));
        assert_eq!(
            (at(64).err(), at(200).err()),
            (Some(HeadTooLarge), Some(HeadTooLarge))
        );
        let exact = format!("GET /{} HTTP/1.1\r\n\r\n", "b".repeat(64 - 18));
        assert!(matches!(parse_head(exact.as_bytes(), &limits), Ok(Some(_))));
        let over = format!("GET /{} HTTP/1.1\r\n\r\n", "b".repeat(64 - 17));
        assert_eq!(
            parse_head(over.as_bytes(), &limits).err(),
            Some(HeadTooLarge)
        );
    }

    #[test]
    fn too_many_headers() {
        let two = b"GET / HTTP/1.1\r\na: 1\r\nb: 2\r\n\r\n";
        let three = b"GET / HTTP/1.1\r\na: 1\r\nb: 2\r\nc: 3\r\n\r\n";
        assert!(matches!(parse_head(two, &lim(999, 2, 0)), Ok(Some(_))));
        assert_eq!(
            parse_head(three, &lim(999, 2, 0)).err(),
            Some(TooManyHeaders)
        );
        assert!(matches!(
            parse_head(b"GET / HTTP/1.1\r\n\r\n", &lim(99, 0, 0)),
            Ok(Some(_))
        ));
        assert_eq!(parse_head(two, &lim(999, 0, 0)).err(), Some(TooManyHeaders));
    }

    #[test]
    fn header_limits_above_the_stack_slots_hold_exactly() {
        // Past STACK_HEADERS the slots come from the heap: the same rule.
        let limit = STACK_HEADERS + 22;
        let head = |n: usize| {
            let fields: String = (0..n).map(|i| format!("h{i}: {i}\r\n")).collect();
            format!("GET / HTTP/1.1\r\n{fields}\r\n").into_bytes()
        };
        let limits = lim(1 << 16, limit, 0);
        let full = parse_head(&head(limit), &limits).unwrap().unwrap();
        let last = (limit - 1).to_string();
        assert_eq!(full.header(&format!("h{last}")), Some(last.as_str()));
        assert_eq!(
            parse_head(&head(limit + 1), &limits).err(),
            Some(TooManyHeaders)
        );
        let at_stack = lim(1 << 16, STACK_HEADERS, 0);
        assert!(
            parse_head(&head(STACK_HEADERS), &at_stack)
                .unwrap()
                .is_some()
        );
        assert_eq!(
            parse_head(&head(STACK_HEADERS + 1), &at_stack).err(),
            Some(TooManyHeaders)
        );
    }

    #[test]
    fn versions_and_keep_alive() {
        assert!(!ok("GET / HTTP/1.0\r\n\r\n").keep_alive);
        assert!(ok("GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n").keep_alive);
        assert!(ok("GET / HTTP/1.1\r\n\r\n").keep_alive);
        assert!(!ok("GET / HTTP/1.1\r\nConnection: foo, CLOSE\r\n\r\n").keep_alive);
        // RFC 9110 §2.5: a later 1.x minor version is served as 1.1.
        let later = ok("\r\nPOST /s HTTP/1.9\r\nHost: h\r\nContent-Length: 2\r\n\r\nhi");
        assert!(later.keep_alive && later.http11);
        assert_eq!(later.body, BodyKind::Length(2));
        assert!(!ok("GET / HTTP/1.2\r\nConnection: close\r\n\r\n").keep_alive);
        assert!(matches!(
            parse("\r\n\r\nGET / HTTP/1.9\r\nHost: h\r\n"),
            Ok(None)
        ));
        assert!(malformed("GET / HTTP/1.2 \r\n\r\n") && malformed("GET /\x01 HTTP/1.2\r\n\r\n"));
        assert_eq!(err("GET / HTTP/2.0\r\n\r\n"), UnsupportedVersion);
        let spaced = err("GET /a b HTTP/1.1\r\nHost: h\r\n\r\n");
        assert!(
            matches!(spaced, Malformed(_)),
            "a raw space in the target: {spaced:?}"
        );
        assert_eq!(err("\r\nGET / HTTP/3.0\r\n\r\n"), UnsupportedVersion);
        assert!(malformed("GET / HTTX/1.1\r\n\r\n") && malformed("GET / HTTP/1\r\n\r\n"));
    }

    #[test]
    fn malformed_request_lines_and_headers() {
        let heads = [
            "Bad Name: x",
            "NoColon",
            "X: a\x01b",
            "X: a\r\n folded",
            ": empty",
        ];
        for bad in heads.map(|h| format!("GET / HTTP/1.1\r\n{h}\r\n\r\n")) {
            assert!(malformed(&bad), "{bad:?}");
        }
        for bad in [
            "GET  / HTTP/1.1\r\n\r\n",
            "GET /\r\n\r\n",
            "G(T / HTTP/1.1\n\n",
            "\x00\n\n",
        ] {
            assert!(malformed(bad), "{bad:?}");
        }
        let e = parse_head(b"GET / HTTP/1.1\r\nX: caf\xe9\r\n\r\n", &Limits::default());
        assert_eq!(e.err(), Some(Malformed("header value is not valid UTF-8")));
    }

    #[test]
    fn bare_lf_line_endings() {
        let h = ok("POST /x HTTP/1.1\nContent-Length: 2\n\nab");
        assert_eq!((h.body, h.head_len), (BodyKind::Length(2), 36));
    }

    #[test]
    fn content_length() {
        assert_eq!(body("Content-Length: 42"), Ok(BodyKind::Length(42)));
        assert_eq!(body("Content-Length: 0"), Ok(BodyKind::Length(0)));
        assert_eq!(
            body("Content-Length: 5\r\nContent-Length: 5, 5"),
            Ok(BodyKind::Length(5))
        );
        assert_eq!(body("Content-Length: 1000"), Ok(BodyKind::Length(1000)));
        assert_eq!(body("Content-Length: 1001"), Err(BodyTooLarge));
        assert_eq!(
            body("Content-Length: 99999999999999999999999"),
            Err(BodyTooLarge)
        );
        for bad in "+5|-1|5a|0x10||1 2|5,|5\r\nContent-Length: 6".split('|') {
            assert!(matches!(
                body(&format!("Content-Length: {bad}")),
                Err(Malformed(_))
            ));
        }
    }

    #[test]
    fn transfer_encoding() {
        assert_eq!(body("Transfer-Encoding: Chunked"), Ok(BodyKind::Chunked));
        let te = "gzip, chunked|chunked, chunked|identity|chunked;x=1|gzip\r\nTransfer-Encoding: chunked";
        for v in te.split('|') {
            assert_eq!(
                body(&format!("Transfer-Encoding: {v}")),
                Err(UnsupportedTransferEncoding)
            );
        }
        assert!(matches!(body("Transfer-Encoding: "), Err(Malformed(_))));
        let both = body("Transfer-Encoding: chunked\r\nContent-Length: 3");
        assert!(matches!(both, Err(Malformed(_))));
        let old = ok("POST / HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\n\n");
        assert!(old.body == BodyKind::Chunked && !old.keep_alive);
    }

    #[test]
    fn expect_continue_and_header_lookup() {
        assert!(ok("PUT / HTTP/1.1\r\nExpect: 100-Continue\r\n\r\n").expect_continue);
        assert!(!ok("PUT / HTTP/1.1\r\nExpect: other\r\n\r\n").expect_continue);
        let h = ok("GET / HTTP/1.1\r\nX-A: 1\r\nx-a: 2\r\nEmpty:\r\n\r\n");
        let got = (
            h.header("x-a"),
            h.header("empty"),
            h.header("X-A"),
            h.headers.len(),
        );
        assert_eq!(got, (Some("1"), Some(""), None, 3));
    }

    #[test]
    fn error_metadata() {
        for (e, status, code) in [
            (HeadTooLarge, 431, "head_too_large"),
            (TooManyHeaders, 431, "too_many_headers"),
            (BodyTooLarge, 413, "body_too_large"),
            (Malformed("boom"), 400, "malformed_request"),
            (
                UnsupportedTransferEncoding,
                400,
                "unsupported_transfer_encoding",
            ),
            (UnsupportedVersion, 505, "unsupported_version"),
        ] {
            assert_eq!(
                (e.status(), e.code(), e.to_string()),
                (status, code, e.message())
            );
        }
        assert!(Malformed("boom").message().contains("boom"));
    }

    #[test]
    fn garbage_never_panics() {
        let mut seed: u32 = 12345;
        let alphabet = b"GET /%?=&:\r\n \tHTTP/1.0x\xff\x00Content-Length:chunked";
        for _ in 0..2000 {
            let mut next = || {
                seed = seed.wrapping_mul(1_103_515_245).wrapping_add(12345);
                alphabet[(seed >> 16) as usize % alphabet.len()]
            };
            let buf: Vec<u8> = (0..80).map(|_| next()).collect();
            for n in [0, 7, 20, 41, 80] {
                let _ = parse_head(&buf[..n], &lim(40, 3, 100));
                let _ = parse_head(&buf[..n], &Limits::default());
            }
        }
    }
}
