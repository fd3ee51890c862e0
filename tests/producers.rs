//! Idempotent producers whose appends arrive out of order (PROTOCOL.md
//! §5.2.1): a client pipelining a producer's appends over several
//! connections sends them in order, but they can reach the stream's shard
//! in another (a connection accepted by another shard is handed over). An
//! append ahead of its sequence waits up to `--producer-gap-wait-ms` for
//! the ones before it; a gap nothing fills is still a 409.

mod common;
mod restart_helpers;

use std::sync::Barrier;
use std::thread;
use std::time::{Duration, Instant};

use common::{Conn, Server, req};
use restart_helpers::{TEXT, producer_post};

/// Producer `p`'s append `seq` (epoch 0) of `<seq>` on `conn`: its status.
fn send(conn: &mut Conn, path: &str, seq: u64) -> u16 {
    let seq_text = seq.to_string();
    let headers = [
        ("Content-Type", TEXT),
        ("Producer-Id", "p"),
        ("Producer-Epoch", "0"),
        ("Producer-Seq", seq_text.as_str()),
    ];
    let body = format!("<{seq}>");
    conn.request("POST", path, &headers, body.as_bytes()).status
}

/// Producer `p`'s append `seq` (epoch 0) of `<seq>`.
fn append(s: &Server, path: &str, seq: u64) -> common::Response {
    producer_post(s, path, "p", 0, seq, format!("<{seq}>").as_bytes())
}

#[test]
fn appends_ahead_of_their_sequence_wait_for_the_ones_before() {
    let s = Server::start(&["--cores", "2"]);
    let path = "/v1/stream/ahead";
    let text = [("Content-Type", TEXT)];
    assert_eq!(req(s.addr, "PUT", path, &text, b"").status, 201);
    let s = &s;
    thread::scope(|scope| {
        let early: Vec<_> = (1..6)
            .map(|seq| scope.spawn(move || append(s, path, seq).status))
            .collect();
        thread::sleep(Duration::from_millis(50));
        assert_eq!(append(s, path, 0).status, 200);
        for (seq, early) in (1..6).zip(early) {
            assert_eq!(early.join().unwrap(), 200, "seq {seq}");
        }
    });
    let read = req(s.addr, "GET", &format!("{path}?offset=-1"), &[], b"");
    assert_eq!(read.text(), "<0><1><2><3><4><5>");
}

#[test]
fn a_gap_nothing_fills_is_409_after_the_wait() {
    let s = Server::start(&["--cores", "1", "--producer-gap-wait-ms", "300"]);
    let path = "/v1/stream/gap";
    let text = [("Content-Type", TEXT)];
    assert_eq!(req(s.addr, "PUT", path, &text, b"").status, 201);
    assert_eq!(append(&s, path, 0).status, 200);
    let started = Instant::now();
    let gap = append(&s, path, 5);
    assert_eq!(gap.status, 409);
    assert_eq!(gap.header("producer-expected-seq"), Some("1"));
    assert!(started.elapsed() >= Duration::from_millis(300));
}

/// A pipeline deeper than one gap wait holds: its appends land one commit
/// after another (each waits for the one before it), and every landing
/// starts the wait of the next one again, so none is refused for how long
/// the whole pipeline takes. (Where the pipeline commits within one wait,
/// on a fast disk, this holds either way: it says so.)
#[test]
fn a_pipeline_deeper_than_one_wait_lands_whole() {
    const DEPTH: u64 = 300;
    const WAIT: Duration = Duration::from_millis(100);
    let wait = WAIT.as_millis().to_string();
    let s = Server::start(&["--cores", "2", "--producer-gap-wait-ms", &wait]);
    let path = "/v1/stream/deep";
    let text = [("Content-Type", TEXT)];
    assert_eq!(req(s.addr, "PUT", path, &text, b"").status, 201);
    // Connected first, then sent at once: each early append's first wait
    // starts when it arrives, not while the others' threads start.
    let all_connected = Barrier::new(DEPTH as usize);
    let (s, all_connected) = (&s, &all_connected);
    let took = thread::scope(|scope| {
        let early: Vec<_> = (1..DEPTH)
            .rev()
            .map(|seq| {
                scope.spawn(move || {
                    let mut conn = Conn::open(s.addr);
                    all_connected.wait();
                    (seq, send(&mut conn, path, seq))
                })
            })
            .collect();
        let mut first = Conn::open(s.addr);
        all_connected.wait();
        thread::sleep(Duration::from_millis(20));
        let started = Instant::now();
        assert_eq!(send(&mut first, path, 0), 200);
        for early in early {
            let (seq, status) = early.join().unwrap();
            assert_eq!(status, 200, "seq {seq}");
        }
        started.elapsed()
    });
    let read = req(s.addr, "GET", &format!("{path}?offset=-1"), &[], b"");
    let want: String = (0..DEPTH).map(|seq| format!("<{seq}>")).collect();
    assert_eq!(read.text(), want, "landed whole, in order, in {took:?}");
    if took < WAIT {
        println!("note: the pipeline took {took:?}, within one wait: nothing was tested");
    }
}
