//! JSON Record Coordinates (extensions §6) in live reads and across
//! restarts, against the real binary: record starts with long-poll and SSE,
//! SSE control coordinates, the envelope SSE view and reconnection by
//! `streamNextRecord` (§6.9); ordinals, boundaries and values surviving
//! SIGKILL, retention, cold reads and segment cleaning (§6.1, §6.13).
//! `Server::start` runs with `--long-poll-timeout-ms 1000`.

mod common;
mod records_helpers;

use std::thread;
use std::time::{Duration, Instant};

use common::batch::framed;
use common::disk::log_bytes;
use common::sse::Sse;
use common::{Conn, Response, Server, req};
use records_helpers::*;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(5);

fn append_values(s: &Server, path: &str, range: std::ops::Range<u64>) -> Response {
    append(s, path, &body_of(&values(range)))
}

// -------------------------------------------------------------- long-poll

#[test]
fn long_poll_from_record_now_is_woken_by_an_append() {
    let s = start();
    for path in both("lp-now") {
        five(&s, &path);
        let mut waiter = Conn::waiting_get(s.addr, &format!("{path}?record=now&live=long-poll"));
        let ack = append_values(&s, &path, 5..7);
        assert_eq!(range(&ack), (5, 7));
        let r = waiter.read_response();
        assert_eq!(r.status, 200, "{:?} {}", r.headers, r.text());
        assert_token(&r, "long-poll");
        assert_eq!(media_type(&r).as_deref(), Some(NDJSON));
        assert_eq!(read_coords(&r), (0, 5, 7));
        assert_eq!(lines(&r.body), values(5..7));
        assert_eq!(next_offset(&r), next_offset(&ack));
    }
}

#[test]
fn long_poll_envelope_view_is_woken_by_an_append() {
    let s = start();
    let path = bucketed("lp-envelope");
    five(&s, &path);
    let query = format!("{path}?tail_records=0&live=long-poll&record_view=envelope");
    let mut waiter = Conn::waiting_get(s.addr, &query);
    append_values(&s, &path, 5..6);
    let r = waiter.read_response();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(media_type(&r).as_deref(), Some(ENVELOPE_NDJSON));
    let line = &lines(&r.body)[0];
    assert_eq!(
        (line["record"].clone(), line["value"].clone()),
        (json!(5), json!({"n": 5}))
    );
    assert_eq!(read_coords(&r), (0, 5, 6));
}

#[test]
fn long_poll_from_a_record_behind_the_tail_answers_at_once() {
    let s = start();
    for path in both("lp-behind") {
        five(&s, &path);
        // Data is available: 200 with it, not a wait ending in 204.
        let r = get(&s, &path, "record=3&live=long-poll");
        assert_eq!(r.status, 200, "{:?}", r.headers);
        assert_eq!(read_coords(&r), (0, 3, 5));
        assert_eq!(lines(&r.body), values(3..5));
        let r = get(&s, &path, "record=1&max_records=1&live=long-poll");
        assert_eq!((read_coords(&r), lines(&r.body)), ((0, 1, 2), values(1..2)));
    }
}

#[test]
fn long_poll_timeout_at_the_record_tail_reports_the_empty_range() {
    // §6.7: a successful record-aware long-poll response includes First,
    // Start, Next and Stream-Next-Offset; "An empty successful response MUST
    // set Stream-Record-Start and Stream-Record-Next to the resolved
    // starting ordinal." The base protocol's timeout answer is 204.
    let s = start();
    for path in both("lp-timeout") {
        five(&s, &path);
        let tail = next_offset(&head(&s, &path));
        for query in ["record=5&live=long-poll", "record=now&live=long-poll"] {
            let r = get(&s, &path, query);
            assert_eq!(r.status, 204, "{query}: {:?}", r.headers);
            assert!(is_true(&r, "stream-up-to-date"));
            assert_eq!(next_offset(&r), tail);
            assert_eq!(read_coords(&r), (0, 5, 5), "{query}");
            assert_token(&r, query);
        }
    }
}

