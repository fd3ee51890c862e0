//! `Stream-TTL` across kills (PROTOCOL.md §5.1: a sliding window that
//! "each read or write operation resets"). Reads are logged once per tenth
//! of a window (`Command::Touch`) and recovery puts a stream's last access
//! a fifth of a window after the latest logged one (never past the
//! restart): a stream idle past its TTL stays expired after a SIGKILL, and
//! one kept alive by reads alone is not expired by one, also when the
//! restart re-shards it. A log from before (no `access-logged` marker in
//! its shard dir) begins every window again, as it did, and logs that. A
//! refused write slides the window too, and a waiting live reader keeps
//! its stream, and an SSE reader that left lets it go within a window or two.
//! The extensions' sub-resources slide it as the base's reads and writes do.
//! A fork that expired while its source was soft-deleted lets the source go
//! at a restart's first cleaner pass.

mod common;

use std::fs;
use std::thread;
use std::time::{Duration, Instant};

use common::{Server, req, unique_name};

fn create(s: &Server, path: &str, ttl: &str) {
    let headers = [("Content-Type", "text/plain"), ("Stream-TTL", ttl)];
    let r = req(s.addr, "PUT", path, &headers, b"kept");
    assert_eq!(r.status, 201, "{}", r.text());
}

fn read_status(s: &Server, path: &str) -> u16 {
    req(s.addr, "GET", &format!("{path}?offset=-1"), &[], b"").status
}

/// Also when the restart re-shards: some streams move to a new shard dir.
#[test]
fn streams_idle_past_their_ttl_stay_expired_after_a_kill() {
    let mut s = Server::start(&["--cores", "1"]);
    let idle: Vec<String> = (0..8)
        .map(|i| format!("/v1/stream/{}", unique_name(&format!("idle{i}"))))
        .collect();
    let kept = format!("/v1/stream/{}", unique_name("kept"));
    for path in &idle {
        create(&s, path, "2");
    }
    create(&s, &kept, "3600");
    // Past the window and its fifth: recovery's bound on the last access.
    thread::sleep(Duration::from_millis(3_000));
    s.kill();
    s.restart();
    assert_eq!(
        read_status(&s, &idle[0]),
        404,
        "an expired stream came back"
    );
    s.kill();
    s.restart_with(&["--cores", "2"]);
    for path in &idle[1..] {
        assert_eq!(read_status(&s, path), 404, "{path} came back in a re-shard");
    }
    assert_eq!(read_status(&s, &kept), 200);
}

#[test]
fn reads_keep_a_stream_alive_across_a_kill_and_a_reshard() {
    let mut s = Server::start(&["--cores", "1"]);
    let path = format!("/v1/stream/{}", unique_name("read"));
    create(&s, &path, "6");
    let created = Instant::now();
    // Reads alone, every 2 s for 10 s: the creation's window (and half
    // another) is long over, the last read's is not.
    for round in 1..=5 {
        let due = created + Duration::from_secs(2 * round);
        thread::sleep(due.saturating_duration_since(Instant::now()));
        assert_eq!(read_status(&s, &path), 200, "read {round}");
    }
    s.kill();
    s.restart_with(&["--cores", "2"]);
    assert!(
        created.elapsed() < Duration::from_secs(15),
        "the restart took past the last read's window: nothing to check"
    );
    assert_eq!(read_status(&s, &path), 200, "a stream in use expired");
}

#[test]
fn a_log_from_before_access_records_begins_every_window_again() {
    // Under `interval`, the mark waits for the sync of what it vouches for.
    let mut s = Server::start(&["--cores", "1", "--fsync", "interval:200"]);
    let path = format!("/v1/stream/{}", unique_name("legacy"));
    create(&s, &path, "4");
    let created = Instant::now();
    s.kill();
    // As an older rill leaves its shard dir: no marker.
    fs::remove_file(s.data_dir.join("shard-00/access-logged")).expect("the marker");
    // Past the creation's window and its fifth: what a marked log bounds.
    thread::sleep(Duration::from_millis(5_000).saturating_sub(created.elapsed()));
    s.restart();
    assert_eq!(read_status(&s, &path), 200, "a legacy window begins again");
    // The mark follows once the start's access records are synced.
    let marker = s.data_dir.join("shard-00/access-logged");
    let marked = Instant::now();
    while !marker.exists() {
        assert!(marked.elapsed() < Duration::from_secs(10), "no marker");
        thread::sleep(Duration::from_millis(20));
    }
    // The start logged that access, so the next recovery knows of it.
    s.kill();
    s.restart();
    assert_eq!(
        read_status(&s, &path),
        200,
        "the legacy start's access was not logged"
    );
}

