//! Crash test (issue 3 "Done when"): SIGKILL the real binary under
//! concurrent load, several rounds on one data dir. After each restart every
//! acknowledged append is present byte-exact and in acknowledgement order,
//! each returned Stream-Next-Offset reads back exactly what follows it,
//! closed streams stay closed, and a resent producer write is deduplicated.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use common::{Conn, Server, enc, req};

const ROUNDS: usize = 3;
const BUCKET: &str = "crashes";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Binary,
    Text,
    /// A JSON stream on the bucketed surface: reads are the stored NDJSON.
    Json,
    /// Text with idempotent-producer headers.
    Producer,
    /// Text appended three frames at a time through append-batch.
    Batch,
}

struct Writer {
    kind: Kind,
    path: String,
    /// Content verified after the last restart.
    durable: Vec<u8>,
}

/// What one round of a writer saw.
#[derive(Default)]
struct Round {
    acked: Vec<(Vec<u8>, String)>,
    in_flight: Option<Vec<u8>>,
    last_producer: Option<(u64, u64, Vec<u8>)>,
}

fn content_type(kind: Kind) -> &'static str {
    match kind {
        Kind::Binary => "application/octet-stream",
        Kind::Text | Kind::Producer | Kind::Batch => "text/plain",
        Kind::Json => "application/json",
    }
}

/// A unique payload; binary ones carry every byte value.
fn payload(kind: Kind, round: usize, writer: usize, i: usize) -> Vec<u8> {
    let pad = (i * 7919 + writer * 31) % 300;
    match kind {
        Kind::Binary => {
            let mut p = format!("r{round}w{writer}i{i}:").into_bytes();
            p.extend((0..=255u8).cycle().skip(i % 256).take(pad));
            p
        }
        Kind::Text | Kind::Producer | Kind::Batch => {
            format!("<r{round} w{writer} i{i} {}>", "t".repeat(pad)).into_bytes()
        }
        Kind::Json => format!(
            "{{\"r\":{round},\"w\":{writer},\"i\":{i},\"pad\":\"{}\"}}",
            "j".repeat(pad)
        )
        .into_bytes(),
    }
}

/// The bytes a payload adds to the stream's stored form.
fn stored(kind: Kind, payload: &[u8]) -> Vec<u8> {
    let mut s = payload.to_vec();
    if kind == Kind::Json {
        s.push(b'\n');
    }
    s
}

fn write_round(
    addr: std::net::SocketAddr,
    w: &Writer,
    id: usize,
    round: usize,
    stop: &AtomicBool,
) -> Round {
    let mut out = Round::default();
    let Ok(mut conn) = std::panic::catch_unwind(|| Conn::open(addr)) else {
        return out;
    };
    let mut i = 0;
    while !stop.load(Ordering::Relaxed) {
        let body = payload(w.kind, round, id, i);
        let (epoch, seq) = (round.to_string(), i.to_string());
        let mut headers = vec![("Content-Type", content_type(w.kind))];
        if w.kind == Kind::Producer {
            headers.extend([
                ("Producer-Id", "crash-producer"),
                ("Producer-Epoch", &epoch),
                ("Producer-Seq", &seq),
            ]);
        }
        out.in_flight = Some(body.clone());
        if w.kind == Kind::Batch {
            let Some(next) = append_batch(&mut conn, &w.path, &body) else {
                break;
            };
            out.acked.push((body, next));
            out.in_flight = None;
            i += 1;
            continue;
        }
        let Ok(r) = conn.try_request("POST", &w.path, &headers, &body) else {
            break;
        };
        assert!(
            matches!(r.status, 200 | 204),
            "append to {}: {} {}",
            w.path,
            r.status,
            r.text()
        );
        let next = r
            .header("stream-next-offset")
            .expect("next offset")
            .to_string();
        if w.kind == Kind::Producer {
            out.last_producer = Some((round as u64, i as u64, body.clone()));
        }
        out.acked.push((body, next));
        out.in_flight = None;
        i += 1;
    }
    out
}

/// Posts `body` as three append-batch frames; the offset after the last
/// frame, or `None` when the connection died.
fn append_batch(conn: &mut Conn, path: &str, body: &[u8]) -> Option<String> {
    let third = body.len() / 3;
    let frames = [&body[..third], &body[third..2 * third], &body[2 * third..]];
    let r = conn
        .try_request(
            "POST",
            &format!("{path}/append-batch"),
            &[("Content-Type", "text/plain")],
            &common::batch::framed(&frames),
        )
        .ok()?;
    assert_eq!(r.status, 200, "append-batch to {path}: {}", r.text());
    let acks: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    let acks = acks.as_array().unwrap();
    assert!(acks.iter().all(|a| a["status"] == 204), "{acks:?}");
    Some(
        acks.last().unwrap()["stream_next_offset"]
            .as_str()
            .unwrap()
            .to_string(),
    )
}

/// The whole stream, paging with Stream-Next-Offset.
fn read_from(s: &Server, path: &str, offset: &str) -> Vec<u8> {
    let mut data = Vec::new();
    let mut offset = offset.to_string();
    loop {
        let r = req(
            s.addr,
            "GET",
            &format!("{path}?offset={}", enc(&offset)),
            &[],
            b"",
        );
        assert_eq!(r.status, 200, "read {path} at {offset}: {}", r.text());
        data.extend_from_slice(&r.body);
        let next = r.header("stream-next-offset").unwrap().to_string();
        if r.header("stream-up-to-date") == Some("true") || next == offset {
            return data;
        }
        offset = next;
    }
}