// -------------------------------------------------------------------- SSE

/// What a record-aware SSE reader saw: data values, and the last control.
struct Seen {
    values: Vec<Value>,
    control: Value,
}

/// Reads default-view events until a control reports `streamNextRecord ==
/// until`, checking every control against the records seen so far: "Control-
/// event record coordinates MUST refer to the boundary after every complete
/// message represented before that control event."
fn sse_until(sse: &mut Sse, start: u64, first: u64, until: u64) -> Seen {
    let mut values = Vec::new();
    let deadline = Instant::now() + WAIT;
    loop {
        let e = sse.event(deadline.saturating_duration_since(Instant::now()));
        match e.name.as_str() {
            "data" => values.extend(data_values(&e)),
            "control" => {
                let c = e.json();
                assert!(c["streamNextOffset"].is_string(), "{c}");
                assert_eq!(c["streamFirstRecord"], first, "{c}");
                assert_eq!(c["streamNextRecord"], start + values.len() as u64, "{c}");
                if c["streamNextRecord"] == until {
                    return Seen { values, control: c };
                }
            }
            other => panic!("unexpected event {other}: {e:?}"),
        }
    }
}

fn open_sse(s: &Server, path: &str, query: &str) -> Sse {
    let sse = Sse::open(s.addr, &format!("{path}?{query}"));
    let h = &sse.head;
    assert_eq!(h.status, 200, "{query}: {:?}", h.headers);
    assert!(
        h.header("content-type")
            .is_some_and(|c| c.starts_with("text/event-stream")),
        "{:?}",
        h.headers
    );
    assert_token(h, query);
    sse
}

#[test]
fn sse_max_records_bounds_every_data_event() {
    // §6.6: "max_records limits the number of complete records returned";
    // on SSE, per data event (one event per window, like max_bytes).
    let s = start();
    for path in both("sse-max") {
        five(&s, &path);
        let mut sse = open_sse(&s, &path, "record=0&live=sse&max_records=2");
        let mut got = Vec::new();
        let deadline = Instant::now() + WAIT;
        while got.len() < 5 {
            let e = sse.event(deadline.saturating_duration_since(Instant::now()));
            if e.name == "data" {
                let batch = data_values(&e);
                assert!(
                    (1..=2).contains(&batch.len()),
                    "{path}: {} records",
                    batch.len()
                );
                got.extend(batch);
            }
        }
        assert_eq!(got, values(0..5), "{path}");
    }
}

#[test]
fn sse_controls_carry_record_coordinates() {
    let s = start();
    for path in both("sse") {
        five(&s, &path);
        let mut sse = open_sse(&s, &path, "record=1&live=sse");
        let seen = sse_until(&mut sse, 1, 0, 5);
        assert_eq!(seen.values, values(1..5));
        assert_eq!(seen.control["upToDate"], true, "{}", seen.control);
        assert_eq!(
            seen.control["streamNextOffset"],
            next_offset(&head(&s, &path)).as_str()
        );
        // Live: the new records, then a control at the new boundary.
        let ack = append_values(&s, &path, 5..7);
        let seen = sse_until(&mut sse, 5, 0, 7);
        assert_eq!(seen.values, values(5..7));
        assert_eq!(seen.control["streamNextOffset"], next_offset(&ack).as_str());
    }
}

#[test]
fn sse_from_record_now_and_tail_records() {
    let s = start();
    let path = bucketed("sse-now");
    five(&s, &path);
    let mut sse = open_sse(&s, &path, "record=now&live=sse");
    let seen = sse_until(&mut sse, 5, 0, 5);
    assert!(seen.values.is_empty(), "no history from record=now");
    assert_eq!(seen.control["upToDate"], true);
    append_values(&s, &path, 5..6);
    assert_eq!(sse_until(&mut sse, 5, 0, 6).values, values(5..6));
    let mut sse = open_sse(&s, &path, "tail_records=2&live=sse");
    assert_eq!(sse_until(&mut sse, 4, 0, 6).values, values(4..6));
}

