//! JSON Record Coordinates (extensions §6), read side, against the real
//! binary on both URL surfaces: record-aware read parameters and their
//! errors (§6.6), record-aligned NDJSON responses and the offset/record
//! boundary identity (§6.7), the envelope view (§6.8), and retention,
//! record-addressed snapshots and bootstrap (§6.10). Write side:
//! `records.rs`; live reads and survival: `records_live.rs`.

mod common;
mod records_helpers;

use common::{Response, Server, enc, req};
use records_helpers::*;
use serde_json::{Value, json};

/// Asserts a successful record read: coordinates, values, tail offset.
fn assert_read(
    s: &Server,
    path: &str,
    query: &str,
    coords: (u64, u64, u64),
    want: &[Value],
) -> Response {
    let r = read_records(s, path, query);
    assert_eq!(read_coords(&r), coords, "{path}?{query}");
    assert_eq!(lines(&r.body), want, "{path}?{query}");
    r
}

fn assert_status(s: &Server, path: &str, query: &str, status: u16) -> Response {
    let r = get(s, path, query);
    assert_eq!(
        r.status,
        status,
        "{path}?{query}: {:?} {}",
        r.headers,
        r.text()
    );
    r
}

// ------------------------------------------------------------------ §6.6

#[test]
fn record_read_starts_at_the_given_record() {
    let s = start();
    for path in both("from") {
        five(&s, &path);
        let tail = next_offset(&head(&s, &path));
        let r = assert_read(&s, &path, "record=2", (0, 2, 5), &values(2..5));
        assert_eq!(next_offset(&r), tail);
        assert!(is_true(&r, "stream-up-to-date"), "{:?}", r.headers);
        assert_read(&s, &path, "record=0", (0, 0, 5), &values(0..5));
        assert_read(&s, &path, "record=4", (0, 4, 5), &values(4..5));
    }
}

#[test]
fn record_now_is_an_empty_read_at_the_tail() {
    let s = start();
    for path in both("now") {
        create(&s, &path, b"");
        assert_read(&s, &path, "record=now", (0, 0, 0), &[]);
        append(&s, &path, &body_of(&values(0..5)));
        let r = assert_read(&s, &path, "record=now", (0, 5, 5), &[]);
        assert!(r.body.is_empty());
        assert_eq!(next_offset(&r), next_offset(&head(&s, &path)));
        assert!(is_true(&r, "stream-up-to-date"));
    }
}

#[test]
fn tail_records_starts_at_max_of_first_and_tail_minus_count() {
    let s = start();
    for path in both("tail") {
        five(&s, &path);
        let r = assert_read(&s, &path, "tail_records=2", (0, 3, 5), &values(3..5));
        // The URL names the latest records, not a fixed range (§10.1).
        assert_eq!(r.header("cache-control"), Some("no-store"));
        // PROTOCOL.md §8.1: only offset=now answers go without an ETag. It
        // revalidates while the tail stands still, and not once it moved.
        let tag = r
            .header("etag")
            .expect("a tail_records read's ETag")
            .to_string();
        let revalidate = || {
            let target = format!("{path}?tail_records=2");
            req(s.addr, "GET", &target, &[("If-None-Match", &tag)], b"")
        };
        assert_eq!(revalidate().status, 304);
        append(&s, &path, &body_of(&values(5..6)));
        let moved = revalidate();
        assert_eq!(moved.status, 200);
        assert_ne!(moved.header("etag"), Some(tag.as_str()));
        assert_eq!(lines(&moved.body), values(4..6));
        assert_read(&s, &path, "tail_records=6", (0, 0, 6), &values(0..6));
        assert_read(&s, &path, "tail_records=500", (0, 0, 6), &values(0..6));
        // "tail_records=0 is equivalent to record=now."
        let r = assert_read(&s, &path, "tail_records=0", (0, 6, 6), &[]);
        assert_eq!(next_offset(&r), next_offset(&head(&s, &path)));
    }
}

