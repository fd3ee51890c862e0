//! Unit tests of the protocol decisions: requests in, actions out, applied
//! to a table, with no socket, disk or clock.

use super::read::LiveMode;
use super::*;
use crate::http::parse::{Limits, parse_head};

const KEY: &str = "/v1/stream/t";
const NOW: u64 = 1_800_000_000_000;

struct Harness {
    table: Table,
}

impl Harness {
    fn new() -> Self {
        Harness {
            table: Table::default(),
        }
    }

    /// Runs a request through `decide_stream`; commits are applied.
    fn run(
        &mut self,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: &[u8],
        now_ms: u64,
    ) -> Action {
        let mut raw = format!("{method} {target} HTTP/1.1\r\nhost: h\r\n");
        for (name, value) in headers {
            raw.push_str(&format!("{name}: {value}\r\n"));
        }
        raw.push_str("\r\n");
        let head = parse_head(raw.as_bytes(), &Limits::default())
            .unwrap()
            .unwrap();
        let surface = if target.starts_with("/v1/") {
            Surface::V1
        } else {
            Surface::Bucket
        };
        let path = target.split('?').next().unwrap();
        let key = match surface {
            Surface::V1 => path.to_string(),
            Surface::Bucket => path.trim_start_matches('/').to_string(),
        };
        let body = bytes::Bytes::copy_from_slice(body);
        let req = Request {
            head: &head,
            body: &body,
            surface,
            key: &key,
            now_ms,
            normalized: Default::default(),
        };
        let action = decide_stream(&req, &self.table);
        if let Action::Commit { commands, .. } = &action {
            for command in commands.clone() {
                let (applied, _) = self.table.apply(command);
                self.table.publish(&applied, None);
            }
        }
        action
    }