/// Reads envelope-view events until a control reports `streamNextRecord ==
/// until`; every data event is exactly one envelope of the next ordinal.
fn envelopes_until(sse: &mut Sse, start: u64, until: u64) -> Vec<Value> {
    let mut got = Vec::new();
    let deadline = Instant::now() + WAIT;
    loop {
        let e = sse.event(deadline.saturating_duration_since(Instant::now()));
        let v = e.json();
        match e.name.as_str() {
            "data" => {
                assert!(
                    v.is_object(),
                    "exactly one envelope object per data event: {:?}",
                    e.data
                );
                assert_eq!(v["record"], start + got.len() as u64, "{v}");
                got.push(v["value"].clone());
            }
            "control" => {
                assert_eq!(v["streamNextRecord"], start + got.len() as u64, "{v}");
                if v["streamNextRecord"] == until {
                    return got;
                }
            }
            other => panic!("unexpected event {other}"),
        }
    }
}

#[test]
fn sse_envelope_view_sends_one_envelope_per_data_event() {
    let s = start();
    for path in both("sse-envelope") {
        five(&s, &path);
        let mut sse = open_sse(&s, &path, "record=2&live=sse&record_view=envelope");
        assert_eq!(
            sse.head.header("stream-data-content-type"),
            Some(ENVELOPE_ONE),
            "{:?}",
            sse.head.headers
        );
        assert_eq!(envelopes_until(&mut sse, 2, 5), values(2..5));
        append_values(&s, &path, 5..8);
        assert_eq!(envelopes_until(&mut sse, 5, 8), values(5..8));
    }
}

#[test]
fn sse_reconnect_from_the_last_next_record_is_exact() {
    // "A reconnecting client MAY use either the last streamNextRecord or
    // streamNextOffset."
    let s = start();
    for path in both("sse-reconnect") {
        five(&s, &path);
        let mut sse = open_sse(&s, &path, "record=0&live=sse");
        let seen = sse_until(&mut sse, 0, 0, 5);
        let (record, offset) = (
            seen.control["streamNextRecord"].clone(),
            seen.control["streamNextOffset"].clone(),
        );
        drop(sse);
        append_values(&s, &path, 5..7);
        append_values(&s, &path, 7..8);
        let mut by_record = open_sse(&s, &path, &format!("record={record}&live=sse"));
        assert_eq!(sse_until(&mut by_record, 5, 0, 8).values, values(5..8));
        // The base-protocol path from streamNextOffset sees the same records.
        let offset = offset.as_str().unwrap();
        let mut by_offset = Sse::open(
            s.addr,
            &format!("{path}?offset={}&live=sse", common::enc(offset)),
        );
        let tail = next_offset(&head(&s, &path));
        let mut got = Vec::new();
        loop {
            let e = by_offset.event(WAIT);
            if e.name == "data" {
                got.extend(data_values(&e));
            } else if e.json()["streamNextOffset"] == tail.as_str() {
                break;
            }
        }
        assert_eq!(got, values(5..8));
    }
}

