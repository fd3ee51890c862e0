//! Long-poll waiters woken at the same position share one rendered body
//! (PROTOCOL.md §5.6; `shard::audience`): each still gets its own head and
//! cursor, waiters with another view get their own body, and a large body
//! holds one lease on `--max-reply-bytes` however many waiters write it.
//! The waits are long (20 s) so that opening the waiters one after another
//! cannot time the first out.

mod common;
mod records_helpers;

use std::thread;
use std::time::Duration;

use common::{Conn, Server, req};
use records_helpers::*;

#[test]
fn waiters_at_one_position_share_one_body_and_one_lease() {
    // 3 MiB of reply bytes: a second 2 MiB reply of its own would not fit
    // while the first is unread (503 replies_backlogged).
    let s = Server::start(&[
        "--cores",
        "1",
        "--max-reply-bytes",
        "3145728",
        "--long-poll-timeout-ms",
        "20000",
    ]);
    let path = "/v1/stream/lp-shared";
    let text = [("content-type", "text/plain")];
    assert_eq!(req(s.addr, "PUT", path, &text, b"head").status, 201);
    let query = format!("{path}?offset={}&live=long-poll", tail_of(&s, path));
    let mut waiters: Vec<Conn> = (0..4).map(|_| Conn::waiting_get(s.addr, &query)).collect();
    let big: Vec<u8> = (0..2 << 20).map(|i| b'a' + (i % 26) as u8).collect();
    let ack = req(s.addr, "POST", path, &text, &big);
    assert_eq!(ack.status, 204, "{}", ack.text());
    // Nobody reads for a while: every waiter has woken and holds its reply.
    thread::sleep(Duration::from_millis(300));
    let mut cursors = Vec::new();
    for waiter in &mut waiters {
        let r = waiter.read_response();
        assert_eq!(r.status, 200, "{}", r.text());
        assert!(r.body == big, "each waiter gets the whole append");
        assert_eq!(
            r.header("stream-next-offset"),
            ack.header("stream-next-offset")
        );
        cursors.push(r.header("stream-cursor").expect("a cursor").to_string());
    }
    assert!(
        cursors
            .iter()
            .all(|c| c.bytes().all(|b| b.is_ascii_digit()))
    );
    // The shared body's lease went back once its last waiter was done.
    let after = req(s.addr, "GET", &format!("{path}?offset=-1"), &[], b"");
    assert_eq!(after.status, 200, "{}", after.text());
}

#[test]
fn waiters_with_another_view_get_their_own_body() {
    let s = start_with(&["--cores", "1", "--long-poll-timeout-ms", "20000"]);
    let path = bucketed("lp-views");
    five(&s, &path);
    let plain = format!("{path}?tail_records=0&live=long-poll");
    let envelope = format!("{plain}&record_view=envelope");
    let mut waiters = [
        Conn::waiting_get(s.addr, &plain),
        Conn::waiting_get(s.addr, &envelope),
        Conn::waiting_get(s.addr, &plain),
        Conn::waiting_get(s.addr, &envelope),
    ];
    append(&s, &path, &body_of(&values(5..7)));
    let replies: Vec<_> = waiters.iter_mut().map(|w| w.read_response()).collect();
    for (i, r) in replies.iter().enumerate() {
        assert_eq!(r.status, 200, "waiter {i}: {}", r.text());
        assert_eq!(read_coords(r), (0, 5, 7), "waiter {i}");
        let wants = if i % 2 == 0 { NDJSON } else { ENVELOPE_NDJSON };
        assert_eq!(media_type(r).as_deref(), Some(wants), "waiter {i}");
    }
    assert_eq!(lines(&replies[0].body), values(5..7));
    assert_eq!(replies[0].body, replies[2].body);
    let enveloped = lines(&replies[1].body);
    assert_eq!(enveloped[1]["record"], serde_json::json!(6));
    assert_eq!(enveloped[1]["value"], values(6..7)[0]);
    assert_eq!(replies[1].body, replies[3].body);
}

/// The stream's `Stream-Next-Offset` (HEAD).
fn tail_of(s: &Server, path: &str) -> String {
    let head = req(s.addr, "HEAD", path, &[], b"");
    head.header("stream-next-offset")
        .expect("a tail")
        .to_string()
}