    fn reply(
        &mut self,
        method: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> Response {
        let if_none_match = headers
            .iter()
            .find(|(n, _)| *n == "if-none-match")
            .map(|(_, v)| *v);
        match self.run(method, target, headers, body, NOW) {
            Action::Reply(reply) | Action::Commit { reply, .. } => reply,
            Action::Read(plan) if plan.mode == LiveMode::CatchUp => {
                let stream = self.table.get_visible(&plan.key).unwrap();
                let (start, end, cut) = read::fetch_span(stream, &plan);
                let fetched = cached(stream, start, end);
                read::catch_up(if_none_match, stream, &plan, cut, &fetched, NOW)
            }
            Action::Read(plan) => panic!("unexpected wait: {plan:?}"),
        }
    }

    fn data(&self, key: &str) -> Vec<u8> {
        let stream = self.table.get(key).unwrap();
        cached(stream, 0, stream.head_tail())
    }
}

/// The bytes `[start, end)` of a fully cached stream.
fn cached(stream: &crate::stream::Stream, start: u64, end: u64) -> Vec<u8> {
    let mut out = Vec::new();
    stream.data.copy_cached(start, end, &mut out);
    out
}

fn text(h: &mut Harness) {
    assert_eq!(
        h.reply("PUT", KEY, &[("content-type", "text/plain")], b"")
            .status,
        201
    );
}

#[test]
fn create_is_idempotent_and_conflicts_on_mismatch() {
    let mut h = Harness::new();
    let created = h.reply(
        "PUT",
        KEY,
        &[("content-type", "text/plain"), ("stream-ttl", "60")],
        b"ab",
    );
    assert_eq!(created.status, 201);
    assert_eq!(created.get_header("location"), Some("http://h/v1/stream/t"));
    assert_eq!(
        created.get_header("stream-next-offset"),
        Some(offset::format(2).as_str())
    );
    let again = h.reply(
        "PUT",
        KEY,
        &[("content-type", "TEXT/PLAIN"), ("stream-ttl", "60")],
        b"",
    );
    assert_eq!(again.status, 200);
    assert_eq!(
        h.reply("PUT", KEY, &[("content-type", "text/plain")], b"")
            .status,
        409
    );
    assert_eq!(
        h.reply(
            "PUT",
            KEY,
            &[("content-type", "text/html"), ("stream-ttl", "60")],
            b""
        )
        .status,
        409
    );
}

#[test]
fn lifetime_headers_are_validated() {
    let mut h = Harness::new();
    for ttl in ["-1", "+1", "01", "1.5", "1e3", "abc", ""] {
        assert_eq!(
            h.reply("PUT", KEY, &[("stream-ttl", ttl)], b"").status,
            400,
            "{ttl:?}"
        );
    }
    let both = [
        ("stream-ttl", "5"),
        ("stream-expires-at", "2030-01-01T00:00:00Z"),
    ];
    assert_eq!(h.reply("PUT", KEY, &both, b"").status, 400);
    assert_eq!(
        h.reply("PUT", KEY, &[("stream-expires-at", "soon")], b"")
            .status,
        400
    );
    assert_eq!(
        h.reply(
            "PUT",
            KEY,
            &[("stream-expires-at", "2030-01-01T00:00:00+02:00")],
            b""
        )
        .status,
        201
    );
}

#[test]
fn append_precedence_and_status() {
    let mut h = Harness::new();
    assert_eq!(
        h.reply("POST", KEY, &[("content-type", "text/plain")], b"x")
            .status,
        404
    );
    text(&mut h);
    assert_eq!(
        h.reply("POST", KEY, &[("content-type", "text/plain")], b"")
            .status,
        400
    );
    assert_eq!(h.reply("POST", KEY, &[], b"x").status, 400);
    assert_eq!(
        h.reply("POST", KEY, &[("content-type", "application/json")], b"1")
            .status,
        409
    );
    // Only a valid type that differs is 409; a malformed one is 400.
    for malformed in ["garbage", "text/", "/plain"] {
        let r = h.reply("POST", KEY, &[("content-type", malformed)], b"x");
        assert_eq!(r.status, 400, "{malformed}");
    }
    let ok = h.reply(
        "POST",
        KEY,
        &[("content-type", "text/plain; charset=utf-8")],
        b"abc",
    );
    assert_eq!(ok.status, 204);
    assert_eq!(
        ok.get_header("stream-next-offset"),
        Some(offset::format(3).as_str())
    );
    // §5.2 precedence: a closed stream answers 409 with Stream-Closed
    // first, also to a malformed type.
    h.reply("POST", KEY, &[("stream-closed", "true")], b"");
    let closed = h.reply("POST", KEY, &[("content-type", "garbage")], b"x");
    assert_eq!(closed.status, 409);
    assert_eq!(closed.get_header("stream-closed"), Some("true"));
}

#[test]
fn stream_seq_is_bytewise_and_strict() {
    let mut h = Harness::new();
    text(&mut h);
    let seq = |s| [("content-type", "text/plain"), ("stream-seq", s)];
    assert_eq!(h.reply("POST", KEY, &seq("2"), b"a").status, 204);
    assert_eq!(h.reply("POST", KEY, &seq("10"), b"b").status, 409);
    assert_eq!(h.reply("POST", KEY, &seq("2"), b"b").status, 409);
    assert_eq!(h.reply("POST", KEY, &seq("3"), b"b").status, 204);
    // A close-only POST keeps the order too: a regression is 409 and the
    // stream stays open; a later sequence closes it.
    let close = |s| [("stream-closed", "true"), ("stream-seq", s)];
    assert_eq!(h.reply("POST", KEY, &close("2"), b"").status, 409);
    assert_eq!(h.reply("POST", KEY, &seq("4"), b"c").status, 204);
    let closed = h.reply("POST", KEY, &close("5"), b"");
    assert_eq!(
        (closed.status, closed.get_header("stream-closed")),
        (204, Some("true"))
    );
}

fn producer<'a>(epoch: &'a str, seq: &'a str) -> [(&'a str, &'a str); 4] {
    [
        ("content-type", "text/plain"),
        ("producer-id", "p"),
        ("producer-epoch", epoch),
        ("producer-seq", seq),
    ]
}

#[test]
fn producer_table_end_to_end() {
    let mut h = Harness::new();
    text(&mut h);
    let first = h.reply("POST", KEY, &producer("0", "0"), b"a");
    assert_eq!(
        (first.status, first.get_header("producer-seq")),
        (200, Some("0"))
    );
    assert_eq!(h.reply("POST", KEY, &producer("0", "1"), b"b").status, 200);
    let dup = h.reply("POST", KEY, &producer("0", "0"), b"a");
    assert_eq!(
        (dup.status, dup.get_header("producer-seq")),
        (204, Some("1"))
    );
    let gap = h.reply("POST", KEY, &producer("0", "5"), b"c");
    assert_eq!(
        (gap.status, gap.get_header("producer-expected-seq")),
        (409, Some("2"))
    );
    assert_eq!(h.reply("POST", KEY, &producer("1", "3"), b"c").status, 400);
    assert_eq!(h.reply("POST", KEY, &producer("1", "0"), b"c").status, 200);
    let stale = h.reply("POST", KEY, &producer("0", "2"), b"d");
    assert_eq!(
        (stale.status, stale.get_header("producer-epoch")),
        (403, Some("1"))
    );
    assert_eq!(h.data(KEY), b"abc");
    let partial = [("content-type", "text/plain"), ("producer-id", "p")];
    assert_eq!(h.reply("POST", KEY, &partial, b"x").status, 400);
    assert_eq!(
        h.reply("POST", KEY, &producer("0", "1e3"), b"x").status,
        400
    );
}

