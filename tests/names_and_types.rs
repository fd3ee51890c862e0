//! How a request's spelling maps onto names and types: the reserved listing
//! name however it is percent-encoded and the `/v1` prefix as a bucket
//! (extensions §1.1-§1.2), content types that match or conflict (PROTOCOL.md
//! §5.1-§5.2, extensions §4.1), a snapshot repeat whose media type is
//! spelled in another case (extensions §2.2), malformed media type
//! parameters (RFC 9110 §8.3.1), a fork's type in another spelling
//! (PROTOCOL.md §4.2), and single-valued protocol
//! headers sent twice (RFC 9110 §5.3), and the `__ds` segment PROTOCOL.md §6
//! reserves under `/v1/stream/`.

mod common;

use common::{Server, enc, req};

const BUCKET: &str = "names";

fn server() -> Server {
    let s = Server::start(&["--cores", "2"]);
    assert_eq!(
        req(s.addr, "PUT", &format!("/{BUCKET}"), &[], b"").status,
        201
    );
    s
}

#[test]
fn the_listing_name_is_reserved_however_it_is_spelled() {
    let s = server();
    let text = [("Content-Type", "text/plain")];
    for spelling in ["streams", "%73treams", "%73%74reams"] {
        let path = format!("/{BUCKET}/{spelling}");
        let r = req(s.addr, "PUT", &path, &text, b"hi");
        assert_eq!(r.status, 405, "PUT {path}: {}", r.text());
        let listing = req(s.addr, "GET", &path, &[], b"");
        assert_eq!(listing.status, 200, "GET {path}: {}", listing.text());
        assert!(
            listing.text().contains("\"streams\":[]"),
            "{}",
            listing.text()
        );
        let sub = req(s.addr, "GET", &format!("{path}/bootstrap"), &[], b"");
        assert_eq!(sub.status, 400, "a sub-resource of {path}: {}", sub.text());
    }
}

#[test]
fn the_ds_namespace_is_reserved_on_v1_for_every_method() {
    let s = server();
    let text = [("Content-Type", "text/plain")];
    assert_eq!(
        req(s.addr, "PUT", "/v1/stream/src", &text, b"x").status,
        201
    );
    for path in [
        "__ds/plain",
        "__ds/subscriptions/abc",
        "%5F%5Fds/plain",
        "__ds",
    ] {
        let path = format!("/v1/stream/{path}");
        for method in ["PUT", "POST", "GET", "HEAD", "DELETE"] {
            let r = req(s.addr, method, &path, &text, b"x");
            assert_eq!(r.status, 404, "{method} {path}: {}", r.text());
            if method != "HEAD" {
                assert!(r.text().contains("reserved"), "{}", r.text());
            }
        }
    }
    let fork = [
        ("Content-Type", "text/plain"),
        ("Stream-Forked-From", "/v1/stream/src"),
    ];
    let r = req(s.addr, "PUT", "/v1/stream/__ds/fork", &fork, b"");
    assert_eq!(r.status, 404, "a fork into __ds: {}", r.text());
    assert_eq!(
        req(s.addr, "PUT", "/v1/stream/a/__ds", &text, b"").status,
        201
    );
}

#[test]
fn v1_is_an_invalid_bucket_outside_the_upstream_routes() {
    let s = server();
    for (method, path) in [
        ("PUT", "/v1"),
        ("GET", "/v1"),
        ("DELETE", "/v1"),
        ("PUT", "/v1/x"),
    ] {
        let r = req(s.addr, method, path, &[], b"");
        assert_eq!(r.status, 400, "{method} {path}: {}", r.text());
        assert!(r.text().contains("bucket_id"), "{}", r.text());
    }
    assert_eq!(req(s.addr, "GET", "/v1/metrics", &[], b"").status, 200);
    assert_eq!(req(s.addr, "GET", "/v1/stream/", &[], b"").status, 404);
}

