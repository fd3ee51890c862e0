//! JSON bodies of a MiB or more (the test server takes bodies up to 2 MiB), which the shard normalizes in slices while
//! its other clients run (`shard/slices.rs`), answer as small ones do
//! (PROTOCOL.md §7.1, extensions §4 and §6): the same records and ranges,
//! the same 400s for invalid JSON and an empty array, on appends and on
//! append-batch frames.

mod common;

use common::batch::framed;
use common::{Server, req};

const JSON: [(&str, &str); 1] = [("Content-Type", "application/json")];

/// `[0,1,2,...]` of at least `bytes` bytes, and its record count.
fn array(bytes: usize) -> (Vec<u8>, usize) {
    let mut body = b"[".to_vec();
    let mut n = 0;
    while body.len() < bytes {
        body.extend_from_slice(format!("{n},").as_bytes());
        n += 1;
    }
    body.extend_from_slice(format!("{n}]").as_bytes());
    (body, n + 1)
}

fn server() -> Server {
    let s = Server::start(&["--cores", "1"]);
    assert_eq!(req(s.addr, "PUT", "/large", &[], b"").status, 201);
    s
}

#[test]
fn a_large_json_append_gets_its_records_and_errors() {
    let s = server();
    let path = "/large/append";
    assert_eq!(req(s.addr, "PUT", path, &JSON, b"").status, 201);
    let (body, records) = array(1_900_000);
    let r = req(s.addr, "POST", path, &JSON, &body);
    assert_eq!(r.status, 204, "{}", r.text());
    assert_eq!(r.header("stream-record-start"), Some("0"));
    assert_eq!(
        r.header("stream-record-next"),
        Some(records.to_string().as_str())
    );
    let read = req(s.addr, "GET", &format!("{path}?offset=-1"), &[], b"");
    let lines: Vec<&[u8]> = read
        .body
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(lines.len(), records);
    assert_eq!(lines[records - 1], (records - 1).to_string().as_bytes());
    // An error past the first slices: the small body's answer, and nothing appended.
    let mut broken = body.clone();
    let at = broken.len() - 1;
    broken[at] = b',';
    let small = req(s.addr, "POST", path, &JSON, b"[1,");
    let large = req(s.addr, "POST", path, &JSON, &broken);
    assert_eq!((large.status, small.status), (400, 400), "{}", large.text());
    let mut spaced = b"[".to_vec();
    spaced.resize(1_900_000, b' ');
    spaced.push(b']');
    let empty = req(s.addr, "POST", path, &JSON, &spaced);
    assert_eq!(empty.status, 400);
    assert_eq!(empty.text(), req(s.addr, "POST", path, &JSON, b"[]").text());
    let head = req(s.addr, "HEAD", path, &[], b"");
    assert_eq!(
        head.header("stream-record-next"),
        Some(records.to_string().as_str())
    );
}

#[test]
fn a_large_batch_frame_gets_its_records() {
    let s = server();
    let path = "/large/batch";
    assert_eq!(req(s.addr, "PUT", path, &JSON, b"").status, 201);
    let (big, records) = array(1_500_000);
    let body = framed(&[&big[..], b"[\"small\"]", b"[1,"]);
    let r = req(
        s.addr,
        "POST",
        &format!("{path}/append-batch"),
        &JSON,
        &body,
    );
    assert_eq!(r.status, 200, "{}", r.text());
    let acks: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    assert_eq!(acks[0]["stream_record_next"], records);
    assert_eq!(acks[1]["stream_record_start"], records);
    assert_eq!(acks[2]["status"], 400);
}

#[test]
fn a_large_json_create_gets_its_records_and_errors() {
    let s = server();
    let (body, records) = array(1_900_000);
    let r = req(s.addr, "PUT", "/large/created", &JSON, &body);
    assert_eq!(r.status, 201, "{}", r.text());
    assert_eq!(
        r.header("stream-record-next"),
        Some(records.to_string().as_str())
    );
    let mut broken = body.clone();
    let at = broken.len() - 1;
    broken[at] = b',';
    let large = req(s.addr, "PUT", "/large/broken", &JSON, &broken);
    assert_eq!(large.status, 400, "{}", large.text());
    assert_eq!(req(s.addr, "HEAD", "/large/broken", &[], b"").status, 404);
    // An empty array creates an empty stream (§7.1), however much space it holds.
    let mut spaced = b"[".to_vec();
    spaced.resize(1_900_000, b' ');
    spaced.push(b']');
    let empty = req(s.addr, "PUT", "/large/empty", &JSON, &spaced);
    assert_eq!(empty.status, 201, "{}", empty.text());
    assert_eq!(empty.header("stream-record-next"), Some("0"));
}

#[test]
fn a_large_json_fork_body_gets_its_records_and_errors() {
    let s = server();
    assert_eq!(
        req(s.addr, "PUT", "/large/source", &JSON, b"[1,2]").status,
        201
    );
    let (body, records) = array(1_500_000);
    let from = [("Stream-Forked-From", "/large/source")];
    let fork = req(s.addr, "PUT", "/large/forked", &from, &body);
    assert_eq!(fork.status, 201, "{}", fork.text());
    let next = (records + 2).to_string();
    assert_eq!(fork.header("stream-record-next"), Some(next.as_str()));
    let mut broken = body.clone();
    let at = broken.len() - 1;
    broken[at] = b',';
    let refused = req(s.addr, "PUT", "/large/broken-fork", &from, &broken);
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert_eq!(
        req(s.addr, "HEAD", "/large/broken-fork", &[], b"").status,
        404
    );
}