/// Producer state is bounded: ids longer than the limit get 431, a new id
/// past the per-stream count gets 429 (known ids go on, duplicates too).
#[test]
fn producer_limits() {
    let mut h = Harness::new();
    h.table
        .set_producer_limits(crate::stream::budget::ProducerLimits {
            max_id_bytes: 4,
            max_per_stream: 2,
        });
    text(&mut h);
    let as_id = |id: &'static str, seq: &'static str| {
        let mut headers = producer("0", seq);
        headers[1] = ("producer-id", id);
        headers
    };
    let long = h.reply("POST", KEY, &as_id("abcde", "0"), b"x");
    let code = |r: &Response| String::from_utf8_lossy(&r.body).into_owned();
    assert_eq!(long.status, 431);
    assert!(code(&long).contains("\"producer_id_too_long\""));
    assert_eq!(h.reply("POST", KEY, &as_id("abcd", "0"), b"a").status, 200);
    assert_eq!(h.reply("POST", KEY, &as_id("b", "0"), b"b").status, 200);
    let third = h.reply("POST", KEY, &as_id("c", "0"), b"c");
    assert_eq!(third.status, 429);
    assert!(code(&third).contains("\"too_many_producers\""));
    assert_eq!(h.reply("POST", KEY, &as_id("b", "1"), b"c").status, 200);
    assert_eq!(h.reply("POST", KEY, &as_id("b", "1"), b"c").status, 204);
    assert_eq!(h.data(KEY), b"abc");
}

#[test]
fn closure_rules() {
    let mut h = Harness::new();
    text(&mut h);
    let close_with_data = [
        ("content-type", "text/plain"),
        ("stream-closed", "true"),
        ("producer-id", "p"),
        ("producer-epoch", "0"),
        ("producer-seq", "0"),
    ];
    let closed = h.reply("POST", KEY, &close_with_data, b"last");
    assert_eq!(
        (closed.status, closed.get_header("stream-closed")),
        (200, Some("true"))
    );
    let retry = h.reply("POST", KEY, &close_with_data, b"other");
    assert_eq!(
        (retry.status, retry.get_header("stream-closed")),
        (204, Some("true"))
    );
    let late = h.reply("POST", KEY, &[("content-type", "text/plain")], b"late");
    assert_eq!(
        (late.status, late.get_header("stream-closed")),
        (409, Some("true"))
    );
    let close_again = h.reply("POST", KEY, &[("stream-closed", "true")], b"");
    assert_eq!(close_again.status, 204);
    assert_eq!(h.data(KEY), b"last");
    let head = h.reply("HEAD", KEY, &[], b"");
    assert_eq!(head.get_header("stream-closed"), Some("true"));
}

#[test]
fn json_mode_flattens_and_renders_per_surface() {
    let mut h = Harness::new();
    let json = [("content-type", "application/json")];
    assert_eq!(h.reply("PUT", KEY, &json, b"[]").status, 201);
    assert_eq!(h.reply("POST", KEY, &json, b"[]").status, 400);
    assert_eq!(h.reply("POST", KEY, &json, b"{bad").status, 400);
    assert_eq!(
        h.reply("POST", KEY, &json, b"[{\"a\": 1}, [2, 3]]").status,
        204
    );
    let read = h.reply("GET", KEY, &[], b"");
    assert_eq!(read.body, b"[{\"a\":1},[2,3]]");
    let mid = offset::format(3);
    assert_eq!(
        h.reply("GET", &format!("{KEY}?offset={mid}"), &[], b"")
            .status,
        400
    );
    assert_eq!(h.reply("PUT", "/buck/s", &json, b"[1, 2]").status, 201);
    let ndjson = h.reply("GET", "/buck/s", &[], b"");
    assert_eq!(
        (ndjson.body.as_slice(), ndjson.get_header("content-type")),
        (&b"1\n2\n"[..], Some("application/x-ndjson"))
    );
}