#[test]
fn different_charsets_conflict_and_a_missing_one_matches() {
    let s = server();
    for path in [
        format!("/{BUCKET}/text"),
        "/v1/stream/names-text".to_string(),
    ] {
        let utf8 = [("Content-Type", "text/plain; charset=utf-8")];
        let latin1 = [("Content-Type", "text/plain; charset=latin1")];
        assert_eq!(req(s.addr, "PUT", &path, &utf8, b"").status, 201);
        let conflict = req(s.addr, "POST", &path, &latin1, b"x");
        assert_eq!(conflict.status, 409, "{path}: {}", conflict.text());
        assert_eq!(req(s.addr, "PUT", &path, &latin1, b"").status, 409);
        for matching in ["text/plain", "TEXT/PLAIN;CHARSET=\"UTF-8\""] {
            let r = req(s.addr, "POST", &path, &[("Content-Type", matching)], b"y");
            assert_eq!(r.status, 204, "{path} {matching}: {}", r.text());
        }
        assert_eq!(req(s.addr, "PUT", &path, &utf8, b"").status, 200);
    }
    let batch = format!("/{BUCKET}/text/append-batch");
    let frame = [0, 0, 0, 1, b'z'];
    let latin1 = [("Content-Type", "text/plain; charset=latin1")];
    assert_eq!(req(s.addr, "POST", &batch, &latin1, &frame).status, 409);
}

