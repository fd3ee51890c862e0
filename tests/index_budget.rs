//! The index budget (issue 4: the ordinal-to-offset index stays in memory
//! within a bounded budget): past `--max-index-bytes`, writes of new
//! messages get 503 with a JSON body and Retry-After while reads go on;
//! retention frees the entries before the retained point (extensions §6.10),
//! after which writes succeed again; a restart counts the same.

mod common;

use common::batch::framed;
use common::{Server, enc, req};

const BUCKET: &str = "budget";
const JSON: [(&str, &str); 1] = [("Content-Type", "application/json")];

fn append(s: &Server, path: &str, i: usize) -> common::Response {
    req(
        s.addr,
        "POST",
        path,
        &JSON,
        format!("{{\"i\":{i}}}").as_bytes(),
    )
}

/// Appends one record at a time until the budget refuses one; returns how
/// many were accepted.
fn fill_until_refused(s: &Server, path: &str) -> usize {
    for i in 0..2000 {
        let r = append(s, path, i);
        if r.status == 503 {
            assert!(r.text().contains("index_budget_full"), "{}", r.text());
            assert!(r.header("retry-after").is_some());
            return i;
        }
        assert_eq!(r.status, 204, "{}", r.text());
    }
    panic!("the index budget never refused an append");
}

/// The server's `rill_index_bytes` (one shard's, with `--cores 1`).
fn index_used(s: &Server) -> u64 {
    let metrics = req(s.addr, "GET", "/v1/metrics", &[], b"").text();
    let used: f64 = metrics
        .lines()
        .find(|l| l.starts_with("rill_index_bytes{"))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .expect("rill_index_bytes");
    used as u64
}

/// Snapshot and retention at the current tail: every entry before it goes.
fn retain_everything(s: &Server, path: &str) {
    let tail = req(s.addr, "HEAD", path, &[], b"");
    let at = enc(tail.header("stream-next-offset").unwrap());
    let snap = req(
        s.addr,
        "PUT",
        &format!("{path}/snapshot/{at}"),
        &[],
        b"state",
    );
    assert_eq!(snap.status, 204, "{}", snap.text());
    let retain = req(s.addr, "PUT", &format!("{path}/retention/{at}"), &[], b"");
    assert_eq!(retain.status, 204, "{}", retain.text());
}

#[test]
fn writes_past_the_budget_get_503_until_retention_frees_entries() {
    let mut s = Server::start(&["--cores", "1", "--max-index-bytes", "8192"]);
    assert_eq!(
        req(s.addr, "PUT", &format!("/{BUCKET}"), &[], b"").status,
        201
    );
    let path = format!("/{BUCKET}/events");
    assert_eq!(req(s.addr, "PUT", &path, &JSON, b"").status, 201);
    let accepted = fill_until_refused(&s, &path);
    // 8 B per record end and 16 B per append's location, after the
    // stream's own share (1 KiB and its key): (8192 - 1037) / 24.
    assert!((280..=300).contains(&accepted), "{accepted} appends fit");
    let read = req(s.addr, "GET", &format!("{path}?offset=-1"), &[], b"");
    assert_eq!(read.status, 200);
    assert_eq!(read.text().lines().count(), accepted);
    let other = format!("/{BUCKET}/other");
    let created = req(s.addr, "PUT", &other, &JSON, b"[1]");
    assert_eq!(created.status, 503, "a create with messages counts too");
    let empty = req(s.addr, "PUT", &format!("{other}-empty"), &JSON, b"");
    assert_eq!(
        empty.status, 503,
        "and so does an empty one: streams take memory"
    );
    // Recovery counts what it rebuilt: still full after a restart.
    s.kill();
    s.restart();
    assert_eq!(append(&s, &path, 0).status, 503);
    retain_everything(&s, &path);
    let refilled = fill_until_refused(&s, &path);
    assert!(
        refilled + 2 >= accepted,
        "after retention only {refilled} fit"
    );
}