#[test]
fn reads_validate_offsets_and_honour_etags() {
    let mut h = Harness::new();
    text(&mut h);
    h.reply("POST", KEY, &[("content-type", "text/plain")], b"hello");
    for bad in ["", "abc", "0_1", "-2", "now%0A"] {
        let status = h
            .reply("GET", &format!("{KEY}?offset={bad}"), &[], b"")
            .status;
        assert_eq!(status, 400, "{bad:?}");
    }
    for twice in ["offset=-1&offset=-1", "offset=-1&live=long-poll&live=sse"] {
        let status = h.reply("GET", &format!("{KEY}?{twice}"), &[], b"").status;
        assert_eq!(status, 400, "{twice}");
    }
    // §5.5: no data beyond the requested offset is an empty 200; past the
    // tail it names the tail, where the client can resume.
    let past = h.reply(
        "GET",
        &format!("{KEY}?offset={}", offset::format(99)),
        &[],
        b"",
    );
    let tail_token = offset::format(5);
    assert_eq!((past.status, past.body.len()), (200, 0));
    assert_eq!(
        past.get_header("stream-next-offset"),
        Some(tail_token.as_str())
    );
    assert_eq!(past.get_header("stream-up-to-date"), Some("true"));
    let full = h.reply("GET", KEY, &[], b"");
    // §10.1: data chunks are cacheable, also the one reaching the tail; the
    // empty answer at the tail is not.
    let public = "public, max-age=60, stale-while-revalidate=300";
    assert_eq!(full.get_header("cache-control"), Some(public));
    let tail = full.get_header("stream-next-offset").unwrap().to_string();
    let at_tail = h.reply("GET", &format!("{KEY}?offset={tail}"), &[], b"");
    assert_eq!(at_tail.get_header("cache-control"), Some("no-store"));
    let tag = full.get_header("etag").unwrap().to_string();
    let not_modified = h.reply("GET", KEY, &[("if-none-match", &tag)], b"");
    assert_eq!(not_modified.status, 304);
    assert_eq!(
        not_modified.get_header("cache-control"),
        full.get_header("cache-control"),
        "a 304 carries the 200's Cache-Control"
    );
    // RFC 9110 §13.1.2: any tag of a list, weak comparison, and `*`.
    for matching in [
        format!("\"other\", {tag}"),
        format!("W/{tag}"),
        "*".to_string(),
    ] {
        let r = h.reply("GET", KEY, &[("if-none-match", &matching)], b"");
        assert_eq!(r.status, 304, "{matching}");
    }
    let other = h.reply("GET", KEY, &[("if-none-match", "\"other\", W/\"x\"")], b"");
    assert_eq!(other.status, 200);
    // So does a HEAD naming its own ETag (RFC 9110 §13.1.2: GET or HEAD).
    let head_tag = h
        .reply("HEAD", KEY, &[], b"")
        .get_header("etag")
        .unwrap()
        .to_string();
    let head = h.reply("HEAD", KEY, &[("if-none-match", &head_tag)], b"");
    assert_eq!(head.status, 304);
    assert_eq!(head.get_header("etag"), Some(head_tag.as_str()));
    let head = h.reply("HEAD", KEY, &[("if-none-match", "\"other\"")], b"");
    assert_eq!(head.status, 200);
    // RFC 9110 §5.3: the list sent on two lines is one list.
    let two_lines = [("if-none-match", "\"other\""), ("if-none-match", &head_tag)];
    assert_eq!(h.reply("HEAD", KEY, &two_lines, b"").status, 304);
    let from = h.reply(
        "GET",
        &format!("{KEY}?offset={}", offset::format(2)),
        &[],
        b"",
    );
    assert_eq!(from.body, b"llo");
    let now = h.reply("GET", &format!("{KEY}?offset=now"), &[], b"");
    assert_eq!(
        (now.body.len(), now.get_header("stream-up-to-date")),
        (0, Some("true"))
    );
    // A closed stream's end of stream never changes: cacheable.
    h.reply("POST", KEY, &[("stream-closed", "true")], b"");
    let end = h.reply("GET", &format!("{KEY}?offset={tail}"), &[], b"");
    assert_eq!(end.get_header("stream-closed"), Some("true"));
    assert_eq!(end.get_header("cache-control"), Some(public));
}