/// RFC 9110 §8.3.1: a parameter is `name=value`; a malformed one makes the
/// whole Content-Type invalid (400), never the stream's echoed type.
#[test]
fn a_content_type_with_a_malformed_parameter_is_400() {
    let s = server();
    for bad in ["text/plain; charset", "text/plain; =x", "text/plain; a=b c"] {
        let path = "/v1/stream/names-malformed";
        let r = req(s.addr, "PUT", path, &[("Content-Type", bad)], b"");
        assert_eq!(r.status, 400, "{bad}: {}", r.text());
    }
    let quoted = [("Content-Type", r#"text/plain; title="a; b""#)];
    let r = req(s.addr, "PUT", &format!("/{BUCKET}/quoted"), &quoted, b"");
    assert_eq!(r.status, 201, "{}", r.text());
}

#[test]
fn a_snapshot_repeat_may_spell_its_media_type_in_another_case() {
    let s = server();
    let path = format!("/{BUCKET}/snap");
    let octets = [("Content-Type", "application/octet-stream")];
    assert_eq!(req(s.addr, "PUT", &path, &octets, b"abc").status, 201);
    let tail = req(s.addr, "HEAD", &path, &[], b"");
    let at = enc(tail.header("stream-next-offset").unwrap());
    let snapshot = format!("{path}/snapshot/{at}");
    let first = req(s.addr, "PUT", &snapshot, &octets, b"S1");
    assert_eq!(first.status, 204, "{}", first.text());
    let digest = first.header("stream-snapshot-digest").unwrap().to_string();
    let upper = [("Content-Type", "APPLICATION/OCTET-STREAM")];
    let repeat = req(s.addr, "PUT", &snapshot, &upper, b"S1");
    assert_eq!(repeat.status, 204, "{}", repeat.text());
    assert_eq!(
        repeat.header("stream-snapshot-digest"),
        Some(digest.as_str())
    );
    let text = [("Content-Type", "text/plain")];
    assert_eq!(req(s.addr, "PUT", &snapshot, &text, b"S1").status, 409);
    assert_eq!(req(s.addr, "PUT", &snapshot, &upper, b"S2").status, 409);
    let read = req(s.addr, "GET", &snapshot, &[], b"");
    assert_eq!(
        read.header("content-type"),
        Some("application/octet-stream")
    );
}

#[test]
fn a_repeated_single_valued_header_is_400_and_changes_nothing() {
    let s = server();
    let path = "/v1/stream/names-repeated";
    let text = ("Content-Type", "text/plain");
    assert_eq!(req(s.addr, "PUT", path, &[text], b"").status, 201);
    let twice = [text, ("Stream-Seq", "a"), ("Stream-Seq", "b")];
    let r = req(s.addr, "POST", path, &twice, b"x");
    assert_eq!(r.status, 400, "{}", r.text());
    assert!(
        r.text().contains("stream-seq appears more than once"),
        "{}",
        r.text()
    );
    let head = req(s.addr, "HEAD", path, &[], b"");
    assert_eq!(
        head.header("stream-next-offset")
            .map(|o| o.ends_with("_0000000000000000")),
        Some(true)
    );
    // PROTOCOL.md §4.1: a Stream-Closed other than `true` is as if absent,
    // with no error; two lines are one value, `true, true` (RFC 9110 §5.3).
    let closed_twice = [text, ("Stream-Closed", "true"), ("Stream-Closed", "true")];
    let r = req(s.addr, "POST", path, &closed_twice, b"x");
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(r.header("stream-closed"), None, "appended, not closed");
    let head = req(s.addr, "HEAD", path, &[], b"");
    assert_eq!(head.header("stream-closed"), None);
    assert_eq!(
        head.header("stream-next-offset")
            .map(|o| o.ends_with("_0000000000000001")),
        Some(true)
    );
    let seqs = [
        text,
        ("Producer-Id", "p"),
        ("Producer-Epoch", "0"),
        ("Producer-Seq", "0"),
        ("Producer-Seq", "1"),
    ];
    assert_eq!(req(s.addr, "POST", path, &seqs, b"y").status, 400);
    // List-valued fields may repeat.
    let accept = [("Accept", "text/plain"), ("Accept", "*/*")];
    assert_eq!(
        req(s.addr, "GET", &format!("{path}?offset=-1"), &accept, b"").status,
        200
    );
}

/// §4.2: a fork's Content-Type "MUST match the source stream's content
/// type". One that matches in another spelling (case, a charset the source
/// leaves out) is accepted, and the fork keeps the source's type: its
/// inherited UTF-8 bytes must not be relabelled (a fork asking for
/// `charset=latin1` was stored, and so served, as Latin-1).
#[test]
fn a_fork_keeps_its_source_content_type_however_the_request_spells_it() {
    let s = server();
    for prefix in ["/v1/stream/", &format!("/{BUCKET}/")] {
        let src = format!("{prefix}ct-src");
        let text = [("Content-Type", "text/plain")];
        assert_eq!(
            req(s.addr, "PUT", &src, &text, "café".as_bytes()).status,
            201
        );
        for (i, asked) in ["text/plain; charset=latin1", "TEXT/PLAIN"]
            .into_iter()
            .enumerate()
        {
            let fork = format!("{prefix}ct-fork-{i}");
            let headers = [
                ("Stream-Forked-From", src.as_str()),
                ("Content-Type", asked),
            ];
            let r = req(s.addr, "PUT", &fork, &headers, b"");
            assert_eq!(r.status, 201, "{asked}: {}", r.text());
            let head = req(s.addr, "HEAD", &fork, &[], b"");
            assert_eq!(head.header("content-type"), Some("text/plain"), "{asked}");
            // The same request again is the same fork.
            assert_eq!(
                req(s.addr, "PUT", &fork, &headers, b"").status,
                200,
                "{asked}"
            );
        }
        let other = format!("{prefix}ct-other");
        let html = [
            ("Stream-Forked-From", src.as_str()),
            ("Content-Type", "text/html"),
        ];
        assert_eq!(req(s.addr, "PUT", &other, &html, b"").status, 409);
    }
}

/// A browser's preflight (CORS) for a cross-origin write: the protocol's
/// request headers, `If-Match` among them (conditional writes), and an
/// application's own are allowed as asked.
#[test]
fn a_cors_preflight_allows_the_headers_a_browser_asks_for() {
    let s = server();
    let asked = "content-type,if-match,producer-id,x-request-id";
    let ask = [
        ("Origin", "http://app.example"),
        ("Access-Control-Request-Method", "POST"),
        ("Access-Control-Request-Headers", asked),
    ];
    let r = req(s.addr, "OPTIONS", "/v1/stream/cors", &ask, b"");
    assert_eq!(r.status, 204);
    assert_eq!(r.header("access-control-allow-headers"), Some(asked));
    assert_eq!(r.header("access-control-allow-origin"), Some("*"));
    let plain = req(s.addr, "OPTIONS", "/v1/stream/cors", &ask[..2], b"");
    let allowed = plain.header("access-control-allow-headers").unwrap_or("");
    assert!(allowed.contains("if-match,"), "{allowed}");
}