/// Checks one writer after a restart and returns its new durable content.
fn verify(s: &Server, w: &Writer, round: &Round) -> Vec<u8> {
    let content = read_from(s, &w.path, "-1");
    let mut expected = w.durable.clone();
    let mut ends = Vec::new();
    for (body, _) in &round.acked {
        expected.extend(stored(w.kind, body));
        ends.push(expected.len());
    }
    assert!(
        content.starts_with(&expected),
        "{}: acknowledged data lost or reordered ({} bytes expected, {} found)",
        w.path,
        expected.len(),
        content.len()
    );
    let extra = &content[expected.len()..];
    let unacked = round
        .in_flight
        .as_ref()
        .map(|p| stored(w.kind, p))
        .unwrap_or_default();
    assert!(
        extra.is_empty() || extra == unacked,
        "{}: unexpected bytes after the acknowledged data",
        w.path
    );
    for ((_, next), end) in round.acked.iter().zip(&ends).step_by(7) {
        assert_eq!(
            read_from(s, &w.path, next),
            content[*end..],
            "{}: reading from {next}",
            w.path
        );
    }
    content
}

fn create_streams(s: &Server) -> Vec<Writer> {
    assert_eq!(
        req(s.addr, "PUT", &format!("/{BUCKET}"), &[], b"").status,
        201
    );
    let kinds = [
        Kind::Binary,
        Kind::Text,
        Kind::Json,
        Kind::Producer,
        Kind::Binary,
        Kind::Text,
        Kind::Batch,
    ];
    kinds
        .iter()
        .enumerate()
        .map(|(i, &kind)| {
            let path = match kind {
                Kind::Json => format!("/{BUCKET}/json-{i}"),
                Kind::Batch => format!("/{BUCKET}/batch-{i}"),
                _ => format!("/v1/stream/crash-{i}"),
            };
            let r = req(
                s.addr,
                "PUT",
                &path,
                &[("Content-Type", content_type(kind))],
                b"",
            );
            assert_eq!(r.status, 201, "create {path}");
            Writer {
                kind,
                path,
                durable: Vec::new(),
            }
        })
        .collect()
}

fn check_closed(s: &Server) {
    let head = req(s.addr, "HEAD", "/v1/stream/crash-closed", &[], b"");
    assert_eq!(
        head.header("stream-closed"),
        Some("true"),
        "closed stream reopened"
    );
    let late = req(
        s.addr,
        "POST",
        "/v1/stream/crash-closed",
        &[("Content-Type", "text/plain")],
        b"late",
    );
    assert_eq!(late.status, 409);
    assert_eq!(
        read_from(s, "/v1/stream/crash-closed", "-1"),
        b"final words"
    );
}

fn check_producer_dedup(s: &Server, w: &Writer, round: &Round) {
    let Some((epoch, seq, body)) = &round.last_producer else {
        return;
    };
    let (epoch, seq) = (epoch.to_string(), seq.to_string());
    let headers = [
        ("Content-Type", "text/plain"),
        ("Producer-Id", "crash-producer"),
        ("Producer-Epoch", epoch.as_str()),
        ("Producer-Seq", seq.as_str()),
    ];
    let before = read_from(s, &w.path, "-1");
    let r = req(s.addr, "POST", &w.path, &headers, body);
    assert_eq!(
        r.status,
        204,
        "resent producer write must be a duplicate: {}",
        r.text()
    );
    assert_eq!(
        read_from(s, &w.path, "-1"),
        before,
        "a duplicate changed the stream"
    );
}

#[test]
fn acknowledged_writes_survive_sigkill_under_load() {
    let mut s = Server::start(&[
        "--cores",
        "2",
        "--segment-bytes",
        "1048576",
        "--max-body-bytes",
        "65536",
    ]);
    let mut writers = create_streams(&s);
    let close = [("Content-Type", "text/plain"), ("Stream-Closed", "true")];
    assert_eq!(
        req(
            s.addr,
            "PUT",
            "/v1/stream/crash-closed",
            &[("Content-Type", "text/plain")],
            b""
        )
        .status,
        201
    );
    assert_eq!(
        req(
            s.addr,
            "POST",
            "/v1/stream/crash-closed",
            &close,
            b"final words"
        )
        .status,
        204
    );
    for round in 0..ROUNDS {
        let stop = Arc::new(AtomicBool::new(false));
        let addr = s.addr;
        let results: Vec<Round> = thread::scope(|scope| {
            let handles: Vec<_> = writers
                .iter()
                .enumerate()
                .map(|(id, w)| {
                    let stop = stop.clone();
                    scope.spawn(move || write_round(addr, w, id, round, &stop))
                })
                .collect();
            thread::sleep(Duration::from_millis(400 + 150 * round as u64));
            s.kill();
            stop.store(true, Ordering::Relaxed);
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(
            results.iter().any(|r| !r.acked.is_empty()),
            "round {round}: no write was acknowledged"
        );
        s.restart();
        check_closed(&s);
        for (w, r) in writers.iter_mut().zip(&results) {
            w.durable = verify(&s, w, r);
            if w.kind == Kind::Producer {
                check_producer_dedup(&s, w, r);
            }
        }
    }
}