#[test]
fn start_parameters_are_mutually_exclusive_with_each_other_and_offset() {
    let s = start();
    for path in both("exclusive") {
        five(&s, &path);
        let tail = enc(&next_offset(&head(&s, &path)));
        for query in [
            "record=0&tail_records=1".to_string(),
            "record=now&tail_records=1".to_string(),
            "tail_records=1&record=now".to_string(),
            "record=0&offset=-1".to_string(),
            "offset=-1&record=0".to_string(),
            "record=now&offset=now".to_string(),
            "tail_records=1&offset=-1".to_string(),
            format!("record=1&offset={tail}"),
            "record=0&record=now".to_string(),
        ] {
            assert_status(&s, &path, &query, 400);
        }
    }
}

#[test]
fn malformed_start_parameters_are_400() {
    let s = start();
    for path in both("malformed") {
        five(&s, &path);
        for query in [
            "tail_records=-1",
            "tail_records=abc",
            "tail_records=1.5",
            "tail_records=",
            "record=-1",
            "record=abc",
            "record=1.0",
            "record=",
            "record=NOW",
        ] {
            assert_status(&s, &path, query, 400);
        }
    }
}

#[test]
fn record_beyond_the_tail_is_400_with_record_next() {
    let s = start();
    for path in both("beyond") {
        five(&s, &path);
        for record in ["6", "1000", "18446744073709551615"] {
            let r = assert_status(&s, &path, &format!("record={record}"), 400);
            assert_eq!(num(&r, "stream-record-next"), 5, "record={record}");
        }
        // Not even an unsigned 64-bit integer: malformed, still 400.
        assert_status(&s, &path, "record=18446744073709551616", 400);
        let empty = format!("{path}-empty");
        create(&s, &empty, b"");
        let r = assert_status(&s, &empty, "record=1", 400);
        assert_eq!(num(&r, "stream-record-next"), 0);
    }
}

#[test]
fn record_at_the_tail_is_an_up_to_date_empty_read() {
    // "record = N is a valid up-to-date empty read." "An empty successful
    // response MUST set Stream-Record-Start and Stream-Record-Next to the
    // resolved starting ordinal."
    let s = start();
    for path in both("at-tail") {
        create(&s, &path, b"");
        assert_read(&s, &path, "record=0", (0, 0, 0), &[]);
        append(&s, &path, &body_of(&values(0..5)));
        let r = assert_read(&s, &path, "record=5", (0, 5, 5), &[]);
        assert!(r.body.is_empty());
        assert!(is_true(&r, "stream-up-to-date"));
        assert_eq!(next_offset(&r), next_offset(&head(&s, &path)));
    }
}

#[test]
fn max_records_needs_a_record_start() {
    let s = start();
    for path in both("max-alone") {
        five(&s, &path);
        for query in [
            "max_records=1",
            "offset=-1&max_records=1",
            "offset=now&max_records=1",
        ] {
            assert_status(&s, &path, query, 400);
        }
    }
}

#[test]
fn max_records_must_be_a_positive_integer() {
    let s = start();
    for path in both("max-bad") {
        five(&s, &path);
        for value in ["0", "-1", "abc", "", "1.5"] {
            assert_status(&s, &path, &format!("record=0&max_records={value}"), 400);
        }
    }
}

#[test]
fn max_bytes_with_a_record_start_is_400() {
    // "A record-aware read that includes max_bytes MUST return 400 Bad Request."
    let s = start();
    for path in both("max-bytes") {
        five(&s, &path);
        for query in [
            "record=0&max_bytes=100",
            "record=now&max_bytes=100",
            "tail_records=2&max_bytes=100",
            "record=0&max_records=1&max_bytes=100",
            "max_bytes=100&tail_records=0",
        ] {
            assert_status(&s, &path, query, 400);
        }
    }
}

// ------------------------------------------------------------------ §6.7

#[test]
fn max_records_limits_the_number_of_complete_records() {
    let s = start();
    for path in both("max") {
        five(&s, &path);
        assert_read(
            &s,
            &path,
            "record=1&max_records=2",
            (0, 1, 3),
            &values(1..3),
        );
        assert_read(
            &s,
            &path,
            "tail_records=3&max_records=1",
            (0, 2, 3),
            &values(2..3),
        );
        assert_read(
            &s,
            &path,
            "record=3&max_records=100",
            (0, 3, 5),
            &values(3..5),
        );
        assert_read(&s, &path, "record=5&max_records=1", (0, 5, 5), &[]);
    }
}