/// Streams and their attributes count too: creating streams with large
/// attributes stops at the budget (503, JSON) and a delete makes room.
#[test]
fn streams_and_their_attributes_count_against_the_budget() {
    let s = Server::start(&["--cores", "1", "--max-index-bytes", "65536"]);
    assert_eq!(
        req(s.addr, "PUT", &format!("/{BUCKET}"), &[], b"").status,
        201
    );
    let attrs = format!("{{\"title\":\"{}\"}}", "t".repeat(15_000));
    let create = |i: usize| {
        let headers = [JSON[0], ("Stream-Attrs", attrs.as_str())];
        req(s.addr, "PUT", &format!("/{BUCKET}/s{i}"), &headers, b"")
    };
    let refused = (0..10)
        .find(|&i| create(i).status != 201)
        .expect("the budget refuses one");
    // ~16 KB each (15 KB of attributes, 1 KiB of metadata, the key): four
    // stay under 64 KiB; the fifth would take the budget past it and is
    // refused (a create is measured before it applies).
    assert_eq!(refused, 4, "four streams fit");
    let r = create(refused);
    assert_eq!(r.status, 503);
    assert!(r.text().contains("index_budget_full"), "{}", r.text());
    let deleted = req(s.addr, "DELETE", &format!("/{BUCKET}/s0"), &[], b"");
    assert_eq!(deleted.status, 204);
    assert_eq!(create(refused).status, 201, "a delete made room");
}

/// Full index chunks are bit-packed (appends of one size, written in order,
/// take well under a byte a field instead of 8 and 16): a budget holds
/// many times the appends the unpacked 24 bytes each would allow, and says
/// so in `rill_index_bytes`.
#[test]
fn packed_index_chunks_hold_more_appends() {
    let budget: u64 = 256 << 10;
    let s = Server::start(&["--cores", "1", "--max-index-bytes", &budget.to_string()]);
    assert_eq!(
        req(s.addr, "PUT", &format!("/{BUCKET}"), &[], b"").status,
        201
    );
    let path = format!("/{BUCKET}/packed");
    let text = [("Content-Type", "text/plain")];
    assert_eq!(req(s.addr, "PUT", &path, &text, b"").status, 201);
    // 512 one-byte appends a request (extensions §4 frames: a 4-byte length each).
    let frames = framed(&[&b"x"[..]; 512]);
    let batch = format!("{path}/append-batch");
    let mut accepted = 0;
    loop {
        let r = req(s.addr, "POST", &batch, &text, &frames);
        if r.status == 503 {
            assert!(r.text().contains("index_budget_full"), "{}", r.text());
            break;
        }
        assert_eq!(r.status, 200, "{}", r.text());
        accepted += 512;
        assert!(accepted < 2_000_000, "the budget never refused");
    }
    let unpacked = (budget - 1024) / 24;
    assert!(
        accepted as u64 > unpacked * 5,
        "{accepted} appends fit; unpacked, {unpacked} would"
    );
    // Each request is measured before it applies: the budget holds, and
    // the refused request is the one that would have passed it.
    let used = index_used(&s);
    assert!(
        used <= budget && used + 512 * 24 > budget,
        "{used} of {budget}"
    );
}

/// Expired streams that no request names again are reaped by the cleaner's
/// passes (PROTOCOL.md §5.1): their index budget comes back without anyone
/// touching them.
#[test]
fn expired_streams_give_their_budget_back_unnamed() {
    let s = Server::start(&[
        "--cores",
        "1",
        "--max-index-bytes",
        "65536",
        "--clean-interval-ms",
        "100",
    ]);
    assert_eq!(
        req(s.addr, "PUT", &format!("/{BUCKET}"), &[], b"").status,
        201
    );
    let short = [("Content-Type", "text/plain"), ("Stream-TTL", "1")];
    let mut created = 0;
    while req(
        s.addr,
        "PUT",
        &format!("/{BUCKET}/short-{created}"),
        &short,
        b"x",
    )
    .status
        == 201
    {
        created += 1;
        assert!(created < 1000, "the budget never refused a create");
    }
    // Full: a create is refused until the short-lived streams expire.
    let later = format!("/{BUCKET}/later");
    assert_eq!(req(s.addr, "PUT", &later, &JSON, b"").status, 503);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        match req(s.addr, "PUT", &later, &JSON, b"").status {
            201 => break,
            503 if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            other => panic!("{created} expired streams still hold the budget: {other}"),
        }
    }
}

