//! Snapshots (extensions §2) against the real binary: publish rules,
//! idempotency by digest, Stream-Snapshot-Match, latest redirect, read,
//! delete rules, HEAD metadata, size limit, survival across restart and
//! SIGKILL mid-publish and mid-retention, and the sweep of blobs no stream refers to.

mod common;

use common::{Server, req};

const BUCKET: &str = "snaps";

/// A server with [`BUCKET`] created.
fn start_with_bucket(args: &[&str]) -> Server {
    let s = Server::start(args);
    assert_eq!(
        req(s.addr, "PUT", &format!("/{BUCKET}"), &[], b"").status,
        201
    );
    s
}

fn offset_after(s: &Server, path: &str, body: &[u8]) -> String {
    let r = req(
        s.addr,
        "POST",
        path,
        &[("Content-Type", "application/json")],
        body,
    );
    assert_eq!(r.status, 204, "{}", r.text());
    r.header("stream-next-offset").unwrap().to_string()
}

#[test]
fn publish_read_replace_and_restart() {
    let mut s = start_with_bucket(&["--cores", "2", "--max-snapshot-bytes", "4096"]);
    let path = format!("/{BUCKET}/doc");
    assert_eq!(
        req(
            s.addr,
            "PUT",
            &path,
            &[("Content-Type", "application/json")],
            b""
        )
        .status,
        201
    );
    assert_eq!(
        req(s.addr, "GET", &format!("{path}/snapshot"), &[], b"").status,
        404
    );
    let first = offset_after(&s, &path, br#"{"op":1}"#);
    let second = offset_after(&s, &path, br#"{"op":2}"#);
    let loro = [("Content-Type", "application/x-loro")];
    let put = |at: &str, headers: &[(&str, &str)], body: &[u8]| {
        req(
            s.addr,
            "PUT",
            &format!("{path}/snapshot/{at}"),
            headers,
            body,
        )
    };
    let published = put(&first, &loro, b"state-after-op-1");
    assert_eq!(published.status, 204);
    let digest = published
        .header("stream-snapshot-digest")
        .unwrap()
        .to_string();
    // Idempotent repeat: same digest; different content at the same offset: 409.
    assert_eq!(
        put(&first, &loro, b"state-after-op-1").header("stream-snapshot-digest"),
        Some(digest.as_str())
    );
    assert_eq!(put(&first, &loro, b"other").status, 409);
    // Stream-Snapshot-Match must name the visible snapshot.
    assert_eq!(
        put(
            &second,
            &[loro[0], ("Stream-Snapshot-Match", "nope")],
            b"s2"
        )
        .status,
        409
    );
    // Beyond the tail: 409; not a boundary: 400; garbage: 400; too large: 413.
    let beyond = rill::protocol::offset::format(1 << 20);
    assert_eq!(put(&beyond, &loro, b"x").status, 409);
    let inside =
        rill::protocol::offset::format(rill::protocol::offset::parse_token(&first).unwrap() - 1);
    assert_eq!(put(&inside, &loro, b"x").status, 400);
    assert_eq!(put("abc", &loro, b"x").status, 400);
    assert_eq!(put(&second, &loro, &vec![b'x'; 5000]).status, 413);
    // Replace with a newer snapshot, matched on the current digest.
    let newer = put(
        &second,
        &[loro[0], ("Stream-Snapshot-Match", &digest)],
        b"state-after-op-2",
    );
    assert_eq!(newer.status, 204);
    let newer_digest = newer.header("stream-snapshot-digest").unwrap().to_string();
    // Its retry, with the same (now stale) Stream-Snapshot-Match, is a
    // repeat and succeeds (§2.2 "MUST succeed and return the same digest").
    let retry = put(
        &second,
        &[loro[0], ("Stream-Snapshot-Match", &digest)],
        b"state-after-op-2",
    );
    assert_eq!(retry.status, 204, "{}", retry.text());
    assert_eq!(
        retry.header("stream-snapshot-digest"),
        Some(newer_digest.as_str())
    );
    // The position is named once: a path offset and ?record= together: 400.
    let both = put(&format!("{second}?record=1"), &loro, b"state-after-op-2");
    assert_eq!(both.status, 400, "{}", both.text());
    let latest = req(s.addr, "GET", &format!("{path}/snapshot"), &[], b"");
    assert_eq!(latest.status, 307);
    assert!(
        latest
            .header("location")
            .unwrap()
            .ends_with(&format!("/snapshot/{second}"))
    );
    let head = req(s.addr, "HEAD", &path, &[], b"");
    assert_eq!(head.header("stream-snapshot-offset"), Some(second.as_str()));
    assert_eq!(
        head.header("stream-snapshot-digest"),
        Some(newer_digest.as_str())
    );
    // The superseded one is gone; the latest cannot be deleted.
    assert_eq!(
        req(s.addr, "GET", &format!("{path}/snapshot/{first}"), &[], b"").status,
        404
    );
    assert_eq!(
        req(
            s.addr,
            "DELETE",
            &format!("{path}/snapshot/{first}"),
            &[],
            b""
        )
        .status,
        404
    );
    assert_eq!(
        req(
            s.addr,
            "DELETE",
            &format!("{path}/snapshot/{second}"),
            &[],
            b""
        )
        .status,
        409
    );
    // Appends are unaffected, and everything survives a restart.
    offset_after(&s, &path, br#"{"op":3}"#);
    s.restart();
    let read = req(
        s.addr,
        "GET",
        &format!("{path}/snapshot/{second}"),
        &[],
        b"",
    );
    assert_eq!(read.status, 200);
    assert_eq!(read.body, b"state-after-op-2");
    assert_eq!(read.header("content-type"), Some("application/x-loro"));
    assert_eq!(
        read.header("stream-snapshot-digest"),
        Some(newer_digest.as_str())
    );
    assert_eq!(read.header("stream-next-offset"), Some(second.as_str()));
    assert_eq!(read.header("stream-up-to-date"), Some("false"));
    let all = req(s.addr, "GET", &path, &[], b"");
    assert_eq!(all.body, b"{\"op\":1}\n{\"op\":2}\n{\"op\":3}\n");
}

#[test]
fn missing_streams_and_methods() {
    let s = start_with_bucket(&["--cores", "1"]);
    let zero = rill::protocol::offset::format(0);
    assert_eq!(
        req(
            s.addr,
            "PUT",
            &format!("/{BUCKET}/none/snapshot/{zero}"),
            &[],
            b"x"
        )
        .status,
        404
    );
    assert_eq!(
        req(s.addr, "GET", &format!("/{BUCKET}/none/snapshot"), &[], b"").status,
        404
    );
    let path = format!("/{BUCKET}/bin");
    assert_eq!(req(s.addr, "PUT", &path, &[], b"abc").status, 201);
    // A snapshot at offset 0 (the empty prefix) is a boundary.
    assert_eq!(
        req(s.addr, "PUT", &format!("{path}/snapshot/{zero}"), &[], b"").status,
        204
    );
    assert_eq!(
        req(s.addr, "POST", &format!("{path}/snapshot"), &[], b"").status,
        405
    );
    // RFC 9110 §15.5.6: a 405's Allow names what the resource takes, and
    // each method it names is not refused as not allowed.
    let resources = [
        (format!("{path}/snapshot"), "DELETE"),
        (format!("{path}/snapshot/{zero}"), "POST"),
        (format!("{path}/attrs"), "POST"),
    ];
    for (resource, refused) in resources {
        let r = req(s.addr, refused, &resource, &[], b"");
        assert_eq!(r.status, 405, "{refused} {resource}");
        let allow = r.header("allow").expect("Allow on a 405").to_string();
        assert!(!allow.contains(refused), "{refused} {resource}: {allow}");
        let allowed: Vec<&str> = allow.split(", ").collect();
        for method in ["GET", "HEAD", "PUT", "POST"] {
            let taken = req(s.addr, method, &resource, &[], b"").status != 405;
            let named = allowed.contains(&method);
            assert_eq!(taken, named, "{method} {resource}, Allow: {allow}");
        }
    }
}

#[test]
fn retention_needs_a_snapshot_and_makes_older_offsets_gone() {
    let mut s = start_with_bucket(&[
        "--cores",
        "2",
        "--segment-bytes",
        "262144",
        "--max-body-bytes",
        "65536",
    ]);
    let path = format!("/{BUCKET}/kept");
    assert_eq!(
        req(
            s.addr,
            "PUT",
            &path,
            &[("Content-Type", "application/json")],
            b""
        )
        .status,
        201
    );
    let first = offset_after(&s, &path, br#"{"op":1}"#);
    let second = offset_after(&s, &path, br#"{"op":2}"#);
    let retain = |at: &str| req(s.addr, "PUT", &format!("{path}/retention/{at}"), &[], b"").status;
    // Not beyond the latest snapshot (there is none yet).
    assert_eq!(retain(&first), 409);
    assert_eq!(
        req(
            s.addr,
            "PUT",
            &format!("{path}/snapshot/{first}"),
            &[],
            b"snap-1"
        )
        .status,
        204
    );
    let inside =
        rill::protocol::offset::format(rill::protocol::offset::parse_token(&first).unwrap() - 1);
    assert_eq!(retain(&inside), 400, "not on a message boundary");
    assert_eq!(retain(&second), 409, "newer than the latest snapshot");
    assert_eq!(retain(&first), 204);
    assert_eq!(retain(&first), 204, "idempotent");
    let zero = rill::protocol::offset::format(0);
    assert_eq!(retain(&zero), 409, "backward");
    // Older offsets are gone, and so is the beginning (-1, or no offset,
    // in every read mode): a client reading from the start is told to
    // bootstrap, and where the retained data starts.
    assert_eq!(
        req(s.addr, "GET", &format!("{path}?offset={zero}"), &[], b"").status,
        410
    );
    for query in [
        "",
        "?offset=-1",
        "?offset=-1&live=long-poll",
        "?offset=-1&live=sse",
    ] {
        let r = req(s.addr, "GET", &format!("{path}{query}"), &[], b"");
        assert_eq!(r.status, 410, "{query}: {}", r.text());
        assert!(r.text().contains("offset_gone"), "{query}: {}", r.text());
        assert_eq!(
            r.header("stream-next-offset"),
            Some(first.as_str()),
            "{query}"
        );
    }
    assert_eq!(
        req(
            s.addr,
            "PUT",
            &format!("{path}/snapshot/{zero}"),
            &[],
            b"old"
        )
        .status,
        410
    );
    // Every offset before the retained one is gone, message boundary or not.
    let snapshot_inside = format!("{path}/snapshot/{inside}");
    assert_eq!(
        req(s.addr, "PUT", &snapshot_inside, &[], b"old").status,
        410
    );
    assert_eq!(retain(&inside), 409, "backward, inside a message");
    assert_eq!(
        req(s.addr, "GET", &format!("{path}?offset={first}"), &[], b"").body,
        b"{\"op\":2}\n"
    );
    s.restart();
    assert_eq!(
        req(s.addr, "GET", &format!("{path}?offset={zero}"), &[], b"").status,
        410
    );
    assert_eq!(req(s.addr, "GET", &path, &[], b"").status, 410);
    offset_after(&s, &path, br#"{"op":3}"#);
    assert_eq!(
        req(s.addr, "GET", &format!("{path}?offset={first}"), &[], b"").body,
        b"{\"op\":2}\n{\"op\":3}\n"
    );
}

/// The snapshot blob files under every shard of `s`'s data dir.
fn blob_files(s: &Server) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for shard in std::fs::read_dir(&s.data_dir).unwrap().flatten() {
        if let Ok(blobs) = std::fs::read_dir(shard.path().join("snapshots")) {
            files.extend(blobs.flatten().map(|b| b.path()));
        }
    }
    files.sort();
    files
}

#[test]
fn blobs_of_deleted_streams_are_swept_while_running() {
    let s = start_with_bucket(&["--cores", "1", "--clean-interval-ms", "50"]);
    let json = [("Content-Type", "application/json")];
    let publish = |path: &str, body: &[u8]| {
        assert_eq!(req(s.addr, "PUT", path, &json, b"").status, 201);
        let at = offset_after(&s, path, br#"{"op":1}"#);
        let r = req(s.addr, "PUT", &format!("{path}/snapshot/{at}"), &json, body);
        assert_eq!(r.status, 204, "{}", r.text());
        at
    };
    let gone = format!("/{BUCKET}/gone");
    let kept = format!("/{BUCKET}/kept");
    publish(&gone, br#"{"doomed":true}"#);
    let kept_at = publish(&kept, br#"{"kept":true}"#);
    assert_eq!(blob_files(&s).len(), 2);
    assert_eq!(req(s.addr, "DELETE", &gone, &[], b"").status, 204);
    // The cleaner pass runs every 50 ms; wait for the sweep, not a duration.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while blob_files(&s).len() > 1 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    assert_eq!(blob_files(&s).len(), 1, "the deleted stream's blob stays");
    // The live stream's snapshot is untouched by the sweeps.
    let r = req(
        s.addr,
        "GET",
        &format!("{kept}/snapshot/{kept_at}"),
        &[],
        b"",
    );
    assert_eq!(r.status, 200);
    assert_eq!(r.body, br#"{"kept":true}"#);
}

/// Appends an op and publishes `state-{n}` at the offset after it (then,
/// with `retain`, moves retention there), for n = start.. until the server
/// goes away; returns the last n whose steps were all acknowledged, and
/// the next n.
fn publish_until_gone(
    addr: std::net::SocketAddr,
    path: &str,
    start: u64,
    retain: bool,
) -> (Option<u64>, u64) {
    let mut conn = common::Conn::open(addr);
    let json = [("Content-Type", "application/json")];
    let mut acked = None;
    for n in start.. {
        let op = format!(r#"{{"op":{n}}}"#);
        let Ok(r) = conn.try_request("POST", path, &json, op.as_bytes()) else {
            return (acked, n);
        };
        let Some(at) = r.header("stream-next-offset").filter(|_| r.status == 204) else {
            return (acked, n);
        };
        let state = format!("state-{n}");
        let put = conn.try_request(
            "PUT",
            &format!("{path}/snapshot/{at}"),
            &[],
            state.as_bytes(),
        );
        if !matches!(put, Ok(r) if r.status == 204) {
            return (acked, n);
        }
        if retain {
            let moved = conn.try_request("PUT", &format!("{path}/retention/{at}"), &[], b"");
            if !matches!(moved, Ok(r) if r.status == 204) {
                return (acked, n);
            }
        }
        acked = Some(n);
    }
    unreachable!()
}

/// Four rounds of [`publish_until_gone`] on a new JSON stream `path`, each
/// ended by a SIGKILL and restart; after each restart, once any round was
/// acknowledged, `check(server, round, newest acknowledged n)` runs.
fn publish_through_kills(path: &str, retain: bool, mut check: impl FnMut(&Server, u64, u64)) {
    let mut s = start_with_bucket(&["--cores", "1"]);
    let json = [("Content-Type", "application/json")];
    assert_eq!(req(s.addr, "PUT", path, &json, b"").status, 201);
    let mut next = 0;
    let mut newest_acked = None;
    for round in 0..4u64 {
        let (addr, p) = (s.addr, path.to_string());
        let worker = std::thread::spawn(move || publish_until_gone(addr, &p, next, retain));
        std::thread::sleep(std::time::Duration::from_millis(60 + 40 * round));
        s.restart();
        let (acked, n) = worker.join().unwrap();
        newest_acked = acked.or(newest_acked);
        next = n + 1;
        if let Some(newest) = newest_acked {
            check(&s, round, newest);
        }
    }
    assert!(newest_acked.is_some(), "nothing was acknowledged");
}

#[test]
fn sigkill_during_publishes_keeps_a_readable_latest_snapshot() {
    let path = format!("/{BUCKET}/crashy");
    publish_through_kills(&path, false, |s, round, newest| {
        let latest = req(s.addr, "GET", &format!("{path}/snapshot"), &[], b"");
        assert_eq!(latest.status, 307, "round {round}: {}", latest.text());
        let location = latest.header("location").unwrap().to_string();
        let read = req(s.addr, "GET", &location, &[], b"");
        assert_eq!(read.status, 200, "round {round}: {}", read.text());
        let text = read.text();
        let k: u64 = text.strip_prefix("state-").unwrap().parse().unwrap();
        assert!(
            k >= newest,
            "round {round}: state-{k} older than acked {newest}"
        );
    });
}

#[test]
fn sigkill_during_retention_keeps_retained_data_contiguous() {
    let path = format!("/{BUCKET}/trimmed");
    let zero = format!("{path}?offset={}", rill::protocol::offset::format(0));
    publish_through_kills(&path, true, |s, round, newest| {
        assert_eq!(req(s.addr, "GET", &zero, &[], b"").status, 410);
        // From the retained offset (the 410 for -1 names it): the ops after
        // it, contiguous; retention never went back before the last
        // acknowledged move.
        let gone = req(s.addr, "GET", &path, &[], b"");
        assert_eq!(gone.status, 410, "round {round}: {}", gone.text());
        let retained = gone
            .header("stream-next-offset")
            .expect("the retained offset");
        let all = req(
            s.addr,
            "GET",
            &format!("{path}?offset={retained}"),
            &[],
            b"",
        );
        assert_eq!(all.status, 200, "round {round}: {}", all.text());
        let ops: Vec<u64> = all
            .text()
            .lines()
            .map(|l| {
                l.trim_start_matches(r#"{"op":"#)
                    .trim_end_matches('}')
                    .parse()
                    .unwrap()
            })
            .collect();
        if let Some(&first) = ops.first() {
            assert!(
                first > newest,
                "round {round}: op {first} kept after retention at {newest}"
            );
        }
        assert!(
            // A round's last op may be lost unacknowledged; the next starts after it.
            ops.windows(2).all(|w| w[1] == w[0] + 1 || w[1] == w[0] + 2),
            "round {round}: ops out of order: {ops:?}"
        );
    });
}

/// Percent-encodes every byte, as a client may do with any offset.
fn encode_all(s: &str) -> String {
    s.bytes().map(|b| format!("%{b:02X}")).collect()
}

/// extensions §8: offsets in path segments are URL-decoded, so a fully
/// percent-encoded offset names the same snapshot and retention point.
#[test]
fn offsets_in_path_segments_are_url_decoded() {
    let s = start_with_bucket(&["--cores", "1"]);
    let path = format!("/{BUCKET}/encoded");
    let json = [("Content-Type", "application/json")];
    assert_eq!(req(s.addr, "PUT", &path, &json, b"").status, 201);
    let at = offset_after(&s, &path, br#"{"op":1}"#);
    let encoded = encode_all(&at);
    assert_ne!(encoded, at);
    let publish = req(
        s.addr,
        "PUT",
        &format!("{path}/snapshot/{encoded}"),
        &[("Content-Type", "text/plain")],
        b"state",
    );
    assert_eq!(publish.status, 204, "{}", publish.text());
    let read = req(
        s.addr,
        "GET",
        &format!("{path}/snapshot/{encoded}"),
        &[],
        b"",
    );
    assert_eq!((read.status, read.body.as_slice()), (200, &b"state"[..]));
    assert_eq!(read.header("stream-snapshot-offset"), Some(at.as_str()));
    let retain = req(
        s.addr,
        "PUT",
        &format!("{path}/retention/{encoded}"),
        &[],
        b"",
    );
    assert_eq!(retain.status, 204, "{}", retain.text());
    let before = req(
        s.addr,
        "GET",
        &format!("{path}?offset=0000000000000000_0000000000000000"),
        &[],
        b"",
    );
    assert_eq!(before.status, 410);
    let bad = req(s.addr, "GET", &format!("{path}/snapshot/%ZZ"), &[], b"");
    assert_eq!(bad.status, 400);
}

/// Re-sharding (another `--cores` at a restart) moves streams between
/// shards: their snapshot blobs go with them, readable and bootstrapped.
#[test]
fn snapshots_follow_their_streams_across_resharding() {
    let mut s = start_with_bucket(&["--cores", "3"]);
    let json = [("Content-Type", "application/json")];
    let state = [("Content-Type", "application/x-state")];
    // Eight streams: with three shards and then one, most change owner.
    let published: Vec<(String, String, Vec<u8>)> = (0..8)
        .map(|i| {
            let path = format!("/{BUCKET}/moving-{i}");
            assert_eq!(req(s.addr, "PUT", &path, &json, b"").status, 201);
            let at = offset_after(&s, &path, format!("{{\"i\":{i}}}").as_bytes());
            let blob = format!("state {i}").into_bytes();
            let url = format!("{path}/snapshot/{at}");
            assert_eq!(req(s.addr, "PUT", &url, &state, &blob).status, 204);
            (path, at, blob)
        })
        .collect();
    for cores in ["1", "2"] {
        s.restart_with(&["--cores", cores]);
        for (path, at, blob) in &published {
            let r = req(s.addr, "GET", &format!("{path}/snapshot/{at}"), &[], b"");
            assert_eq!((r.status, &r.body), (200, blob), "{path} on {cores} cores");
        }
    }
}

/// §2.2: "Publishing different content at an already-published offset
/// MUST return 409". Two publishes racing at one offset (a small one and a
/// large one, as a client retrying with new state might send): one wins,
/// the other is a conflict (or, with the same body, a repeat), and the
/// blob served is the winner's.
#[test]
fn racing_publishes_at_one_offset_have_one_winner() {
    let s = start_with_bucket(&["--cores", "2"]);
    let text = [("Content-Type", "text/plain")];
    for round in 0..30 {
        let path = format!("/{BUCKET}/race-{round}");
        let created = req(s.addr, "PUT", &path, &text, b"hello");
        assert_eq!(created.status, 201);
        let url = format!(
            "{path}/snapshot/{}",
            created.header("stream-next-offset").unwrap()
        );
        let same = round % 5 == 0;
        let bodies: Vec<(Vec<u8>, &str)> = match same {
            true => vec![(vec![b'S'; 300_000], "application/x-s"); 2],
            false => vec![
                (vec![b'b'; 300_000], "application/x-big"),
                (vec![b'a'; 100], "application/x-small"),
            ],
        };
        let racers: Vec<_> = bodies
            .iter()
            .cloned()
            .map(|(body, ct)| {
                let (addr, url) = (s.addr, url.clone());
                std::thread::spawn(move || {
                    req(addr, "PUT", &url, &[("Content-Type", ct)], &body).status
                })
            })
            .collect();
        let statuses: Vec<u16> = racers.into_iter().map(|r| r.join().unwrap()).collect();
        let blob = req(s.addr, "GET", &url, &[], b"");
        assert_eq!(blob.status, 200, "round {round}");
        match same {
            true => assert_eq!(statuses, [204, 204], "round {round}: repeats"),
            false => {
                let winner = statuses.iter().position(|&s| s == 204).expect("a winner");
                let mut sorted = statuses.clone();
                sorted.sort();
                assert_eq!(sorted, [204, 409], "round {round}");
                assert_eq!(
                    blob.body, bodies[winner].0,
                    "round {round}: the winner's blob"
                );
                assert_eq!(blob.header("content-type"), Some(bodies[winner].1));
            }
        }
    }
}

/// Publishers that read the tail, then publish there, while others append:
/// some publish at an offset a newer snapshot already superseded, which
/// makes it visible again (its blob written anew). The visible snapshot's
/// blob must never go missing: no bootstrap 503, the blob readable at the end.
#[test]
fn publishes_at_stale_tails_keep_the_visible_blob() {
    let s = start_with_bucket(&["--cores", "1"]);
    let path = format!("/{BUCKET}/stale");
    let text = [("Content-Type", "text/plain")];
    assert_eq!(req(s.addr, "PUT", &path, &text, b"init|").status, 201);
    let stop = std::time::Instant::now() + std::time::Duration::from_secs(3);
    let workers: Vec<_> = (0..3)
        .map(|w| {
            let (addr, path) = (s.addr, path.clone());
            std::thread::spawn(move || {
                let mut conn = common::Conn::open(addr);
                let mut turn = w;
                while std::time::Instant::now() < stop {
                    turn += 1;
                    if turn % 2 == 0 {
                        conn.request("POST", &path, &[("Content-Type", "text/plain")], b"d|");
                        continue;
                    }
                    let head = conn.request("HEAD", &path, &[], b"");
                    let tail = head.header("stream-next-offset").unwrap().to_string();
                    let url = format!("{path}/snapshot/{tail}");
                    let r = conn.request("PUT", &url, &[("Content-Type", "text/plain")], b"snap");
                    assert!(matches!(r.status, 204 | 409), "{} {}", r.status, r.text());
                }
            })
        })
        .collect();
    let mut conn = common::Conn::open(s.addr);
    let mut bootstraps = 0;
    while std::time::Instant::now() < stop {
        let r = conn.request("GET", &format!("{path}/bootstrap"), &[], b"");
        assert_ne!(r.status, 503, "bootstrap {bootstraps}: {}", r.text());
        bootstraps += 1;
    }
    workers.into_iter().for_each(|w| w.join().unwrap());
    let head = req(s.addr, "HEAD", &path, &[], b"");
    let visible = head
        .header("stream-snapshot-offset")
        .expect("a visible snapshot");
    let blob = req(
        s.addr,
        "GET",
        &format!("{path}/snapshot/{visible}"),
        &[],
        b"",
    );
    assert_eq!((blob.status, blob.body.as_slice()), (200, &b"snap"[..]));
}

/// Extensions §6.10 with §6.7's rule: a snapshot read's
/// `Stream-Record-Next` names the boundary its `Stream-Next-Offset` does
/// (the snapshot's), so a client resuming by record after applying it
/// reads the records after the snapshot; HEAD still names the tail.
#[test]
fn a_snapshot_read_names_its_own_record_boundary() {
    let s = start_with_bucket(&["--cores", "1"]);
    let path = format!("/{BUCKET}/records");
    let json = [("Content-Type", "application/json")];
    assert_eq!(
        req(s.addr, "PUT", &path, &json, b"[0,1,2,3,4,5]").status,
        201
    );
    let state = [("Content-Type", "application/x-state")];
    let publish = req(
        s.addr,
        "PUT",
        &format!("{path}/snapshot?record=2"),
        &state,
        b"S",
    );
    assert_eq!(publish.status, 204, "{}", publish.text());
    let head = req(s.addr, "HEAD", &path, &[], b"");
    let at = head.header("stream-snapshot-offset").unwrap().to_string();
    for method in ["GET", "HEAD"] {
        let read = req(s.addr, method, &format!("{path}/snapshot/{at}"), &[], b"");
        assert_eq!(read.status, 200, "{method}");
        assert_eq!(read.header("stream-next-offset"), Some(at.as_str()));
        assert_eq!(read.header("stream-record-next"), Some("2"), "{method}");
        assert_eq!(read.header("stream-record-first"), Some("0"), "{method}");
    }
    let resumed = req(s.addr, "GET", &format!("{path}?record=2"), &[], b"");
    assert_eq!(resumed.body, b"2\n3\n4\n5\n", "{}", resumed.text());
    let head = req(s.addr, "HEAD", &path, &[], b"");
    assert_eq!(head.header("stream-record-next"), Some("6"));
}