#[test]
fn long_poll_waits_only_at_the_tail() {
    let mut h = Harness::new();
    text(&mut h);
    assert_eq!(
        h.reply("GET", &format!("{KEY}?live=long-poll"), &[], b"")
            .status,
        400
    );
    let tail = offset::format(0);
    let Action::Read(plan) = h.run(
        "GET",
        &format!("{KEY}?offset={tail}&live=long-poll"),
        &[],
        b"",
        NOW,
    ) else {
        panic!("expected a wait at the tail");
    };
    assert_eq!(plan.mode, LiveMode::LongPoll);
    // A token past the tail waits at the tail (§5.5).
    let past = offset::format(50);
    let Action::Read(from_past) = h.run(
        "GET",
        &format!("{KEY}?offset={past}&live=long-poll"),
        &[],
        b"",
        NOW,
    ) else {
        panic!("expected a wait at the tail");
    };
    assert_eq!(from_past.start, 0);
    let stream = h.table.get(KEY).unwrap();
    assert!(read::poll_empty(&plan, stream, NOW, false).is_none());
    let timeout = read::poll_empty(&plan, stream, NOW, true).unwrap();
    assert_eq!(
        (timeout.status, timeout.get_header("stream-up-to-date")),
        (204, Some("true"))
    );
    h.reply("POST", KEY, &[("content-type", "text/plain")], b"new");
    let stream = h.table.get(KEY).unwrap();
    let (start, end, cut) = read::fetch_span(stream, &plan);
    let fetched = cached(stream, start, end);
    let (end, body) = read::poll_body(&plan, stream, cut, &fetched).unwrap();
    let data = read::poll_head(&plan, stream, end, NOW).unwrap();
    assert_eq!((data.status, body.as_slice()), (200, &b"new"[..]));
    let next = crate::protocol::offset::format(stream.tail());
    assert_eq!(data.get_header("stream-next-offset"), Some(next.as_str()));
    assert!(
        data.get_header("stream-cursor")
            .unwrap()
            .bytes()
            .all(|b| b.is_ascii_digit())
    );
}

#[test]
fn expiry_reaps_and_ttl_slides() {
    let mut h = Harness::new();
    h.reply("PUT", KEY, &[("stream-ttl", "2")], b"");
    assert!(reap_expired(&h.table, KEY, NOW + 1_999).is_none());
    h.table.touch(KEY, NOW + 1_500);
    assert!(reap_expired(&h.table, KEY, NOW + 3_000).is_none());
    let id = h.table.get(KEY).unwrap().id;
    assert_eq!(
        reap_expired(&h.table, KEY, NOW + 3_500),
        Some(Command::Delete {
            key: KEY.into(),
            stream_id: id
        })
    );
}

/// §5.7: a long-poll's data answer has the catch-up read's headers,
/// `Cache-Control` bounded by the stream's lifetime among them.
#[test]
fn long_poll_data_is_cached_no_longer_than_the_stream_lives() {
    let mut h = Harness::new();
    let text = ("content-type", "text/plain");
    h.reply("PUT", KEY, &[text, ("stream-ttl", "5")], b"");
    let at = format!("{KEY}?offset={}&live=long-poll", offset::format(0));
    let Action::Read(plan) = h.run("GET", &at, &[], b"", NOW) else {
        panic!("expected a wait at the tail");
    };
    h.reply("POST", KEY, &[text], b"new");
    let stream = h.table.get(KEY).unwrap();
    let data = read::poll_head(&plan, stream, stream.tail(), NOW).unwrap();
    assert_eq!(data.get_header("cache-control"), Some("public, max-age=5"));
}

/// §10.1's `max-age=60, stale-while-revalidate=300`, cut to what is left of
/// the stream's lifetime: a shared cache serves nothing past its expiry.
#[test]
fn catch_up_data_is_not_served_stale_past_the_stream_lifetime() {
    for (ttl, want) in [
        (None, "public, max-age=60, stale-while-revalidate=300"),
        (
            Some("1000"),
            "public, max-age=60, stale-while-revalidate=300",
        ),
        (Some("100"), "public, max-age=60, stale-while-revalidate=40"),
        (Some("60"), "public, max-age=60"),
        (Some("5"), "public, max-age=5"),
    ] {
        let mut h = Harness::new();
        let text = ("content-type", "text/plain");
        let lifetime: Vec<_> = ttl.map(|t| ("stream-ttl", t)).into_iter().collect();
        h.reply("PUT", KEY, &[&[text][..], &lifetime].concat(), b"data");
        let read = h.reply("GET", &format!("{KEY}?offset=-1"), &[], b"");
        assert_eq!(read.get_header("cache-control"), Some(want), "{ttl:?}");
    }
}