/// The strings a client chooses for a stream (its content type, its
/// `Stream-Seq`, its Expires-At) count as sent, like its attributes.
#[test]
fn client_chosen_strings_count_against_the_budget() {
    let s = Server::start(&["--cores", "1"]);
    assert_eq!(
        req(s.addr, "PUT", &format!("/{BUCKET}"), &[], b"").status,
        201
    );
    let used = || -> u64 {
        let metrics = req(s.addr, "GET", "/v1/metrics", &[], b"").text();
        metrics
            .lines()
            .find(|l| l.starts_with("rill_index_bytes{"))
            .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .expect("rill_index_bytes") as u64
    };
    let path = format!("/{BUCKET}/seq");
    let long_type = format!("text/plain; x={}", "t".repeat(10_000));
    let before = used();
    assert_eq!(
        req(s.addr, "PUT", &path, &[("Content-Type", &long_type)], b"").status,
        201
    );
    let created = used();
    assert!(created - before > 10_000, "{before} -> {created}");
    let seq = "s".repeat(20_000);
    let headers = [("Content-Type", "text/plain"), ("Stream-Seq", seq.as_str())];
    assert_eq!(req(s.addr, "POST", &path, &headers, b"x").status, 204);
    assert!(used() - created > 20_000);
}

/// Buckets are created by clients too: they count against the budget
/// (extensions §1.2's PUT then gets 503) that streams count against, in
/// `rill_index_bytes` too (each shard holds the whole registry), also after
/// a restart; a delete makes room again.
#[test]
fn buckets_are_bounded_by_the_budget() {
    for cores in [1, 2] {
        let args = ["--cores", &cores.to_string(), "--max-index-bytes", "65536"];
        let mut s = Server::start(&args);
        let mut created = 0;
        let refused = loop {
            let r = req(s.addr, "PUT", &format!("/bucket-{created:05}"), &[], b"");
            if r.status != 201 {
                break r;
            }
            created += 1;
            assert!(created < 1000, "the budget never refused a bucket");
        };
        assert_eq!(refused.status, 503, "{}", refused.text());
        assert!(refused.text().contains("index_budget_full"));
        assert!(
            created > 100 / cores,
            "{cores} shards: only {created} buckets fit"
        );
        for at in ["full", "restarted"] {
            let used = index_used(&s);
            let share = 65_536 / cores;
            assert!(
                used > share * 9 / 10,
                "{at}: rill_index_bytes {used} of {share}"
            );
            let text = [("Content-Type", "text/plain")];
            let stream = req(s.addr, "PUT", "/v1/stream/after-buckets", &text, b"");
            assert_eq!(stream.status, 503, "{at}: streams share the budget");
            if at == "full" {
                s.restart();
            }
        }
        assert_eq!(req(s.addr, "DELETE", "/bucket-00000", &[], b"").status, 204);
        assert_eq!(req(s.addr, "PUT", "/bucket-again", &[], b"").status, 201);
    }
}