#[test]
fn record_reads_are_ndjson_of_normalized_messages_on_both_surfaces() {
    let s = start();
    let body = br#"[ {"b" : [1, 2.50, "x y"], "a":null} , "s\u00e9" , 1e3 ]"#;
    let [bucket_path, v1_path] = both("ndjson");
    create(&s, &bucket_path, body);
    create(&s, &v1_path, body);
    let canonical = get(&s, &bucket_path, "offset=-1").body;
    for path in [&bucket_path, &v1_path] {
        let r = read_records(&s, path, "record=0");
        assert_eq!(read_coords(&r), (0, 0, 3));
        // Offset reads and record reads expose the same canonical sequence.
        assert_eq!(r.body, canonical, "{path}");
        assert_eq!(lines(&r.body).len(), 3);
    }
    // The upstream dialect of an ordinary read is unchanged: one JSON array.
    let plain = get(&s, &v1_path, "offset=-1");
    assert_eq!(media_type(&plain).as_deref(), Some(JSON));
    assert_eq!(offset_read_values(&v1_path, &plain), lines(&canonical));
}

#[test]
fn next_offset_names_the_same_boundary_as_record_next() {
    // "Stream-Next-Offset MUST identify the same logical boundary as
    // Stream-Record-Next."; "O(r) always identifies the first canonical
    // byte of record r."
    let s = start();
    for path in both("boundary") {
        create(&s, &path, b"");
        // Acks give O(Next) for each append: one-record and multi-record appends.
        let mut ack_offsets = Vec::new();
        for body in [
            &b"[{\"n\":0},{\"n\":1},{\"n\":2}]"[..],
            b"{\"n\":3}",
            b"[{\"n\":4},{\"n\":5}]",
        ] {
            let r = append(&s, &path, body);
            ack_offsets.push((range(&r).1, next_offset(&r)));
        }
        let mut previous = String::new();
        for k in 1..=6u64 {
            let r = read_records(&s, &path, &format!("record=0&max_records={k}"));
            assert_eq!(read_coords(&r), (0, 0, k));
            let at = next_offset(&r);
            assert!(at > previous, "offsets increase with ordinals");
            previous = at.clone();
            if let Some((_, acked)) = ack_offsets.iter().find(|(n, _)| *n == k) {
                assert_eq!(&at, acked, "O({k}) from a read equals the append ack");
            }
            // An ordinary read from that offset returns exactly records k..
            let plain = get_at(&s, &path, &at);
            assert_eq!(plain.status, 200);
            assert_eq!(
                offset_read_values(&path, &plain),
                values(k..6),
                "offset of record {k}"
            );
            let from_k = read_records(&s, &path, &format!("record={k}"));
            if is_bucketed(&path) {
                assert_eq!(plain.body, from_k.body, "same canonical bytes from O({k})");
            }
            assert_eq!(lines(&from_k.body), values(k..6));
        }
    }
}

#[test]
fn record_reads_never_split_records_larger_than_a_window() {
    // Six 700 KB records (4.2 MB) exceed the default read window: each
    // record-aware response still holds only complete records.
    let s = start();
    let path = bucketed("large");
    create(&s, &path, b"");
    let big: Vec<Value> = (0..6)
        .map(|i| json!({"i": i, "pad": "x".repeat(700_000)}))
        .collect();
    for v in &big {
        append(&s, &path, &serde_json::to_vec(v).unwrap());
    }
    assert_eq!(records_from(&s, &path, 0, 6), big);
}

