//! JSON Record Coordinates (extensions §6), write side, against the real
//! binary on both URL surfaces: the `json-record-coordinates-v1` token and
//! its absence on non-JSON streams (§6 intro), the record model and
//! create/append acknowledgements (§6.1, §6.3) incl. failed appends,
//! idempotent-producer retries and concurrent appenders, client event time
//! (§6.2), HEAD metadata (§6.5) and
//! append-batch integration (§6.11). `Stream-Record-Match` (§6.4):
//! `records_match.rs`. Reads: `records_reads.rs`; live reads
//! and survival: `records_live.rs`.

mod common;
mod records_helpers;

use std::thread;

use common::batch::framed;
use common::{Conn, Server, req};
use records_helpers::*;
use serde_json::{Value, json};

/// `POST` with the three producer headers.
fn producer_post(s: &Server, path: &str, id: &str, seq: u64, body: &[u8]) -> common::Response {
    let seq = seq.to_string();
    post_with(
        s,
        path,
        &[
            ("Producer-Id", id),
            ("Producer-Epoch", "0"),
            ("Producer-Seq", &seq),
        ],
        body,
    )
}

// ------------------------------------------------------------ advertisement

#[test]
fn token_is_advertised_on_every_json_stream_response() {
    let s = start();
    for path in both("adv") {
        assert_token(&create(&s, &path, b"[1,2]"), &format!("PUT create {path}"));
        let again = req(s.addr, "PUT", &path, &[("Content-Type", JSON)], b"");
        assert_eq!(again.status, 200, "idempotent re-create {path}");
        assert_token(&again, &format!("PUT re-create {path}"));
        assert_token(&append(&s, &path, b"{\"x\":1}"), &format!("POST {path}"));
        assert_token(&head(&s, &path), &format!("HEAD {path}"));
        let read = get(&s, &path, "offset=-1");
        assert_eq!(read.status, 200);
        assert_token(&read, &format!("offset read {path}"));
        read_records(&s, &path, "record=0");
        // A DELETE is a stream operation too; its stream is gone after it.
        let deleted = req(s.addr, "DELETE", &path, &[], b"");
        assert_eq!(deleted.status, 204, "DELETE {path}");
        assert_token(&deleted, &format!("DELETE {path}"));
    }
}

#[test]
fn token_is_advertised_for_json_with_media_type_parameters() {
    // A parameter does not make the stream any less application/json.
    let s = start();
    let path = bucketed("adv-charset");
    let ct = [("Content-Type", "application/json; charset=utf-8")];
    let r = req(s.addr, "PUT", &path, &ct, b"[1]");
    assert_eq!(r.status, 201);
    assert_token(&r, "create");
    assert_eq!(range(&r), (0, 1));
    let r = req(s.addr, "POST", &path, &ct, b"[2,3]");
    assert_eq!(r.status, 204);
    assert_eq!(range(&r), (1, 3));
    assert_token(&head(&s, &path), "HEAD");
}

#[test]
fn non_json_streams_have_no_token_and_no_record_headers() {
    // "A server MUST NOT advertise this token for a stream on which the
    // extension is inactive, including a stream with a non-JSON content type."
    let s = start();
    for ct in [
        "text/plain",
        "application/octet-stream",
        "application/ndjson",
    ] {
        for path in both("plain") {
            let mut responses = vec![
                ("create", create_typed(&s, &path, ct, b"{\"a\":1}\n")),
                (
                    "re-create",
                    req(s.addr, "PUT", &path, &[("Content-Type", ct)], b""),
                ),
                (
                    "append",
                    req(s.addr, "POST", &path, &[("Content-Type", ct)], b"[1,2]\n"),
                ),
                ("head", req(s.addr, "HEAD", &path, &[], b"")),
                ("offset read", get(&s, &path, "offset=-1")),
            ];
            assert_eq!(
                responses.iter().map(|(_, r)| r.status).collect::<Vec<_>>(),
                [201, 200, 204, 200, 200],
                "{ct} {path}"
            );
            // Whatever a record parameter does here, it is not record-aware.
            responses.push(("record read", get(&s, &path, "record=0")));
            let deleted = req(s.addr, "DELETE", &path, &[], b"");
            assert_eq!(deleted.status, 204, "DELETE {ct} {path}");
            responses.push(("delete", deleted));
            for (what, r) in &responses {
                assert!(!has_token(r), "{what} {ct} {path}: {:?}", r.headers);
                assert_eq!(
                    record_headers(r),
                    Vec::<String>::new(),
                    "{what} {ct} {path}"
                );
            }
        }
    }
}

