//! Overload: a bounded commit queue. When more log bytes wait for the disk
//! than `--max-commit-queue-bytes`, writes get 503 with Retry-After and a
//! JSON body instead of growing memory, and nothing refused is applied.
//! Request bodies: leased from `--max-request-bytes` as they arrive, and
//! held to `--min-request-rate`.

mod common;

use std::thread;

use common::{Conn, Server, req};

#[test]
fn full_commit_queue_answers_503_and_applies_nothing_refused() {
    // One byte: any write arriving while another waits for the disk is refused.
    let s = Server::start(&["--cores", "1", "--max-commit-queue-bytes", "1"]);
    let writers = 24;
    for w in 0..writers {
        let r = req(
            s.addr,
            "PUT",
            &format!("/v1/stream/load-{w}"),
            &[("Content-Type", "text/plain")],
            b"",
        );
        assert!(matches!(r.status, 201 | 503), "{}", r.status);
        if r.status == 503 {
            let again = req(
                s.addr,
                "PUT",
                &format!("/v1/stream/load-{w}"),
                &[("Content-Type", "text/plain")],
                b"",
            );
            assert_eq!(again.status, 201);
        }
    }
    let addr = s.addr;
    let results: Vec<(Vec<u8>, usize)> = thread::scope(|scope| {
        let handles: Vec<_> = (0..writers)
            .map(|w| {
                scope.spawn(move || {
                    let mut conn = Conn::open(addr);
                    let (mut acked, mut refused) = (Vec::new(), 0);
                    for i in 0..30 {
                        let body = format!("<{w}:{i}>");
                        let path = format!("/v1/stream/load-{w}");
                        let r = conn.request(
                            "POST",
                            &path,
                            &[("Content-Type", "text/plain")],
                            body.as_bytes(),
                        );
                        match r.status {
                            204 => acked.extend_from_slice(body.as_bytes()),
                            503 => {
                                assert_eq!(r.header("retry-after"), Some("1"));
                                let json: serde_json::Value =
                                    serde_json::from_slice(&r.body).unwrap();
                                assert_eq!(json["error"]["code"], "commit_queue_full");
                                refused += 1;
                            }
                            other => panic!("unexpected status {other}"),
                        }
                    }
                    (acked, refused)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let refused: usize = results.iter().map(|(_, r)| r).sum();
    assert!(
        refused > 0,
        "24 concurrent writers against a 1-byte queue must see a 503"
    );
    for (w, (acked, _)) in results.iter().enumerate() {
        let r = req(s.addr, "GET", &format!("/v1/stream/load-{w}"), &[], b"");
        assert_eq!(
            &r.body, acked,
            "writer {w}: exactly the acknowledged appends"
        );
    }
}

/// `--max-connections`: a shard at its limit answers new connections 503
/// with Retry-After and a JSON body, then closes them; held connections keep
/// working and a freed slot is usable again.
#[test]
fn connections_over_the_limit_get_503_and_are_closed() {
    let s = Server::start(&["--cores", "1", "--max-connections", "3"]);
    let mut held: Vec<Conn> = (0..3).map(|_| Conn::open(s.addr)).collect();
    for c in &mut held {
        assert_eq!(c.request("GET", "/v1/health", &[], b"").status, 200);
    }
    let refused = req(s.addr, "GET", "/v1/health", &[], b"");
    assert_eq!(refused.status, 503);
    assert_eq!(refused.header("retry-after"), Some("1"));
    assert!(
        refused.text().contains("too_many_connections"),
        "{}",
        refused.text()
    );
    for c in &mut held {
        assert_eq!(c.request("GET", "/v1/health", &[], b"").status, 200);
    }
    // Counted where operators look (docs/METRICS.md).
    let metrics = held[0].request("GET", "/v1/metrics", &[], b"").text();
    let counted = r#"rill_http_requests_total{shard="0",route="other",status="503"} 1"#;
    assert!(metrics.lines().any(|l| l == counted), "{metrics}");
    drop(held.pop());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let r = req(s.addr, "GET", "/v1/health", &[], b"");
        if r.status == 200 {
            break;
        }
        assert_eq!(r.status, 503);
        assert!(
            std::time::Instant::now() < deadline,
            "the freed slot never came back"
        );
        thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// `--max-connections` holds on the shard that owns a stream, whichever
/// shard accepted the connections and handed them over: a busy stream does
/// not gather connections past the limit.
#[test]
fn handed_over_connections_count_against_the_owners_limit() {
    let s = Server::start(&[
        "--cores",
        "2",
        "--max-connections",
        "3",
        // Long enough that every waiter is there at once, even on a
        // loaded machine: a waiter that ended early would free its slot.
        "--long-poll-timeout-ms",
        "8000",
    ]);
    let path = (0..)
        .map(|i| format!("/v1/stream/owned-by-1-{i}"))
        .find(|p| rill::shard::placement::shard_of(p, 2) == 1)
        .unwrap();
    assert_eq!(
        req(s.addr, "PUT", &path, &[("Content-Type", "text/plain")], b"").status,
        201
    );
    let waiters: Vec<_> = (0..12)
        .map(|_| {
            let (addr, path) = (s.addr, path.clone());
            thread::spawn(move || {
                let url = format!("{path}?offset=now&live=long-poll");
                req(addr, "GET", &url, &[], b"").status
            })
        })
        .collect();
    let statuses: Vec<u16> = waiters.into_iter().map(|w| w.join().unwrap()).collect();
    let held = statuses.iter().filter(|&&s| s == 204).count();
    let refused = statuses.iter().filter(|&&s| s == 503).count();
    assert!(held <= 3, "the owner held {held} long-polls: {statuses:?}");
    assert_eq!(held + refused, statuses.len(), "{statuses:?}");
}

/// A low soft limit on open files (a shell's `ulimit -Sn`, often 1,024) is
/// raised to the hard limit at startup: with a soft limit of 100, 300
/// connections held open at once are all served (accepts failed with
/// EMFILE past ~90 before).
#[test]
fn a_low_soft_limit_on_open_files_is_raised() {
    use std::process::{Command, Stdio};
    let root = std::env::temp_dir().join(common::unique_name("rill-nofile"));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut child = Command::new("sh")
        .args(["-c", "ulimit -Sn 100 && exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_rill"))
        .args(["serve", "--cores", "1", "--listen", &addr.to_string()])
        .arg("--data-dir")
        .arg(root.join("data"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn rill");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(child.try_wait().unwrap().is_none(), "rill exited early");
        assert!(std::time::Instant::now() < deadline, "rill did not start");
        thread::sleep(std::time::Duration::from_millis(20));
    }
    let mut held: Vec<Conn> = (0..300).map(|_| Conn::open(addr)).collect();
    for c in &mut held {
        let request = c.build_request("GET", "/v1/health", &[], b"");
        c.send_raw(&request);
    }
    // Served connections answer at once; a generous deadline for all of
    // them keeps a loaded machine from failing the test, and a short wait
    // each after it keeps a failing run short.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut served = 0;
    for c in &mut held {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let wait = left.max(std::time::Duration::from_millis(100));
        c.stream.set_read_timeout(Some(wait)).unwrap();
        served += usize::from(matches!(c.try_read_response_for("GET"), Ok(r) if r.status == 200));
    }
    drop(held);
    let _ = child.kill();
    let _ = child.wait();
    let _ = std::fs::remove_dir_all(&root);
    assert_eq!(served, 300, "connections served with a soft limit of 100");
}

/// Request bodies count against `--max-request-bytes` as they arrive and
/// while they are handled: with 2 MiB (one shard), a second 1.5 MiB body
/// arriving while most of a first is held gets 503 with Retry-After once
/// its own bytes would pass the budget, and once the first is handled the
/// next goes through.
#[test]
fn large_bodies_arriving_at_once_are_bounded() {
    let (s, path) = (budget_server("bodies"), "/v1/stream/bodies");
    let body = vec![b'a'; 3 << 19];
    let head = post_head(path, body.len());
    let mut first = Conn::open(s.addr);
    first.send_raw(head.as_bytes());
    first.send_raw(&body[..5 << 18]);
    // The first's 1.25 MiB are read (and leased) long before this.
    thread::sleep(std::time::Duration::from_millis(500));
    let mut second = Conn::open(s.addr);
    second.send_raw(head.as_bytes());
    // Refused part-way; the server drains the rest before it closes.
    let _ = second.try_send_raw(&body);
    let second = second.read_response();
    assert_eq!(second.status, 503, "{}", second.text());
    assert!(
        second.text().contains("requests_backlogged"),
        "{}",
        second.text()
    );
    assert_eq!(second.header("retry-after"), Some("1"));
    first.send_raw(&body[5 << 18..]);
    assert_eq!(first.read_response().status, 204);
    assert_eq!(req(s.addr, "POST", path, &OCTETS, &body).status, 204);
}

/// A declared Content-Length leases nothing until its bytes come: senders
/// that announce large bodies and trickle them hold a read's worth each,
/// so with 2 MiB (one shard) a 1.5 MiB body beside six of them is served.
#[test]
fn slow_senders_of_large_bodies_do_not_hold_the_budget() {
    let (s, path) = (budget_server("trickled"), "/v1/stream/trickled");
    let body = vec![b'b'; 3 << 19];
    let slow: Vec<Conn> = (0..6)
        .map(|_| {
            let mut c = Conn::open(s.addr);
            c.send_raw(post_head(path, body.len()).as_bytes());
            c.send_raw(&body[..1024]);
            c
        })
        .collect();
    thread::sleep(std::time::Duration::from_millis(300));
    let r = req(s.addr, "POST", path, &OCTETS, &body);
    assert_eq!(r.status, 204, "{}", r.text());
    drop(slow);
}

/// A client that waits for `100 Continue` is not invited to send a body
/// the shard has no room for: with 2 MiB (one shard) all held by one body
/// (the harness's largest), the waiting client's first answer is the 503.
#[test]
fn no_continue_for_a_body_without_room() {
    let (s, path) = (budget_server("continued"), "/v1/stream/continued");
    let body = vec![b'd'; 2 << 20];
    let mut big = Conn::open(s.addr);
    big.send_raw(post_head(path, body.len()).as_bytes());
    big.send_raw(&body[..3 << 19]);
    thread::sleep(std::time::Duration::from_millis(500));
    let mut waiting = Conn::open(s.addr);
    let head = post_head(path, 1 << 20).replace("\r\n\r\n", "\r\nExpect: 100-continue\r\n\r\n");
    waiting.send_raw(head.as_bytes());
    let first = waiting.read_head();
    assert_eq!(first.status, 503, "{:?}", first.headers);
    big.send_raw(&body[3 << 19..]);
    assert_eq!(big.read_response().status, 204);
}

/// A body must average `--min-request-rate` bytes a second once the idle
/// timeout's grace is spent: one trickled at ~650 B/s (every read well
/// inside the idle timeout) gets 408; one at ~4 KB/s is served.
#[test]
fn a_body_slower_than_the_minimum_rate_gets_408() {
    let flags = ["--cores", "1", "--idle-timeout-ms", "1500"];
    let s = Server::start(&[&flags[..], &["--min-request-rate", "1000"]].concat());
    let path = "/v1/stream/paced";
    assert_eq!(req(s.addr, "PUT", path, &OCTETS, b"").status, 201);
    let trickle = |c: &mut Conn, piece: usize, pieces: usize| {
        for _ in 0..pieces {
            if c.try_send_raw(&vec![b'c'; piece]).is_err() {
                return;
            }
            thread::sleep(std::time::Duration::from_millis(200));
        }
    };
    let mut slow = Conn::open(s.addr);
    slow.send_raw(post_head(path, 100_000).as_bytes());
    let started = std::time::Instant::now();
    // ~650 B/s falls behind 1.5 s + 1 s per 1,000 B after ~4.3 s.
    trickle(&mut slow, 130, 40);
    let r = slow.read_response();
    assert_eq!(r.status, 408, "{}", r.text());
    assert!(started.elapsed() < std::time::Duration::from_secs(8));
    let mut paced = Conn::open(s.addr);
    paced.send_raw(post_head(path, 800 * 20).as_bytes());
    trickle(&mut paced, 800, 20);
    assert_eq!(paced.read_response().status, 204);
}

/// One shard with a 2 MiB body budget and the byte stream `name` on it.
fn budget_server(name: &str) -> Server {
    let s = Server::start(&["--cores", "1", "--max-request-bytes", "2097152"]);
    let path = format!("/v1/stream/{name}");
    assert_eq!(req(s.addr, "PUT", &path, &OCTETS, b"").status, 201);
    s
}

const OCTETS: [(&str, &str); 1] = [("Content-Type", "application/octet-stream")];

fn post_head(path: &str, len: usize) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nHost: t\r\nContent-Type: application/octet-stream\r\n\
         Content-Length: {len}\r\n\r\n"
    )
}

/// RFC 9110 §10.1.1: an append waiting for `100 Continue` whose head alone
/// decides its refusal gets that refusal instead, before sending a byte of
/// its body: a missing stream 404, a closed one 409 with `Stream-Closed`,
/// another content type 409, a missing bucket 404, a soft-deleted source
/// 410, a content-coded body 415. One the stream takes is
/// invited and appended.
#[test]
fn an_append_refused_by_its_head_is_answered_before_its_body() {
    let s = Server::start(&["--cores", "2"]);
    let (open, closed) = ("/v1/stream/taking", "/v1/stream/shut");
    assert_eq!(req(s.addr, "PUT", open, &OCTETS, b"").status, 201);
    let close = [OCTETS[0], ("Stream-Closed", "true")];
    assert_eq!(req(s.addr, "PUT", closed, &close, b"").status, 201);
    let waiting = |path: &str, content_type: &str| {
        let mut c = Conn::open(s.addr);
        let head = post_head(path, 1 << 20)
            .replace("application/octet-stream", content_type)
            .replace("\r\n\r\n", "\r\nExpect: 100-continue\r\n\r\n");
        c.send_raw(head.as_bytes());
        (c.read_head(), c)
    };
    let octets = "application/octet-stream";
    let (missing, _) = waiting("/v1/stream/absent", octets);
    assert_eq!(missing.status, 404, "{:?}", missing.headers);
    let (shut, _) = waiting(closed, octets);
    assert_eq!(shut.status, 409);
    assert_eq!(shut.header("stream-closed"), Some("true"));
    let (other_type, _) = waiting(open, "text/plain");
    assert_eq!(other_type.status, 409);
    let (no_bucket, _) = waiting("/nobucket/s1", octets);
    assert_eq!(no_bucket.status, 404);
    // A source deleted while a fork reads it is 410 here as on any path.
    assert_eq!(
        req(s.addr, "PUT", "/v1/stream/gone", &OCTETS, b"").status,
        201
    );
    let fork = [("Stream-Forked-From", "/v1/stream/gone")];
    assert_eq!(
        req(s.addr, "PUT", "/v1/stream/on-gone", &fork, b"").status,
        201
    );
    assert_eq!(
        req(s.addr, "DELETE", "/v1/stream/gone", &[], b"").status,
        204
    );
    let (soft_deleted, _) = waiting("/v1/stream/gone", octets);
    assert_eq!(soft_deleted.status, 410);
    let (coded, _) = waiting(open, "application/octet-stream\r\nContent-Encoding: gzip");
    assert_eq!(coded.status, 415);
    let (invited, mut c) = waiting(open, octets);
    assert_eq!(invited.status, 100);
    c.send_raw(&vec![b'b'; 1 << 20]);
    assert_eq!(c.read_response().status, 204);
    let read = req(s.addr, "GET", &format!("{open}?offset=-1"), &[], b"");
    assert_eq!(read.body.len(), 1 << 20);
}