#[test]
fn a_record_larger_than_the_read_window_is_returned_whole() {
    // A record-aware read contains only complete records and must still make
    // progress, so a single record beyond the default 4 MiB window comes
    // back whole rather than cut or never.
    let s = start_with(&[
        "--cores",
        "2",
        "--max-body-bytes",
        "6291456",
        "--segment-bytes",
        "16777216",
    ]);
    let path = bucketed("huge");
    create(&s, &path, b"1");
    let huge = json!({"pad": "y".repeat(5 << 20)});
    append(&s, &path, &serde_json::to_vec(&huge).unwrap());
    assert_eq!(records_from(&s, &path, 0, 2), [json!(1), huge.clone()]);
    let r = read_records(&s, &path, "record=1&max_records=1");
    assert_eq!(lines(&r.body), [huge]);
}

#[test]
fn ordinary_offset_reads_may_still_end_inside_a_record() {
    // §6.7: "Ordinary GET {stream_url}?offset=... behavior is unchanged and
    // MAY still end in the middle of a JSON record." (bucketed max_bytes)
    let s = start();
    let path = bucketed("partial");
    create(
        &s,
        &path,
        br#"[{"long":"abcdefghijklmnopqrstuvwxyz"},{"b":2}]"#,
    );
    let whole = get(&s, &path, "offset=-1").body;
    let (mut got, mut at) = (Vec::new(), "-1".to_string());
    let mut ended_mid_record = false;
    for _ in 0..100 {
        let r = get(&s, &path, &format!("offset={}&max_bytes=7", enc(&at)));
        assert_eq!(r.status, 200, "{}", r.text());
        ended_mid_record |= !r.body.is_empty() && !r.body.ends_with(b"\n");
        got.extend_from_slice(&r.body);
        at = next_offset(&r);
        if is_true(&r, "stream-up-to-date") {
            break;
        }
    }
    assert!(ended_mid_record, "a 7-byte window cuts the 40-byte record");
    assert_eq!(got, whole);
}

// ------------------------------------------------------------------ §6.8

/// The (record, value) pairs of an envelope response.
fn envelopes(r: &Response) -> Vec<(u64, Value)> {
    assert_eq!(
        media_type(r).as_deref(),
        Some(ENVELOPE_NDJSON),
        "{:?}",
        r.headers
    );
    lines(&r.body)
        .into_iter()
        .map(|line| {
            let record = line["record"]
                .as_u64()
                .unwrap_or_else(|| panic!("no record: {line}"));
            (
                record,
                line.get("value")
                    .cloned()
                    .unwrap_or_else(|| panic!("no value: {line}")),
            )
        })
        .collect()
}

#[test]
fn envelope_view_wraps_each_record_with_its_ordinal() {
    let s = start();
    for path in both("envelope") {
        five(&s, &path);
        let r = get(&s, &path, "record=1&record_view=envelope");
        assert_eq!(r.status, 200, "{}", r.text());
        assert_token(&r, "envelope read");
        assert_eq!(read_coords(&r), (0, 1, 5));
        let expected: Vec<(u64, Value)> = (1..5).zip(values(1..5)).collect();
        assert_eq!(envelopes(&r), expected);
        let r = get(
            &s,
            &path,
            "tail_records=2&max_records=1&record_view=envelope",
        );
        assert_eq!(r.status, 200);
        assert_eq!(read_coords(&r), (0, 3, 4));
        assert_eq!(envelopes(&r), [(3, json!({"n": 3}))]);
        let r = get(&s, &path, "record=now&record_view=envelope");
        assert_eq!((r.status, read_coords(&r)), (200, (0, 5, 5)));
        assert!(envelopes(&r).is_empty());
    }
}

#[test]
fn envelope_view_needs_a_record_start() {
    // "This parameter MUST be combined with a record-aware start parameter."
    let s = start();
    for path in both("envelope-alone") {
        five(&s, &path);
        let tail = enc(&next_offset(&head(&s, &path)));
        for query in [
            "record_view=envelope".to_string(),
            "offset=-1&record_view=envelope".to_string(),
            format!("offset={tail}&live=long-poll&record_view=envelope"),
            "offset=-1&live=sse&record_view=envelope".to_string(),
        ] {
            assert_status(&s, &path, &query, 400);
        }
    }
}