// ------------------------------------------------------------ record model

#[test]
fn create_with_an_array_makes_one_record_per_element() {
    let s = start();
    for path in both("create") {
        let r = create(&s, &path, br#"[{"a":1}, 2, "x"]"#);
        assert_token(&r, "create");
        assert_eq!(range(&r), (0, 3), "{path}");
        assert_eq!(first_next(&s, &path), (0, 3));
        assert_eq!(
            all_records(&s, &path),
            [json!({"a":1}), json!(2), json!("x")]
        );
        // A single non-array value is one record.
        let single = format!("{path}-single");
        assert_eq!(range(&create(&s, &single, br#"{"one":true}"#)), (0, 1));
    }
}

#[test]
fn create_without_records_reports_an_empty_range_at_zero() {
    // "For an operation that creates no records, Stream-Record-Start and
    // Stream-Record-Next MUST both equal the current record tail."
    let s = start();
    for path in both("empty") {
        let empty_array = format!("{path}-array");
        for (p, body) in [(&path, &b""[..]), (&empty_array, b"[]")] {
            let r = create(&s, p, body);
            assert_token(&r, "create");
            assert_eq!(range(&r), (0, 0), "{p} {body:?}");
            assert_eq!(
                first_next(&s, p),
                (0, 0),
                "a new empty stream has F = N = 0"
            );
            assert_eq!(append_range(&s, p, b"7"), (0, 1));
        }
    }
}

#[test]
fn idempotent_re_create_creates_no_records() {
    let s = start();
    for path in both("recreate") {
        create(&s, &path, b"[1,2,3]");
        let again = req(s.addr, "PUT", &path, &[("Content-Type", JSON)], b"");
        assert_eq!(again.status, 200);
        // §6.3 only requires the range when PUT creates with initial
        // messages; if reported here it must be the empty range at the tail.
        if again.header("stream-record-start").is_some() {
            assert_eq!(range(&again), (3, 3));
        }
        assert_eq!(first_next(&s, &path), (0, 3));
    }
}

#[test]
fn ordinals_are_scoped_to_one_stream() {
    let s = start();
    let [a, b] = both("scope");
    create(&s, &a, b"[1,2,3]");
    create(&s, &b, b"");
    assert_eq!(append_range(&s, &b, b"[4,5]"), (0, 2));
    assert_eq!(append_range(&s, &a, b"6"), (3, 4));
    assert_eq!(append_range(&s, &b, b"7"), (2, 3));
}

#[test]
fn appends_get_contiguous_ranges_one_record_per_value() {
    let s = start();
    for path in both("append") {
        create(&s, &path, b"");
        let bodies: [&[u8]; 6] = [
            br#"{"a":1}"#,
            b"[1, 2, 3]",
            br#""s""#,
            b"null",
            b"[[1,2]]",
            b" [ true , false ] ",
        ];
        let expected = [(0, 1), (1, 4), (4, 5), (5, 6), (6, 7), (7, 9)];
        for (body, want) in bodies.iter().zip(expected) {
            let r = append(&s, &path, body);
            assert_eq!(
                acked(&r, "append"),
                want,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        assert_eq!(first_next(&s, &path), (0, 9));
        assert_eq!(
            all_records(&s, &path),
            [
                json!({"a":1}),
                json!(1),
                json!(2),
                json!(3),
                json!("s"),
                json!(null),
                json!([1, 2]),
                json!(true),
                json!(false)
            ]
        );
    }
}

#[test]
fn nested_arrays_are_flattened_exactly_one_level() {
    let s = start();
    for path in both("nested") {
        create(&s, &path, b"");
        assert_eq!(append_range(&s, &path, b"[[1,2],[3],[]]"), (0, 3));
        assert_eq!(append_range(&s, &path, b"[[[1,2,3]]]"), (3, 4));
        assert_eq!(append_range(&s, &path, b"[[]]"), (4, 5));
        assert_eq!(
            all_records(&s, &path),
            [
                json!([1, 2]),
                json!([3]),
                json!([]),
                json!([[1, 2, 3]]),
                json!([])
            ]
        );
    }
}

#[test]
fn failed_appends_make_no_ordinal_visible() {
    // "All messages from one JSON request body MUST commit atomically and
    // receive one contiguous ordinal range, or the operation MUST fail
    // without making any ordinal visible."
    let s = start();
    for path in both("failed") {
        create(&s, &path, b"[1,2]");
        let seq_ok = post_with(&s, &path, &[("Stream-Seq", "0005")], b"3");
        assert_eq!(acked(&seq_ok, "Stream-Seq append"), (2, 3));
        // (what, Stream-Seq header if any, body, expected status)
        let failures: [(&str, Option<&str>, &[u8], u16); 7] = [
            ("invalid JSON", None, b"{bad", 400),
            ("valid prefix then invalid", None, b"[4,5,{bad", 400),
            ("empty array", None, b"[]", 400),
            ("empty body", None, b"", 400),
            ("trailing garbage", None, b"[4,5] x", 400),
            ("Stream-Seq regression", Some("0004"), b"[4,5]", 409),
            ("Stream-Seq repeat", Some("0005"), b"[4,5]", 409),
        ];
        for (what, seq, body, status) in failures {
            let headers: Vec<(&str, &str)> = seq.map(|v| ("Stream-Seq", v)).into_iter().collect();
            let r = post_with(&s, &path, &headers, body);
            assert_eq!(r.status, status, "{what}: {}", r.text());
            assert_eq!(
                first_next(&s, &path),
                (0, 3),
                "{what} made an ordinal visible"
            );
        }
        let wrong_type = req(
            s.addr,
            "POST",
            &path,
            &[("Content-Type", "text/plain")],
            b"4",
        );
        assert_eq!(wrong_type.status, 409, "content type mismatch");
        // The next successful append continues from the old tail.
        assert_eq!(append_range(&s, &path, b"[4,5]"), (3, 5));
        assert_eq!(
            all_records(&s, &path),
            [json!(1), json!(2), json!(3), json!(4), json!(5)]
        );
    }
}

#[test]
fn appends_to_a_closed_stream_assign_no_ordinal() {
    let s = start();
    for path in both("closed") {
        create(&s, &path, b"[1,2]");
        let close = post_with(&s, &path, &[("Stream-Closed", "true")], b"");
        assert_eq!(close.status, 204);
        // A close-only POST creates no records: if it reports a range, the
        // range is empty at the tail.
        if close.header("stream-record-start").is_some() {
            assert_eq!(range(&close), (2, 2));
        }
        assert_eq!(post_with(&s, &path, &[], b"3").status, 409);
        assert_eq!(first_next(&s, &path), (0, 2));
    }
}

#[test]
fn client_event_times_do_not_reorder_records() {
    // §6.2: "Client event times MAY be out of order and MUST NOT change
    // committed record order, ordinals, canonical bytes, or offsets."
    let s = start();
    let path = bucketed("event-time");
    create(&s, &path, b"");
    let events = [
        json!({"captured_at": "2026-07-18T10:30:00.300Z", "n": 0}),
        json!({"captured_at": "2026-07-18T10:29:59.900Z", "n": 1}),
        json!({"captured_at": "2026-07-18T10:30:00.100Z", "n": 2}),
    ];
    assert_eq!(append_range(&s, &path, &body_of(&events[..2])), (0, 2));
    assert_eq!(
        append_range(&s, &path, &serde_json::to_vec(&events[2]).unwrap()),
        (2, 3)
    );
    assert_eq!(all_records(&s, &path), events);
    let canonical = get(&s, &path, "offset=-1").body;
    assert_eq!(read_records(&s, &path, "record=0").body, canonical);
}

// ------------------------------------------------------- idempotent retry

#[test]
fn deduplicated_producer_retry_returns_its_original_range() {
    // "When an idempotent-producer retry is deduplicated, the server MUST
    // return the original Stream-Record-Start and Stream-Record-Next values."
    let s = start();
    for path in both("producer") {
        create(&s, &path, b"");
        let first = br#"[{"p":0},{"p":1}]"#;
        let original = producer_post(&s, &path, "w", 0, first);
        assert_eq!(acked(&original, "seq 0"), (0, 2));
        assert_eq!(append_range(&s, &path, b"[10,11,12]"), (2, 5));
        let retry = producer_post(&s, &path, "w", 0, first);
        assert_eq!(retry.status, 204, "a duplicate is 204: {}", retry.text());
        assert_eq!(acked(&retry, "retry of seq 0"), (0, 2));
        // PROTOCOL.md §5.2.1 (the extensions' base): "the exact original
        // byte and record ranges", so the original's Stream-Next-Offset.
        assert_eq!(next_offset(&retry), next_offset(&original), "{path}");
        assert_eq!(first_next(&s, &path), (0, 5), "the retry appended nothing");
        let second = br#"{"p":2}"#;
        assert_eq!(
            acked(&producer_post(&s, &path, "w", 1, second), "seq 1"),
            (5, 6)
        );
        assert_eq!(append_range(&s, &path, b"13"), (6, 7));
        let retry = producer_post(&s, &path, "w", 1, second);
        assert_eq!(retry.status, 204);
        assert_eq!(acked(&retry, "retry of seq 1"), (5, 6));
        assert_eq!(first_next(&s, &path), (0, 7));
        assert_eq!(all_records(&s, &path).len(), 7);
    }
}

#[test]
fn deduplicated_retry_of_an_append_that_closed_returns_its_original_range() {
    // §6.3 holds for the retry of the producer write that closed the stream
    // too: it is a duplicate (204, Stream-Closed) with its own range, not
    // the record tail.
    let s = start();
    for path in both("producer-close") {
        create(&s, &path, b"[0]");
        let closing = |s: &Server| {
            post_with(
                s,
                &path,
                &[
                    ("Producer-Id", "c"),
                    ("Producer-Epoch", "0"),
                    ("Producer-Seq", "0"),
                    ("Stream-Closed", "true"),
                ],
                b"[5,6]",
            )
        };
        let original = closing(&s);
        assert_eq!(acked(&original, "append and close"), (1, 3), "{path}");
        let retry = closing(&s);
        assert_eq!(retry.status, 204, "{path}: {}", retry.text());
        assert_eq!(retry.header("stream-closed"), Some("true"), "{path}");
        assert_eq!(acked(&retry, "retry of the close"), (1, 3), "{path}");
        assert_eq!(next_offset(&retry), next_offset(&original), "{path}");
        assert_eq!(first_next(&s, &path), (0, 3), "the retry appended nothing");
    }
}

#[test]
fn deduplicated_retry_of_an_older_sequence_returns_its_original_range() {
    // PROTOCOL.md §5.2.1: seq <= lastSeq is a duplicate (204); §6.3 then
    // requires that append's own original range, not the latest one.
    let s = start();
    let path = bucketed("producer-old");
    create(&s, &path, b"");
    let bodies: [&[u8]; 3] = [b"[1,2]", b"3", b"[4,5,6]"];
    let ranges = [(0, 2), (2, 3), (3, 6)];
    for (seq, (body, want)) in bodies.iter().zip(ranges).enumerate() {
        let r = producer_post(&s, &path, "old", seq as u64, body);
        assert_eq!(acked(&r, "first send"), want);
    }
    for (seq, (body, want)) in bodies.iter().zip(ranges).enumerate() {
        let r = producer_post(&s, &path, "old", seq as u64, body);
        assert_eq!(r.status, 204, "seq {seq} is a duplicate");
        assert_eq!(acked(&r, "retry"), want, "seq {seq}");
    }
    assert_eq!(first_next(&s, &path), (0, 6));
}

#[test]
fn deduplicated_retry_beyond_the_receipt_window_returns_no_record_range() {
    // A producer's receipts are its 8 latest appends. PROTOCOL.md §5.2.1 as
    // the extensions' base words it: "beyond the window, return no byte or
    // record ranges", never the tail's range as if the retry made it.
    let s = start();
    for path in both("producer-window") {
        create(&s, &path, b"");
        let appends: Vec<(u64, u64)> = (0..12)
            .map(|seq| acked(&producer_post(&s, &path, "w", seq, b"[1,2]"), "send"))
            .collect();
        let tail = next_offset(&get(&s, &path, "offset=-1"));
        let old = producer_post(&s, &path, "w", 0, b"[1,2]");
        assert_eq!(old.status, 204, "a duplicate: {}", old.text());
        assert_eq!(old.header("stream-record-start"), None, "{path}");
        assert_eq!(old.header("stream-record-next"), None, "{path}");
        assert_eq!(next_offset(&old), tail, "the tail, as any success has");
        let newest = producer_post(&s, &path, "w", 11, b"[1,2]");
        assert_eq!(acked(&newest, "the newest"), appends[11]);
        assert_eq!(
            first_next(&s, &path),
            (0, 24),
            "the retries appended nothing"
        );
    }
}

#[test]
fn deduplicated_retry_after_retention_returns_its_original_range() {
    // §6.3 / §6.13: "A deduplicated append returns its original ordinal
    // range", also once retention reclaimed the index entries it began in.
    let mut s = start();
    let path = bucketed("producer-retained");
    create(&s, &path, b"");
    let bodies: [&[u8]; 2] = [b"[1,2,3]", b"4"];
    for (seq, want) in [(0, (0, 3)), (1, (3, 4))] {
        let r = producer_post(&s, &path, "r", seq, bodies[seq as usize]);
        assert_eq!(acked(&r, "first send"), want);
    }
    assert_eq!(append_range(&s, &path, b"[5,6]"), (4, 6));
    let retain = |s: &Server, record: u64| {
        for what in ["snapshot", "retention"] {
            let target = format!("{path}/{what}?record={record}");
            let r = req(
                s.addr,
                "PUT",
                &target,
                &[("Content-Type", "text/plain")],
                b"S",
            );
            assert_eq!(r.status, 204, "{what} at record {record}: {}", r.text());
        }
    };
    let retry = |s: &Server, seq: u64| {
        let r = producer_post(s, &path, "r", seq, bodies[seq as usize]);
        assert_eq!(r.status, 204, "seq {seq} is a duplicate: {}", r.text());
        acked(&r, "retry")
    };
    retain(&s, 2);
    assert_eq!(retry(&s, 0), (0, 3), "retained from inside the append");
    retain(&s, 4);
    assert_eq!(retry(&s, 0), (0, 3), "wholly retained away");
    assert_eq!(retry(&s, 1), (3, 4), "ending at the retained record");
    s.restart();
    assert_eq!(retry(&s, 1), (3, 4), "after a restart");
    // Its end is before the retention point: the log's trimmed records
    // count back from the first retained one.
    assert_eq!(
        retry(&s, 0),
        (0, 3),
        "wholly retained away, after a restart"
    );
    assert_eq!(
        first_next(&s, &path),
        (4, 6),
        "the retries appended nothing"
    );
}

// ------------------------------------------------------ concurrent appends

#[test]
fn concurrent_appenders_get_disjoint_ranges_that_tile_the_tail() {
    // "Concurrent appenders MUST receive disjoint ranges in committed stream order."
    const WRITERS: usize = 4;
    const POSTS: usize = 40;
    let s = start();
    let path = bucketed("concurrent");
    create(&s, &path, b"");
    let addr = s.addr;
    let handles: Vec<_> = (0..WRITERS)
        .map(|w| {
            let path = path.clone();
            thread::spawn(move || {
                let mut conn = Conn::open(addr);
                let mut acks = Vec::new();
                for i in 0..POSTS {
                    let values: Vec<Value> = (0..1 + (i + w) % 3)
                        .map(|k| json!({"w": w, "i": i, "k": k}))
                        .collect();
                    let r =
                        conn.request("POST", &path, &[("Content-Type", JSON)], &body_of(&values));
                    assert_eq!(r.status, 204, "{}", r.text());
                    acks.push((range(&r), values));
                }
                acks
            })
        })
        .collect();
    let mut all: Vec<((u64, u64), Vec<Value>)> = Vec::new();
    for h in handles {
        let acks = h.join().unwrap();
        // One writer's sequential appends commit in its order.
        for pair in acks.windows(2) {
            assert!(
                pair[0].0.1 <= pair[1].0.0,
                "{:?} then {:?}",
                pair[0].0,
                pair[1].0
            );
        }
        all.extend(acks);
    }
    all.sort_by_key(|(r, _)| r.0);
    let mut expected_start = 0;
    for ((start, next), values) in &all {
        assert_eq!(
            *start, expected_start,
            "ranges tile [0, N) without gap or overlap"
        );
        assert_eq!(next - start, values.len() as u64, "one ordinal per value");
        expected_start = *next;
    }
    assert_eq!(first_next(&s, &path), (0, expected_start));
    let stored = records_from(&s, &path, 0, expected_start);
    for ((start, next), values) in &all {
        assert_eq!(&stored[*start as usize..*next as usize], values.as_slice());
    }
}

// ------------------------------------------------------------------- HEAD

#[test]
fn head_reports_first_and_next_record() {
    let s = start();
    for path in both("head") {
        create(&s, &path, b"");
        let h = head(&s, &path);
        assert_token(&h, "HEAD");
        assert_eq!(
            (
                num(&h, "stream-record-first"),
                num(&h, "stream-record-next")
            ),
            (0, 0)
        );
        append(&s, &path, b"[1,2]");
        append(&s, &path, b"3");
        assert_eq!(first_next(&s, &path), (0, 3));
    }
}

// ------------------------------------------------------------- append batch

fn batch(s: &Server, path: &str, frames: &[&[u8]]) -> Vec<Value> {
    let r = req(
        s.addr,
        "POST",
        &format!("{path}/append-batch"),
        &[("Content-Type", JSON)],
        &framed(frames),
    );
    assert_eq!(r.status, 200, "{}", r.text());
    match serde_json::from_slice(&r.body).unwrap() {
        Value::Array(acks) => acks,
        other => panic!("acks must be an array: {other}"),
    }
}

fn ack_range(ack: &Value) -> (u64, u64) {
    let field = |k: &str| {
        ack[k]
            .as_u64()
            .unwrap_or_else(|| panic!("ack without an unsigned {k}: {ack}"))
    };
    (field("stream_record_start"), field("stream_record_next"))
}

#[test]
fn append_batch_frames_get_their_own_contiguous_ranges() {
    // "each successful Append Batch frame receives its own contiguous record range"
    let s = start();
    let path = bucketed("batch");
    create(&s, &path, b"\"first\"");
    let acks = batch(&s, &path, &[br#"{"a":1}"#, b"[2,3]", b"4", b"[[5]]"]);
    let ranges: Vec<(u64, u64)> = acks.iter().map(ack_range).collect();
    assert_eq!(ranges, [(1, 2), (2, 4), (4, 5), (5, 6)]);
    let h = head(&s, &path);
    assert_eq!(num(&h, "stream-record-next"), 6);
    assert_eq!(acks[3]["stream_next_offset"], next_offset(&h).as_str());
    assert_eq!(
        all_records(&s, &path),
        [
            json!("first"),
            json!({"a":1}),
            json!(2),
            json!(3),
            json!(4),
            json!([5])
        ]
    );
    assert_eq!(append_range(&s, &path, b"6"), (6, 7));
}

#[test]
fn failed_batch_frames_assign_no_ordinal() {
    // "A failed frame assigns no visible record ordinal; successful later
    // frames continue from the last committed record tail."
    let s = start();
    let path = bucketed("batch-fail");
    create(&s, &path, b"");
    let acks = batch(&s, &path, &[b"1", b"{bad", b"[]", b"[2,3]", b"[4,", b"5"]);
    let statuses: Vec<u64> = acks.iter().map(|a| a["status"].as_u64().unwrap()).collect();
    assert_eq!(statuses, [204, 400, 400, 204, 400, 204]);
    assert_eq!(ack_range(&acks[0]), (0, 1));
    assert_eq!(ack_range(&acks[3]), (1, 3));
    assert_eq!(ack_range(&acks[5]), (3, 4));
    assert_eq!(first_next(&s, &path), (0, 4));
    assert_eq!(
        all_records(&s, &path),
        [json!(1), json!(2), json!(3), json!(5)]
    );
}

/// §6.6: a record past N is 400 with `Stream-Record-Next: N`, one header,
/// on every path that takes `?record=`.
#[test]
fn a_record_past_the_tail_names_the_tail_once() {
    let s = start();
    let path = bucketed("past-tail");
    create(&s, &path, b"[0,1,2]");
    let state = [("Content-Type", "application/x-state")];
    for (method, url, headers) in [
        ("PUT", format!("{path}/snapshot?record=9"), &state[..]),
        ("PUT", format!("{path}/retention?record=9"), &[]),
        ("GET", format!("{path}?record=9"), &[]),
    ] {
        let r = req(s.addr, method, &url, headers, b"S");
        assert_eq!(r.status, 400, "{method} {url}: {}", r.text());
        let next: Vec<&str> = r
            .headers
            .iter()
            .filter(|(k, _)| k.eq_ignore_ascii_case("stream-record-next"))
            .map(|(_, v)| v.as_str())
            .collect();
        assert_eq!(next, ["3"], "{method} {url}");
    }
}