/// HEAD's `Stream-TTL`: upstream (PROTOCOL.md §5.5) the window itself; in
/// the extensions' base (§5.4) the "remaining time-to-live", in whole
/// seconds rounded up, of the window the last read or write started.
#[test]
fn head_reports_the_ttl_window_or_what_remains_of_it() {
    let mut h = Harness::new();
    let (v1, bucketed) = (KEY, "/b/s");
    let ttl_at =
        |h: &mut Harness, key: &str, now_ms: u64| match h.run("HEAD", key, &[], b"", now_ms) {
            Action::Reply(reply) => reply.get_header("stream-ttl").map(str::to_string),
            _ => panic!("HEAD is answered at once"),
        };
    for key in [v1, bucketed] {
        h.reply("PUT", key, &[("stream-ttl", "10")], b"");
        assert_eq!(ttl_at(&mut h, key, NOW).as_deref(), Some("10"));
    }
    assert_eq!(ttl_at(&mut h, bucketed, NOW + 1_500).as_deref(), Some("9"));
    assert_eq!(ttl_at(&mut h, bucketed, NOW + 9_999).as_deref(), Some("1"));
    assert_eq!(ttl_at(&mut h, v1, NOW + 9_999).as_deref(), Some("10"));
    h.table.touch("b/s", NOW + 5_000);
    assert_eq!(ttl_at(&mut h, bucketed, NOW + 5_000).as_deref(), Some("10"));
    h.reply("PUT", "/v1/stream/no-ttl", &[], b"");
    let head = h.reply("HEAD", "/v1/stream/no-ttl", &[], b"");
    assert_eq!(head.get_header("stream-ttl"), None);
}

#[test]
fn ttl_reads_are_logged_once_per_tenth_of_a_window() {
    let mut h = Harness::new();
    let text = ("content-type", "text/plain");
    h.reply("PUT", KEY, &[("stream-ttl", "10"), text], b"");
    assert!(access_record(&h.table, KEY, NOW + 999).is_none());
    let touch = access_record(&h.table, KEY, NOW + 1_000).expect("a tenth of a window on");
    assert!(matches!(touch, Command::Touch { now_ms, .. } if now_ms == NOW + 1_000));
    h.table.apply(touch);
    assert_eq!(h.table.get(KEY).unwrap().logged_access_ms, NOW + 1_000);
    assert!(access_record(&h.table, KEY, NOW + 1_999).is_none());
    // A logged write moves the bound as well.
    h.run("POST", KEY, &[text], b"x", NOW + 5_000);
    assert!(access_record(&h.table, KEY, NOW + 5_999).is_none());
    assert!(access_record(&h.table, KEY, NOW + 6_000).is_some());
    // Without a TTL nothing is logged.
    h.reply("PUT", "/v1/stream/no-ttl", &[], b"");
    assert!(access_record(&h.table, "/v1/stream/no-ttl", NOW + (1 << 40)).is_none());
}

/// The `Command::Append` `decide_stream` makes of a POST of `body` to KEY.
fn decided_append(h: &Harness, body: &Bytes) -> Bytes {
    let raw = format!("POST {KEY} HTTP/1.1\r\nhost: h\r\ncontent-type: text/plain\r\n\r\n");
    let head = parse_head(raw.as_bytes(), &Limits::default())
        .unwrap()
        .unwrap();
    let req = Request {
        head: &head,
        body,
        surface: Surface::V1,
        key: KEY,
        now_ms: NOW,
        normalized: Default::default(),
    };
    let Action::Commit { commands, .. } = decide_stream(&req, &h.table) else {
        panic!("the append is not committed");
    };
    let [Command::Append { data, .. }] = &commands[..] else {
        panic!("not one append: {commands:?}");
    };
    assert_eq!(data, body);
    data.clone()
}

#[test]
fn a_large_byte_append_stores_the_body_as_sent_without_a_copy() {
    let mut h = Harness::new();
    text(&mut h);
    let large = Bytes::from(vec![b'x'; append::SHARED_FROM]);
    let stored = decided_append(&h, &large);
    assert_eq!(stored.as_ptr(), large.as_ptr(), "the body was copied");
    let small = Bytes::from(vec![b'x'; append::SHARED_FROM - 1]);
    let stored = decided_append(&h, &small);
    assert_ne!(stored.as_ptr(), small.as_ptr(), "a small body was shared");
}
