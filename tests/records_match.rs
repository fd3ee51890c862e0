//! JSON Record Coordinates (extensions §6.4): `Stream-Record-Match`, the
//! writer's expected record tail, on appends and closes, against the real
//! binary on both URL surfaces. The rest of the write side: `records.rs`.

mod common;
mod records_helpers;

use records_helpers::*;
use serde_json::json;

// ------------------------------------------------------- Stream-Record-Match

#[test]
fn record_match_equal_to_the_tail_is_accepted() {
    let s = start();
    for path in both("match-ok") {
        create(&s, &path, b"");
        let r = post_with(&s, &path, &[("Stream-Record-Match", "0")], b"{\"a\":1}");
        assert_eq!(acked(&r, "match 0"), (0, 1));
        let r = post_with(&s, &path, &[("Stream-Record-Match", "1")], b"[2,3]");
        assert_eq!(acked(&r, "match 1"), (1, 3));
    }
}

#[test]
fn record_match_mismatch_is_412_with_the_tail_and_appends_nothing() {
    let s = start();
    for path in both("match-412") {
        create(&s, &path, b"[1,2,3]");
        let before = head(&s, &path);
        let before_body = get(&s, &path, "offset=-1").body;
        for expected in ["0", "2", "4", "1000", "18446744073709551616"] {
            let r = post_with(&s, &path, &[("Stream-Record-Match", expected)], b"[9,9]");
            assert_eq!(r.status, 412, "match {expected}: {}", r.text());
            assert_eq!(num(&r, "stream-record-next"), 3, "the current N");
            assert_eq!(
                next_offset(&r),
                next_offset(&before),
                "the current tail offset"
            );
            assert_token(&r, "412");
        }
        // A close-only POST holds the writer to the same precondition.
        let close = [("Stream-Closed", "true"), ("Stream-Record-Match", "7")];
        let r = post_with(&s, &path, &close, b"");
        assert_eq!(r.status, 412, "close-only with a stale match: {}", r.text());
        assert_eq!(num(&r, "stream-record-next"), 3);
        let after = head(&s, &path);
        assert!(
            after.header("stream-closed").is_none(),
            "the close did not happen"
        );
        assert_eq!(num(&after, "stream-record-next"), 3);
        assert_eq!(next_offset(&after), next_offset(&before));
        assert_eq!(get(&s, &path, "offset=-1").body, before_body);
        let close = [("Stream-Closed", "true"), ("Stream-Record-Match", "3")];
        assert_eq!(
            post_with(&s, &path, &close, b"").status,
            204,
            "a matching close"
        );
        // Repeated on the closed stream, the close is idempotent, but the
        // precondition still holds (§6.4: a mismatch MUST be 412).
        assert_eq!(post_with(&s, &path, &close, b"").status, 204, "again");
        let stale = [("Stream-Closed", "true"), ("Stream-Record-Match", "2")];
        let r = post_with(&s, &path, &stale, b"");
        assert_eq!(
            r.status,
            412,
            "a stale match on a closed stream: {}",
            r.text()
        );
        assert_eq!(num(&r, "stream-record-next"), 3);
    }
}

#[test]
fn record_match_composes_with_stream_seq_and_producers() {
    // "This precondition composes with, but does not replace, Stream-Seq or
    // idempotent-producer headers."
    let s = start();
    let path = bucketed("match-compose");
    create(&s, &path, b"");
    let r = post_with(
        &s,
        &path,
        &[("Stream-Seq", "b"), ("Stream-Record-Match", "0")],
        b"1",
    );
    assert_eq!(acked(&r, "both hold"), (0, 1));
    // Matching tail, regressing Stream-Seq: still rejected.
    let r = post_with(
        &s,
        &path,
        &[("Stream-Seq", "a"), ("Stream-Record-Match", "1")],
        b"2",
    );
    assert_eq!(r.status, 409, "{}", r.text());
    // Valid Stream-Seq, wrong tail: 412, and the Stream-Seq is not consumed.
    let r = post_with(
        &s,
        &path,
        &[("Stream-Seq", "c"), ("Stream-Record-Match", "5")],
        b"2",
    );
    assert_eq!(r.status, 412);
    let r = post_with(
        &s,
        &path,
        &[("Stream-Seq", "c"), ("Stream-Record-Match", "1")],
        b"2",
    );
    assert_eq!(acked(&r, "Stream-Seq c after the 412"), (1, 2));
    // A producer append rejected by the precondition commits nothing, so
    // the same sequence number is then accepted as new data.
    let producer = |m: &str| {
        post_with(
            &s,
            &path,
            &[
                ("Producer-Id", "m"),
                ("Producer-Epoch", "0"),
                ("Producer-Seq", "0"),
                ("Stream-Record-Match", m),
            ],
            b"3",
        )
    };
    assert_eq!(producer("0").status, 412);
    let r = producer("2");
    assert_eq!(r.status, 200, "new data, not a duplicate: {}", r.text());
    assert_eq!(acked(&r, "producer"), (2, 3));
    assert_eq!(all_records(&s, &path), [json!(1), json!(2), json!(3)]);
}

#[test]
fn malformed_record_match_is_rejected_and_appends_nothing() {
    let s = start();
    let path = bucketed("match-bad");
    create(&s, &path, b"[1]");
    for bad in ["abc", "-1", "1.0", "", "0x1"] {
        let r = post_with(&s, &path, &[("Stream-Record-Match", bad)], b"2");
        assert_eq!(r.status, 400, "Stream-Record-Match {bad:?}: {}", r.text());
    }
    assert_eq!(first_next(&s, &path), (0, 1));
}