/// §5.1: "each read or write operation resets the expiry countdown", a
/// refused write (or a producer's duplicate) too.
#[test]
fn a_refused_write_slides_the_window_too() {
    let s = Server::start(&["--cores", "1"]);
    let path = format!("/v1/stream/{}", unique_name("refused"));
    create(&s, &path, "2");
    let created = Instant::now();
    thread::sleep(Duration::from_millis(1_200));
    let wrong = [("Content-Type", "application/json")];
    assert_eq!(req(s.addr, "POST", &path, &wrong, b"[1]").status, 409);
    thread::sleep(Duration::from_millis(2_400).saturating_sub(created.elapsed()));
    assert_eq!(
        read_status(&s, &path),
        200,
        "the refused write did not slide it"
    );
}

/// §5.1: "a stream with active live readers will not expire". A long-poll
/// waiting past the TTL keeps its stream whatever else names it meanwhile
/// (a bucket's listing or delete, a HEAD; the cleaner's sweeps reap as a
/// HEAD does); once no reader waits, the window runs out as before.
#[test]
fn a_waiting_live_reader_keeps_its_stream() {
    let s = Server::start(&["--cores", "1", "--long-poll-timeout-ms", "3000"]);
    let bucket = format!("/{}", unique_name("watching"));
    assert_eq!(req(s.addr, "PUT", &bucket, &[], b"").status, 201);
    let v1 = format!("/v1/stream/{}", unique_name("watched"));
    let bucketed = format!("{bucket}/watched");
    let listing = format!("{bucket}/streams");
    for path in [&v1, &bucketed] {
        create(&s, path, "1");
    }
    let waiters: Vec<_> = [&v1, &bucketed].map(|path| long_poll(&s, path)).into();
    thread::sleep(Duration::from_millis(1_800));
    let listed = req(s.addr, "GET", &listing, &[], b"");
    assert!(listed.text().contains("watched"), "{}", listed.text());
    assert_eq!(req(s.addr, "DELETE", &bucket, &[], b"").status, 409);
    for path in [&v1, &bucketed] {
        let head = req(s.addr, "HEAD", path, &[], b"");
        assert_eq!(head.status, 200, "{path} expired under a waiting reader");
    }
    for waiter in waiters {
        assert_eq!(waiter.join().unwrap(), 204);
    }
    thread::sleep(Duration::from_millis(1_500));
    for path in [&v1, &bucketed] {
        let head = req(s.addr, "HEAD", path, &[], b"");
        assert_eq!(
            head.status, 404,
            "{path}: no reader left, the window ran out"
        );
    }
}

/// A long-poll at `path`'s tail, on a thread; joins with its status.
fn long_poll(s: &Server, path: &str) -> thread::JoinHandle<u16> {
    let tail = req(s.addr, "HEAD", path, &[], b"");
    let tail = tail.header("stream-next-offset").unwrap();
    let poll = format!("{path}?offset={tail}&live=long-poll");
    let addr = s.addr;
    thread::spawn(move || req(addr, "GET", &poll, &[], b"").status)
}

/// An SSE reader keeps a TTL stream alive; one that left lets it expire
/// within a couple of windows, not at the end of its keep-alive cycle: an
/// idle SSE response of a stream with a short TTL writes a control every
/// half window, which is how a reader that went away is noticed.
#[test]
fn an_sse_reader_that_left_lets_its_ttl_stream_expire() {
    let s = Server::start(&["--cores", "1"]);
    let path = format!("/v1/stream/{}", unique_name("sse-ttl"));
    create(&s, &path, "1");
    let mut reader = common::Conn::open(s.addr);
    let sse = reader.build_request("GET", &format!("{path}?offset=-1&live=sse"), &[], b"");
    reader.send_raw(&sse);
    assert_eq!(reader.read_head().status, 200);
    // Controls keep coming while it reads (the first, then one every half
    // second), and the stream outlives its 1 s window.
    for _ in 0..4 {
        reader.read_chunked_until(b"event: control", Duration::from_secs(2));
    }
    assert_eq!(
        req(s.addr, "HEAD", &path, &[], b"").status,
        200,
        "kept by its reader"
    );
    drop(reader);
    // Noticed at the second write after it left (≤ 1 s), then the window.
    thread::sleep(Duration::from_millis(3_000));
    let head = req(s.addr, "HEAD", &path, &[], b"");
    assert_eq!(head.status, 404, "a reader that left still keeps it");
}

