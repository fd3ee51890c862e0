//! Unit tests of the request-head parser (`parse.rs`): RFC 9112 framing,
//! limits, target forms, versions and the error statuses.

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
    // RFC 3986 §3.2.2-3.2.3: the host's and the port's syntax, not only
    // their characters.
    let fine = [
        "a",
        "a.b:",
        "10.0.0.1:1",
        "[::1]",
        "[fe80::1:2]:9",
        "[::ffff:1.2.3.4]",
        "%41b",
        "[fe80::1%25eth0]",
        "[fe80::1%eth0]:8",
        "[v1.x:y]",
    ];
    for host in fine {
        let head = format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n");
        assert_eq!(check(&head), Ok(()), "{host}");
    }
    let invalid = [
        "[::1",
        "[::1]x",
        "[::g]",
        "[]",
        "h:80:80",
        "h:port",
        "%zz",
        "a]",
        "[::1]:8a",
        "[:]",
        ":80",
        "[fe80::1%]",
        "[v.x]",
    ];
    for host in invalid {
        let head = format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n");
        assert_eq!(
            check(&head),
            Err(Malformed("invalid Host header")),
            "{host}"
        );
    }
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
    assert_eq!(path("http://h").path, "/");
    // RFC 9112 §3.2.2: the absolute form's authority stands for the Host.
    let h = ok("GET http://a.example:81/s HTTP/1.1\r\nHost: b.example\r\n\r\n");
    assert_eq!(
        (h.host(), h.header("host")),
        (Some("a.example:81"), Some("b.example"))
    );
    assert_eq!(ok("GET /s HTTP/1.1\r\nHost: b\r\n\r\n").host(), Some("b"));
    assert!(ok("GET hTTpS://a/s HTTP/1.1\r\nHost: b\r\n\r\n").https);
    assert!(!h.https && !ok("GET /s HTTP/1.1\r\nHost: b\r\n\r\n").https);
    // No fragment (§3.2), no empty host (RFC 9110 §4.2.1), no userinfo
    // (§4.2.4), no characters a host cannot hold.
    let refused = [
        "*",
        "foo",
        "ftp://h/x",
        "http:/x",
        "/p#frag",
        "http:///x",
        "http://:80/x",
        "http://u:p@h/x",
        "http://h\"/x",
        "http://[::1/x",
        "http://h:80:80/x",
    ];
    for bad in refused {
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
    // RFC 9112 §2.2: lines ended by CR alone never complete a head; they
    // are refused as they arrive, not at the deadline.
    assert!(malformed("GET /v1/health HTTP/1.1\rHost: x\r\r"));
    assert!(malformed("GET / HTTP/1.1\r\nHost: x\rY"));
}

#[test]
fn head_too_large() {
    let limits = lim(64, 100, 100);
    let long = format!("GET /{} HTTP/1.1\r\n", "a".repeat(100));
    let at = |n: usize| parse_head(&long.as_bytes()[..n.min(long.len())], &limits);
    assert!(matches!(at(63), Ok(None)));
    // RFC 9112 §3: a target longer than the server parses is 414.
    assert_eq!(
        (at(64).err(), at(200).err()),
        (Some(TargetTooLong), Some(TargetTooLong))
    );
    assert_eq!(TargetTooLong.status(), 414);
    let fields = format!("GET / HTTP/1.1\r\nx: {}\r\n", "a".repeat(100));
    assert_eq!(
        parse_head(fields.as_bytes(), &limits).err(),
        Some(HeadTooLarge),
        "the fields, not the target, overflow"
    );
    // A method that never ends is no target (431, as any overlong head).
    let method = "A".repeat(100);
    assert_eq!(
        parse_head(method.as_bytes(), &limits).err(),
        Some(HeadTooLarge)
    );
    let exact = format!("GET /{} HTTP/1.1\r\n\r\n", "b".repeat(64 - 18));
    assert!(matches!(parse_head(exact.as_bytes(), &limits), Ok(Some(_))));
    let over = format!("GET /{} HTTP/1.1\r\n\r\n", "b".repeat(64 - 17));
    assert_eq!(
        parse_head(over.as_bytes(), &limits).err(),
        Some(HeadTooLarge)
    );
}

/// Bytes that cannot begin a request are refused before the head ends.
#[test]
fn a_head_that_cannot_be_a_request_is_refused_at_once() {
    for garbage in [
        &b"\x16\x03\x01\x02\x00\x01"[..],
        b"\x00\x00",
        b"GE(T / HT",
        b" GET /",
    ] {
        assert!(
            matches!(parse_head(garbage, &Limits::default()), Err(Malformed(_))),
            "{garbage:?}"
        );
    }
    for prefix in [
        &b""[..],
        b"\r\n",
        b"GET",
        b"GET /s HT",
        b"\r\nPUT /x?a=b HTTP/1.1\r\nHo",
    ] {
        let parsed = parse_head(prefix, &Limits::default());
        assert!(matches!(parsed, Ok(None)), "{prefix:?}");
    }
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
    let e = parse_head(
        b"GET / HTTP/1.1\r\nStream-Seq: caf\xe9\r\n\r\n",
        &Limits::default(),
    );
    let want = "a Stream-, Producer- or Content-Type value is not valid UTF-8";
    assert_eq!(e.err(), Some(Malformed(want)));
    // RFC 9110 §5.5: obs-text in a field rill does not read is no error.
    assert!(parse_head(b"GET / HTTP/1.1\r\nX: caf\xe9\r\n\r\n", &Limits::default()).is_ok());
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
    // RFC 9112 §6.1: codings rill does not implement before chunked: 501.
    for v in [
        "gzip, chunked",
        "gzip\r\nTransfer-Encoding: chunked",
        "x, Chunked",
    ] {
        assert_eq!(
            body(&format!("Transfer-Encoding: {v}")),
            Err(UnsupportedTransferEncoding)
        );
    }
    // §6.3: chunked not final (or twice) leaves the length unknown: 400.
    for v in [
        "identity",
        "chunked;x=1",
        "chunked, gzip",
        "chunked, chunked",
        "x, chunked, chunked",
    ] {
        let got = body(&format!("Transfer-Encoding: {v}"));
        assert!(matches!(got, Err(Malformed(_))), "{v}: {got:?}");
    }
    assert!(matches!(body("Transfer-Encoding: "), Err(Malformed(_))));
    let both = body("Transfer-Encoding: chunked\r\nContent-Length: 3");
    assert!(matches!(both, Err(Malformed(_))));
    // RFC 9112 §6.1: HTTP/1.0 with Transfer-Encoding is faulty framing.
    for te in ["chunked", "gzip, chunked", "chunked\r\nContent-Length: 3"] {
        let old = format!("POST / HTTP/1.0\r\nTransfer-Encoding: {te}\r\n\r\n");
        assert!(malformed(&old), "{te}: {:?}", parse(&old));
    }
}

#[test]
fn expect_continue_and_header_lookup() {
    assert!(ok("PUT / HTTP/1.1\r\nExpect: 100-Continue\r\n\r\n").expect_continue);
    assert!(!ok("PUT / HTTP/1.1\r\nExpect: other\r\n\r\n").expect_continue);
    // RFC 9110 §10.1.1: an HTTP/1.0 client's expectation is ignored.
    assert!(!ok("PUT / HTTP/1.0\r\nExpect: 100-continue\r\n\r\n").expect_continue);
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
            501,
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