#[test]
fn envelope_reads_change_nothing_canonical() {
    // "It MUST NOT change canonical stream bytes, offsets, record ordinals,
    // ETags for the canonical representation, snapshots, bootstrap data,
    // or ordinary reads."
    let s = start();
    let path = bucketed("envelope-canon");
    five(&s, &path);
    let snapshot = format!("{path}/snapshot?record=2");
    let published = req(
        s.addr,
        "PUT",
        &snapshot,
        &[("Content-Type", "application/x-state")],
        b"S",
    );
    assert_eq!(published.status, 204, "{}", published.text());
    let observe = |s: &Server| {
        let plain = get(s, &path, "offset=-1");
        let canon = read_records(s, &path, "record=0");
        let h = head(s, &path);
        let (_, parts) = bootstrap(s, &path);
        (
            (plain.header("etag").map(str::to_string), plain.body),
            (canon.header("etag").map(str::to_string), canon.body),
            (
                next_offset(&h),
                h.header("stream-snapshot-offset").map(str::to_string),
            ),
            first_next(s, &path),
            parts,
        )
    };
    let before = observe(&s);
    for query in [
        "record=0&record_view=envelope",
        "tail_records=3&record_view=envelope",
    ] {
        assert_eq!(get(&s, &path, query).status, 200);
    }
    assert_eq!(observe(&s), before);
    // The canonical ETag still validates the canonical representation.
    if let Some(etag) = &before.0.0 {
        let r = req(
            s.addr,
            "GET",
            &format!("{path}?offset=-1"),
            &[("If-None-Match", etag)],
            b"",
        );
        assert_eq!(r.status, 304);
    }
}

// ----------------------------------------------------------------- §6.10

fn put(s: &Server, path: &str, what: &str, body: &[u8]) -> Response {
    req(
        s.addr,
        "PUT",
        &format!("{path}/{what}"),
        &[("Content-Type", "application/x-state")],
        body,
    )
}

#[test]
fn snapshot_by_record_resolves_to_that_records_first_byte() {
    // "The server resolves the stable record ordinal to the canonical byte
    // boundary before applying the operation."
    let s = start();
    let path = bucketed("snap-record");
    create(&s, &path, b"");
    let acks: Vec<String> = (0..5)
        .map(|i| next_offset(&append(&s, &path, format!("{i}").as_bytes())))
        .collect();
    // O(3) is the offset after record 2.
    let r = put(&s, &path, "snapshot?record=3", b"state-3");
    assert_eq!(r.status, 204, "{}", r.text());
    assert!(r.header("stream-snapshot-digest").is_some());
    let latest = req(s.addr, "GET", &format!("{path}/snapshot"), &[], b"");
    assert_eq!(latest.status, 307);
    // "Snapshot and bootstrap responses SHOULD include Stream-Record-First
    // and Stream-Record-Next": the publish and the redirect too.
    for (what, reply) in [("publish", &r), ("latest", &latest)] {
        let bounds = (
            num(reply, "stream-record-first"),
            num(reply, "stream-record-next"),
        );
        assert_eq!(bounds, (0, 5), "{what}");
    }
    let location = latest.header("location").unwrap();
    assert!(
        location.ends_with(&format!("/snapshot/{}", acks[2])),
        "{location} vs {}",
        acks[2]
    );
    assert_eq!(
        head(&s, &path).header("stream-snapshot-offset"),
        Some(acks[2].as_str())
    );
    // At the tail is allowed; beyond it is not.
    assert_eq!(put(&s, &path, "snapshot?record=5", b"state-5").status, 204);
    assert_eq!(
        head(&s, &path).header("stream-snapshot-offset"),
        Some(acks[4].as_str())
    );
    let r = put(&s, &path, "snapshot?record=6", b"state-6");
    assert!((400..500).contains(&r.status), "beyond N: {}", r.status);
    assert_eq!(put(&s, &path, "snapshot?record=abc", b"x").status, 400);
    assert_eq!(
        head(&s, &path).header("stream-snapshot-offset"),
        Some(acks[4].as_str())
    );
}

