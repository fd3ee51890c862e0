//! A bucket of many streams (extensions §1.3-§1.4) against the real binary:
//! more streams per shard than one scan chunk, so the count resumes range
//! after range and listing pages (each shard's first `limit + 1` after the
//! cursor) merge into the whole bucket, in byte order, each id once.

mod common;

use std::thread;

use common::{Conn, Server, req};
use serde_json::Value;

const BUCKET: &str = "scale";
const STREAMS: usize = 10_000;
const WRITERS: usize = 16;

fn id(i: usize) -> String {
    format!("s{i:05}")
}

#[test]
fn a_bucket_of_many_streams_counts_and_pages_whole() {
    let s = Server::start(&["--cores", "2"]);
    assert_eq!(
        req(s.addr, "PUT", &format!("/{BUCKET}"), &[], b"").status,
        201
    );
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let addr = s.addr;
            thread::spawn(move || {
                let mut c = Conn::open(addr);
                for i in (w..STREAMS).step_by(WRITERS) {
                    let r = c.request("PUT", &format!("/{BUCKET}/{}", id(i)), &[], b"");
                    assert_eq!(r.status, 201, "{}", r.text());
                }
            })
        })
        .collect();
    writers.into_iter().for_each(|w| w.join().unwrap());

    let bucket: Value =
        serde_json::from_slice(&req(s.addr, "GET", &format!("/{BUCKET}"), &[], b"").body).unwrap();
    assert_eq!(bucket["streams"], STREAMS);

    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let after = cursor
            .as_deref()
            .map(|c| format!("&after={c}"))
            .unwrap_or_default();
        let url = format!("/{BUCKET}/streams?limit=777{after}");
        let page: Value = serde_json::from_slice(&req(s.addr, "GET", &url, &[], b"").body).unwrap();
        let ids = page["streams"].as_array().unwrap();
        seen.extend(
            ids.iter()
                .map(|s| s["stream_id"].as_str().unwrap().to_string()),
        );
        if page["has_more"] != true {
            assert_eq!(page["next_cursor"], Value::Null);
            break;
        }
        assert_eq!(ids.len(), 777);
        cursor = Some(page["next_cursor"].as_str().unwrap().to_string());
    }
    let expected: Vec<String> = (0..STREAMS).map(id).collect();
    let first_wrong = seen.iter().zip(&expected).position(|(a, b)| a != b);
    assert_eq!(
        (seen.len(), first_wrong),
        (STREAMS, None),
        "every id once, in order"
    );

    let prefixed = format!("/{BUCKET}/streams?prefix=s012&limit=1000");
    let page: Value =
        serde_json::from_slice(&req(s.addr, "GET", &prefixed, &[], b"").body).unwrap();
    let ids: Vec<&str> = page["streams"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["stream_id"].as_str().unwrap())
        .collect();
    let expected: Vec<String> = (1200..1300).map(id).collect();
    assert_eq!(ids, expected);
}
