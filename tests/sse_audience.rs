//! SSE responses of one stream that read different views at the same time
//! (PROTOCOL.md §5.7, §8.1; extensions §6.9): the owning shard renders an
//! event once and shares it between the responses at the same position
//! with the same options, so each response here must still get exactly
//! its own view — plain, by record, record envelopes, a cursor past its
//! own, a later start — and equal views must get equal bytes.

mod common;
mod records_helpers;

use std::time::{Duration, Instant};

use common::sse::{Event, Sse};
use common::{Response, Server};
use records_helpers::*;

const WAIT: Duration = Duration::from_secs(5);

fn sse(s: &Server, path: &str, query: &str) -> Sse {
    let sse = Sse::open(s.addr, &format!("{path}?{query}"));
    assert_eq!(sse.head.status, 200, "{query}: {:?}", sse.head.headers);
    sse
}

/// Every event up to the control event that reports `offset` as the next.
fn events_until(sse: &mut Sse, offset: &str) -> Vec<Event> {
    let deadline = Instant::now() + WAIT;
    let mut got = Vec::new();
    loop {
        let e = sse.event(deadline.saturating_duration_since(Instant::now()));
        let done = e.name == "control" && e.json()["streamNextOffset"] == offset;
        got.push(e);
        if done {
            return got;
        }
    }
}

/// Every control event among `events` satisfies `holds`.
fn assert_controls(events: &[Event], holds: impl Fn(&serde_json::Value) -> bool) {
    for control in events.iter().filter(|e| e.name == "control") {
        assert!(holds(&control.json()), "{}", control.data);
    }
}

fn data_values(events: &[Event]) -> Vec<serde_json::Value> {
    let data = events.iter().filter(|e| e.name == "data");
    data.flat_map(|e| e.json().as_array().cloned().expect("a JSON array"))
        .collect()
}

fn appended(s: &Server, path: &str, range: std::ops::Range<u64>) -> (Response, String) {
    let ack = append(s, path, &body_of(&values(range)));
    let next = next_offset(&ack);
    (ack, next)
}

#[test]
fn each_response_gets_its_own_view_of_the_same_events() {
    let s = start();
    let path = upstream("audience");
    create(&s, &path, &body_of(&values(0..2)));
    let mut plain = sse(&s, &path, "offset=-1&live=sse");
    let mut twin = sse(&s, &path, "offset=-1&live=sse");
    let mut envelopes = sse(&s, &path, "record=0&live=sse&record_view=envelope");
    let mut by_record = sse(&s, &path, "record=0&live=sse");
    let ahead = "99999999999";
    let mut jittered = sse(&s, &path, &format!("offset=-1&live=sse&cursor={ahead}"));
    let (_, first) = appended(&s, &path, 2..4);
    let mut late = sse(&s, &path, "offset=now&live=sse");
    let (_, tail) = appended(&s, &path, 4..7);

    let plain_events = events_until(&mut plain, &tail);
    assert_eq!(data_values(&plain_events), values(0..7));
    let twin_events = events_until(&mut twin, &tail);
    let render = |events: &[Event]| -> Vec<(String, String)> {
        let pairs = events.iter().map(|e| (e.name.clone(), e.data.clone()));
        pairs.collect()
    };
    assert_eq!(
        render(&twin_events),
        render(&plain_events),
        "equal views, equal bytes"
    );

    let envelope_events = events_until(&mut envelopes, &tail);
    let records: Vec<_> = envelope_events
        .iter()
        .filter(|e| e.name == "data")
        .map(|e| {
            let v = e.json();
            assert!(v.is_object(), "one envelope per data event: {}", e.data);
            (
                v["record"].as_u64().expect("an ordinal"),
                v["value"].clone(),
            )
        })
        .collect();
    let expected: Vec<_> = (0..7).zip(values(0..7)).collect();
    assert_eq!(records, expected);
    assert_controls(&envelope_events, |c| c["streamNextRecord"].is_u64());

    let record_events = events_until(&mut by_record, &tail);
    assert_eq!(data_values(&record_events), values(0..7));
    assert_controls(&record_events, |c| c["streamNextRecord"].is_u64());

    let jittered_events = events_until(&mut jittered, &tail);
    assert_eq!(data_values(&jittered_events), values(0..7));
    let past_ahead = |c: &serde_json::Value| {
        let cursor = c["streamCursor"]
            .as_str()
            .and_then(|c| c.parse::<u64>().ok());
        cursor.is_some_and(|cursor| cursor > ahead.parse().unwrap())
    };
    assert_controls(&jittered_events, past_ahead);
    assert_controls(&plain_events, |c| c.get("streamNextRecord").is_none());

    let late_events = events_until(&mut late, &tail);
    assert_eq!(
        data_values(&late_events),
        values(4..7),
        "from {first} on only"
    );
}