#[test]
fn snapshot_by_record_inside_one_append_is_a_record_boundary() {
    let s = start();
    let path = bucketed("snap-inside");
    create(&s, &path, b"");
    append(&s, &path, br#"["a","b","c"]"#);
    append(&s, &path, br#""d""#);
    assert_eq!(put(&s, &path, "snapshot?record=1", b"after-a").status, 204);
    let at = head(&s, &path)
        .header("stream-snapshot-offset")
        .unwrap()
        .to_string();
    let o1 = next_offset(&read_records(&s, &path, "record=0&max_records=1"));
    assert_eq!(at, o1, "the snapshot offset is O(1)");
    assert_eq!(
        lines(&get_at(&s, &path, &at).body),
        [json!("b"), json!("c"), json!("d")]
    );
}

#[test]
fn snapshot_at_an_intra_record_offset_is_400() {
    // "Snapshot publication at an intra-record offset MUST return 400 Bad
    // Request." A bucketed max_bytes read hands out such an offset.
    let s = start();
    let path = bucketed("snap-mid");
    create(
        &s,
        &path,
        br#"[{"long":"abcdefghijklmnopqrstuvwxyz"},{"b":2}]"#,
    );
    let tail = next_offset(&head(&s, &path));
    let whole = get(&s, &path, "offset=-1").body;
    let r = get(&s, &path, "offset=-1&max_bytes=5");
    assert_eq!(r.body.len(), 5, "{}", r.text());
    let mid = next_offset(&r);
    assert_eq!(put(&s, &path, &format!("snapshot/{mid}"), b"x").status, 400);
    // Nor may retention stop there (even below a later snapshot).
    assert_eq!(
        put(&s, &path, &format!("snapshot/{tail}"), b"s").status,
        204
    );
    assert_eq!(put(&s, &path, &format!("retention/{mid}"), b"").status, 400);
    assert_eq!(get(&s, &path, "offset=-1").body, whole, "nothing trimmed");
}

#[test]
fn retention_by_record_advances_first_and_keeps_ordinals() {
    // "A trimmed ordinal MUST return 410 Gone; surviving records keep their
    // original ordinals." "N - F equals the number of retained logical messages."
    let s = start();
    let path = bucketed("retain");
    five(&s, &path);
    let o1 = next_offset(&read_records(&s, &path, "record=0&max_records=1"));
    let cached = read_records(&s, &path, "record=3");
    let cached_tag = cached
        .header("etag")
        .expect("a record read's ETag")
        .to_string();
    let head_tag = |s: &Server| {
        let head = req(s.addr, "HEAD", &path, &[], b"");
        head.header("etag").map(str::to_string)
    };
    let head_before = head_tag(&s);
    assert_eq!(put(&s, &path, "snapshot?record=4", b"upto-4").status, 204);
    let r = put(&s, &path, "retention?record=2", b"");
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(first_next(&s, &path), (2, 5));
    // The same bytes, but a moved `Stream-Record-First`: a revalidation of
    // the read cached before retention gets the new headers, not a 304.
    let revalidated = req(
        s.addr,
        "GET",
        &format!("{path}?record=3"),
        &[("If-None-Match", &cached_tag)],
        b"",
    );
    assert_eq!(revalidated.status, 200, "{}", revalidated.text());
    assert_eq!(num(&revalidated, "stream-record-first"), 2);
    assert_ne!(
        head_tag(&s),
        head_before,
        "HEAD's ETag names what is retained"
    );
    let r = assert_read(&s, &path, "record=2", (2, 2, 5), &values(2..5));
    assert_eq!(lines(&r.body).len(), 3, "N - F retained records");
    for gone in ["record=1", "record=0"] {
        let r = assert_status(&s, &path, gone, 410);
        assert_eq!(
            (
                num(&r, "stream-record-first"),
                num(&r, "stream-record-next")
            ),
            (2, 5)
        );
        assert_token(&r, gone);
    }
    assert_read(&s, &path, "tail_records=100", (2, 2, 5), &values(2..5));
    assert_eq!(
        get_at(&s, &path, &o1).status,
        410,
        "offsets before F are gone too"
    );
    // The beginning is gone too; the 410 says where the retained data starts.
    let from_start = assert_status(&s, &path, "offset=-1", 410);
    let retained = next_offset(&from_start);
    assert_eq!(
        offset_read_values(&path, &get_at(&s, &path, &retained)),
        values(2..5)
    );
    assert_eq!(append_range(&s, &path, br#"{"n":5}"#), (5, 6));
    assert_eq!(put(&s, &path, "retention?record=4", b"").status, 204);
    assert_eq!(first_next(&s, &path), (4, 6));
    assert_read(&s, &path, "record=4", (4, 4, 6), &values(4..6));
}

#[test]
fn retention_by_record_is_bounded_by_the_snapshot_and_never_moves_back() {
    // §2.2: "The server MUST reject a retention boundary that is not aligned
    // to committed data, moves backward, or is newer than the latest
    // published snapshot."
    let s = start();
    let path = bucketed("retain-rules");
    five(&s, &path);
    let rejected = |query: &str, f: u64| {
        let r = put(&s, &path, query, b"");
        assert!(
            (400..500).contains(&r.status),
            "{query}: {} {}",
            r.status,
            r.text()
        );
        assert_eq!(first_next(&s, &path), (f, 5), "{query} moved F");
    };
    rejected("retention?record=1", 0);
    assert_eq!(put(&s, &path, "snapshot?record=2", b"s").status, 204);
    rejected("retention?record=3", 0);
    rejected("retention?record=6", 0);
    assert_eq!(put(&s, &path, "retention?record=abc", b"").status, 400);
    assert_eq!(put(&s, &path, "retention?record=2", b"").status, 204);
    assert_eq!(
        put(&s, &path, "retention?record=2", b"").status,
        204,
        "idempotent"
    );
    rejected("retention?record=1", 2);
    assert_eq!(first_next(&s, &path), (2, 5));
}

#[test]
fn bootstrap_of_a_json_stream_has_one_part_per_record() {
    // "Bootstrap update parts MUST preserve one logical JSON message per update part."
    let s = start();
    let path = bucketed("boot");
    create(&s, &path, br#"[{"a":1},{"b":2}]"#);
    append(&s, &path, br#"{"c":3}"#);
    append(&s, &path, br#"[{"d":4},{"e":5},{"f":6}]"#);
    let all = [
        json!({"a":1}),
        json!({"b":2}),
        json!({"c":3}),
        json!({"d":4}),
        json!({"e":5}),
        json!({"f":6}),
    ];
    let part_values = |parts: &[(String, Vec<u8>)]| -> Vec<Value> {
        parts
            .iter()
            .map(|(ct, body)| {
                assert!(ct.starts_with(JSON), "{ct}");
                serde_json::from_slice(body).unwrap_or_else(|e| {
                    panic!(
                        "one JSON message per part ({e}): {:?}",
                        String::from_utf8_lossy(body)
                    )
                })
            })
            .collect()
    };
    let (h, parts) = bootstrap(&s, &path);
    assert_optional_record_headers(&h, (0, 6));
    assert_eq!(parts[0].1, b"", "no snapshot: an empty first part");
    assert_eq!(part_values(&parts[1..]), all);
    assert_eq!(put(&s, &path, "snapshot?record=3", b"upto-3").status, 204);
    assert_eq!(put(&s, &path, "retention?record=3", b"").status, 204);
    let (h, parts) = bootstrap(&s, &path);
    assert_optional_record_headers(&h, (3, 6));
    assert_eq!(
        parts[0],
        ("application/x-state".to_string(), b"upto-3".to_vec())
    );
    assert_eq!(part_values(&parts[1..]), all[3..]);
}

/// "Snapshot and bootstrap responses SHOULD include Stream-Record-First and
/// Stream-Record-Next": optional, but right when present.
fn assert_optional_record_headers(r: &Response, (first, next): (u64, u64)) {
    if r.header("stream-record-first").is_some() {
        assert_eq!(num(r, "stream-record-first"), first);
    }
    if r.header("stream-record-next").is_some() {
        assert_eq!(num(r, "stream-record-next"), next);
    }
}