/// Idempotent producers' state counts too (PROTOCOL.md §5.2.1 keeps an
/// entry per producer id): a client naming a new producer on each append
/// meets the budget long before `--max-producers-per-stream`.
#[test]
fn producers_count_against_the_budget() {
    let s = Server::start(&["--cores", "1", "--max-index-bytes", "65536"]);
    let path = "/v1/stream/producers";
    let text = [("Content-Type", "text/plain")];
    assert_eq!(req(s.addr, "PUT", path, &text, b"").status, 201);
    let produce = |id: usize, seq: u64| {
        let (id, seq) = (format!("producer-{id}"), seq.to_string());
        let headers = [
            text[0],
            ("Producer-Id", id.as_str()),
            ("Producer-Epoch", "0"),
            ("Producer-Seq", seq.as_str()),
        ];
        req(s.addr, "POST", path, &headers, b"x")
    };
    let refused = (0..2000)
        .find(|&i| produce(i, 0).status != 200)
        .expect("the budget refuses a producer");
    // Without producers counted, ~2,600 one-byte appends fit 64 KiB.
    assert!((50..200).contains(&refused), "{refused} producers fit");
    let r = produce(refused, 0);
    assert_eq!(r.status, 503, "{}", r.text());
    assert!(r.text().contains("index_budget_full"), "{}", r.text());
}

/// A JSON frame of many records is measured by its records, not as one
/// message: the frame that would pass the budget fails alone with 503
/// (extensions §4.3 per-frame status) and the budget holds.
#[test]
fn batch_frames_of_many_records_are_measured_by_their_records() {
    let budget: u64 = 64 << 10;
    let s = Server::start(&["--cores", "1", "--max-index-bytes", &budget.to_string()]);
    assert_eq!(
        req(s.addr, "PUT", &format!("/{BUCKET}"), &[], b"").status,
        201
    );
    let path = format!("/{BUCKET}/records");
    assert_eq!(req(s.addr, "PUT", &path, &JSON, b"").status, 201);
    // 500 records a frame: 4 KB of message ends before their chunk packs.
    let records = format!("[{}1]", "1,".repeat(499));
    let body = framed(&[records.as_bytes(), records.as_bytes()]);
    let batch = format!("{path}/append-batch");
    let refused = (0..5_000).find_map(|_| {
        let r = req(s.addr, "POST", &batch, &JSON, &body);
        if r.status == 503 {
            return Some(r.text());
        }
        assert_eq!(r.status, 200, "{}", r.text());
        r.text().contains("index_budget_full").then(|| r.text())
    });
    let refused = refused.expect("the budget never refused a frame");
    assert!(refused.contains("index_budget_full"), "{refused}");
    let used = index_used(&s);
    assert!(used <= budget, "{used} of {budget}");
}

/// A fork's inherited index counts against the budget like the source's:
/// a fork that would pass it is 503, and the budget holds.
#[test]
fn a_forks_inherited_index_counts_against_the_budget() {
    let budget: u64 = 256 << 10;
    let s = Server::start(&["--cores", "1", "--max-index-bytes", &budget.to_string()]);
    assert_eq!(
        req(s.addr, "PUT", &format!("/{BUCKET}"), &[], b"").status,
        201
    );
    let source = format!("/{BUCKET}/source");
    let text = [("Content-Type", "text/plain")];
    assert_eq!(req(s.addr, "PUT", &source, &text, b"").status, 201);
    let frames = framed(&[&b"x"[..]; 512]);
    while index_used(&s) < budget * 6 / 10 {
        let r = req(
            s.addr,
            "POST",
            &format!("{source}/append-batch"),
            &text,
            &frames,
        );
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let from = [("Stream-Forked-From", source.as_str())];
    let fork = req(s.addr, "PUT", &format!("/{BUCKET}/fork"), &from, b"");
    assert_eq!(fork.status, 503, "{}", fork.text());
    assert!(fork.text().contains("index_budget_full"), "{}", fork.text());
    let used = index_used(&s);
    assert!(used <= budget, "{used} of {budget}");
    let small = format!("/{BUCKET}/small");
    assert_eq!(req(s.addr, "PUT", &small, &text, b"abc").status, 201);
    let from = [("Stream-Forked-From", small.as_str())];
    let fork = req(s.addr, "PUT", &format!("/{BUCKET}/fork"), &from, b"");
    assert_eq!(fork.status, 201, "a small fork still fits: {}", fork.text());
}