#[test]
fn sse_reconnect_across_cycles_while_writing_loses_and_duplicates_nothing() {
    // Responses end every 300 ms; the reader reconnects from the last
    // streamNextRecord while a writer keeps appending 1-3 records at a time.
    let s = start_with(&["--cores", "2", "--sse-cycle-ms", "300"]);
    for (path, envelope) in [(bucketed("cycle"), false), (upstream("cycle"), true)] {
        create(&s, &path, b"");
        let (addr, writer_path) = (s.addr, path.clone());
        let writer = thread::spawn(move || {
            let mut conn = Conn::open(addr);
            let mut n = 0u64;
            for i in 0..40u64 {
                let k = 1 + i % 3;
                let r = conn.request(
                    "POST",
                    &writer_path,
                    &[("Content-Type", JSON)],
                    &body_of(&values(n..n + k)),
                );
                assert_eq!(r.status, 204, "{}", r.text());
                n += k;
                thread::sleep(Duration::from_millis(15));
            }
            n
        });
        let view = if envelope {
            "&record_view=envelope"
        } else {
            ""
        };
        let mut got: Vec<Value> = Vec::new();
        let mut total: Option<u64> = None;
        let deadline = Instant::now() + Duration::from_secs(30);
        while total.is_none_or(|t| (got.len() as u64) < t) {
            assert!(Instant::now() < deadline, "reader stuck at {}", got.len());
            let start = got.len() as u64;
            let mut sse = open_sse(&s, &path, &format!("record={start}&live=sse{view}"));
            while let Some(e) = sse.next(WAIT) {
                let v = if e.name == "data" && envelope {
                    Some(e.json())
                } else {
                    None
                };
                match (e.name.as_str(), v) {
                    ("data", Some(env)) => {
                        assert_eq!(env["record"], got.len() as u64);
                        got.push(env["value"].clone());
                    }
                    ("data", None) => got.extend(data_values(&e)),
                    _ => assert_eq!(e.json()["streamNextRecord"], got.len() as u64),
                }
            }
            if total.is_none() && writer.is_finished() {
                total = Some(first_next(&s, &path).1);
            }
        }
        assert_eq!(writer.join().unwrap(), total.unwrap());
        assert_eq!(
            got,
            values(0..total.unwrap()),
            "{path}: every record exactly once, in order"
        );
    }
}

// --------------------------------------------------------------- survival

/// Everything record-related a client can observe about one stream.
#[derive(Debug, PartialEq)]
struct Observed {
    first_next: (u64, u64),
    tail: String,
    values: Vec<Value>,
    /// Stream-Next-Offset of `record=F&max_records=k` for every k: O(F+k).
    boundaries: Vec<String>,
}

fn observe(s: &Server, path: &str) -> Observed {
    let (first, next) = first_next(s, path);
    let boundaries = (1..=next - first)
        .map(|k| {
            next_offset(&read_records(
                s,
                path,
                &format!("record={first}&max_records={k}"),
            ))
        })
        .collect();
    Observed {
        first_next: (first, next),
        tail: next_offset(&head(s, path)),
        values: records_from(s, path, first, next),
        boundaries,
    }
}