/// A request on a stream's sub-resource: (stream name, method, resource
/// with `{at}` for the stream's tail, headers, body, the status it gets).
type Op<'a> = (
    &'a str,
    &'a str,
    &'a str,
    &'a [(&'a str, &'a str)],
    &'a [u8],
    u16,
);

/// The extensions' reads and writes of a stream slide its window as the
/// base's do (they defer to PROTOCOL.md §5.1): bootstrap, snapshot reads
/// and publishes, retention moves and attribute writes.
#[test]
fn the_extensions_reads_and_writes_slide_the_window_too() {
    let s = Server::start(&["--cores", "2"]);
    let bucket = format!("/{}", unique_name("sliding"));
    assert_eq!(req(s.addr, "PUT", &bucket, &[], b"").status, 201);
    let loro = [("Content-Type", "application/x-loro")];
    let json = [("Content-Type", "application/json")];
    let ops: [Op; 6] = [
        ("bootstrap", "GET", "bootstrap", &[], b"", 200),
        ("latest", "GET", "snapshot", &[], b"", 307),
        ("snapshot", "GET", "snapshot/{at}", &[], b"", 200),
        ("publish", "PUT", "snapshot/{at}", &loro, b"state", 204),
        ("retention", "PUT", "retention/{at}", &[], b"", 204),
        ("attrs", "PUT", "attrs", &json, b"{}", 204),
    ];
    let created = Instant::now();
    let tails: Vec<(String, String)> = ops
        .iter()
        .map(|(name, ..)| {
            let path = format!("{bucket}/{name}");
            create(&s, &path, "4");
            let tail = req(s.addr, "HEAD", &path, &[], b"");
            let at = tail.header("stream-next-offset").unwrap().to_string();
            let snapshot = format!("{path}/snapshot/{at}");
            assert_eq!(req(s.addr, "PUT", &snapshot, &loro, b"state").status, 204);
            (path, at)
        })
        .collect();
    // The requests come 2.4 s into the 4 s window, the check 2.4 s after.
    thread::sleep(Duration::from_millis(2_400).saturating_sub(created.elapsed()));
    for ((name, method, resource, headers, body, want), (path, at)) in ops.iter().zip(&tails) {
        let target = format!("{path}/{}", resource.replace("{at}", at));
        let got = req(s.addr, method, &target, headers, body).status;
        assert_eq!(got, *want, "{name}: {method} {target}");
    }
    thread::sleep(Duration::from_millis(4_800).saturating_sub(created.elapsed()));
    for ((name, ..), (path, _)) in ops.iter().zip(&tails) {
        let head = req(s.addr, "HEAD", path, &[], b"").status;
        assert_eq!(head, 200, "{name} did not slide {path}'s window");
    }
}

#[test]
fn a_fork_that_expired_lets_its_deleted_source_go_at_a_restart() {
    // A source deleted while forked stays, soft-deleted (410), until its
    // last fork goes; an expired fork goes when something reaps it. A
    // restart's first cleaner pass does, though the interval (10 s by
    // default) has not passed: a server restarted often must not hold
    // the source's name for good.
    let mut s = Server::start(&["--cores", "2"]);
    let source = format!("/v1/stream/{}", unique_name("source"));
    let fork = format!("/v1/stream/{}", unique_name("fork"));
    create(&s, &source, "3600");
    let from = [("Stream-Forked-From", source.as_str()), ("Stream-TTL", "1")];
    assert_eq!(req(s.addr, "PUT", &fork, &from, b"").status, 201);
    assert_eq!(req(s.addr, "DELETE", &source, &[], b"").status, 204);
    assert_eq!(read_status(&s, &source), 410, "soft-deleted while forked");
    thread::sleep(Duration::from_millis(2_500));
    s.kill();
    s.restart();
    let began = Instant::now();
    let recreated = loop {
        let r = req(
            s.addr,
            "PUT",
            &source,
            &[("Content-Type", "text/plain")],
            b"",
        );
        if r.status != 409 || began.elapsed() > Duration::from_secs(5) {
            break r.status;
        }
        thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(recreated, 201, "the source's name is still held");
}