#[test]
fn ordinals_survive_sigkill() {
    let mut s = start();
    let mut paths = Vec::new();
    for path in both("kill") {
        five(&s, &path);
        append(&s, &path, br#"[[1,2],{"x":"y"},null]"#);
        paths.push(path);
    }
    let r = req(
        s.addr,
        "POST",
        &format!("{}/append-batch", paths[0]),
        &[("Content-Type", JSON)],
        &framed(&[b"[10,11]", b"12"]),
    );
    assert_eq!(r.status, 200);
    let before: Vec<Observed> = paths.iter().map(|p| observe(&s, p)).collect();
    assert_eq!(before[0].first_next, (0, 11));
    s.kill();
    s.restart();
    for (path, was) in paths.iter().zip(&before) {
        assert_eq!(&observe(&s, path), was, "{path} after SIGKILL");
        let n = was.first_next.1;
        assert_eq!(
            append_range(&s, path, b"[1,2]"),
            (n, n + 2),
            "appends continue at N"
        );
    }
}

#[test]
fn retention_by_record_survives_sigkill() {
    let mut s = start();
    let mut paths = Vec::new();
    for path in [bucketed("kill-retain"), bucketed("kill-retain-b")] {
        five(&s, &path);
        let at = format!("{path}/snapshot?record=3");
        assert_eq!(
            req(
                s.addr,
                "PUT",
                &at,
                &[("Content-Type", "application/x-state")],
                b"S3"
            )
            .status,
            204
        );
        assert_eq!(
            req(
                s.addr,
                "PUT",
                &format!("{path}/retention?record=3"),
                &[],
                b""
            )
            .status,
            204
        );
        paths.push(path);
    }
    let before: Vec<(Observed, Option<String>)> = paths
        .iter()
        .map(|p| {
            (
                observe(&s, p),
                head(&s, p)
                    .header("stream-snapshot-offset")
                    .map(str::to_string),
            )
        })
        .collect();
    assert_eq!(before[0].0.first_next, (3, 5));
    for round in 0..2 {
        s.kill();
        s.restart();
        for (path, was) in paths.iter().zip(&before) {
            let now = (
                observe(&s, path),
                head(&s, path)
                    .header("stream-snapshot-offset")
                    .map(str::to_string),
            );
            assert_eq!(&now, was, "{path} round {round}");
            let gone = get(&s, path, "record=2");
            assert_eq!(gone.status, 410);
            assert_eq!(
                (
                    num(&gone, "stream-record-first"),
                    num(&gone, "stream-record-next")
                ),
                (3, 5)
            );
        }
    }
}

const SEGMENT: u64 = 256 << 10;

fn fill_octets(s: &Server, path: &str, bytes: usize) {
    let octet = [("Content-Type", "application/octet-stream")];
    assert_eq!(req(s.addr, "PUT", path, &octet, b"").status, 201);
    let mut conn = Conn::open(s.addr);
    for i in 0..bytes.div_ceil(20_000) {
        let r = conn.request("POST", path, &octet, &vec![i as u8; 20_000]);
        assert_eq!(r.status, 204);
    }
}

#[test]
fn ordinals_survive_cold_reads_and_segment_cleaning() {
    // "An implementation MUST preserve each normalized message boundary and
    // its ordinal across hot storage, WAL, cold flush, compaction, snapshot,
    // restart, and retention."
    let segment = SEGMENT.to_string();
    let mut s = start_with(&[
        "--cores",
        "1",
        "--segment-bytes",
        &segment,
        "--max-body-bytes",
        "65536",
        "--cache-bytes",
        "65536",
        "--clean-interval-ms",
        "100",
    ]);
    let baseline = log_bytes(&s.data_dir);
    let path = bucketed("keep");
    create(&s, &path, b"");
    // Records interleaved with doomed data so they share segments with it.
    let mut n = 0;
    for round in 0..6 {
        for _ in 0..10 {
            let k = 1 + n % 3;
            let batch: Vec<Value> = (n..n + k)
                .map(|i| json!({"i": i, "pad": "p".repeat(300)}))
                .collect();
            assert_eq!(append_range(&s, &path, &body_of(&batch)), (n, n + k));
            n += k;
        }
        fill_octets(&s, &format!("/{BUCKET}/doomed-{round}"), 400_000);
    }
    let before = observe(&s, &path);
    assert_eq!(before.first_next, (0, n));
    assert!(
        log_bytes(&s.data_dir) > baseline + 8 * SEGMENT,
        "the test must fill many segments"
    );
    for round in 0..6 {
        let r = req(
            s.addr,
            "DELETE",
            &format!("/{BUCKET}/doomed-{round}"),
            &[],
            b"",
        );
        assert_eq!(r.status, 204);
    }
    let target = baseline + 4 * SEGMENT;
    let deadline = Instant::now() + Duration::from_secs(20);
    while log_bytes(&s.data_dir) > target {
        assert!(
            Instant::now() < deadline,
            "the cleaner did not reclaim the deleted data"
        );
        thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(observe(&s, &path), before, "after cleaning");
    s.restart();
    assert_eq!(observe(&s, &path), before, "after cleaning and restart");
    // Retention by record over cleaned segments, then restart again.
    let half = n / 2;
    let snap = format!("{path}/snapshot?record={half}");
    assert_eq!(
        req(
            s.addr,
            "PUT",
            &snap,
            &[("Content-Type", "application/x-state")],
            b"S"
        )
        .status,
        204
    );
    assert_eq!(
        req(
            s.addr,
            "PUT",
            &format!("{path}/retention?record={half}"),
            &[],
            b""
        )
        .status,
        204
    );
    s.restart();
    let after = observe(&s, &path);
    assert_eq!(after.first_next, (half, n));
    assert_eq!(after.values, before.values[half as usize..]);
    assert_eq!(after.boundaries, before.boundaries[half as usize..]);
}
