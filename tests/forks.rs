//! Stream forks (PROTOCOL.md §4.2) against the real binary, beyond what the
//! conformance suite covers (HTTP behaviour on `/v1/stream` without
//! restarts): durability of copy-on-fork and of soft deletes across SIGKILL
//! and restart, on both URL surfaces (`/v1/stream/...` and bucketed
//! `/{bucket}/{stream}`), with forks placed on the source's shard and on the
//! other one (copied over the mesh). Covers forks at the tail, mid, zero and
//! sub-offsets, chains of forks, inherited lifetimes and content types,
//! idempotent re-create after restart, the soft-delete status matrix and its
//! cascade (also when a SIGKILL loses the nudge), large (multi-page) copies,
//! SIGKILLs in the middle of fork copies (no partial fork), segment cleaning
//! under forks, and JSON record ordinals (extensions §6) continuing on forks.

mod common;
mod forks_helpers;
mod records_helpers;

use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use common::{Conn, Server};
use forks_helpers::*;
use records_helpers::{first_next, num, range, records_from, values};

/// One shard whose segments hold a 64 KiB body and its head, no more.
const SMALL_SEGMENTS: [&str; 6] = [
    "--cores",
    "1",
    "--max-body-bytes",
    "65536",
    "--segment-bytes",
    "131072",
];

// -------------------------------------------------------------------- tests

#[test]
fn forks_survive_sigkill() {
    let mut s = start(&["--cores", "2"]);
    let mut all: Vec<Tracked> = Vec::new();
    let lifetimes: [(&str, &Headers); 3] = [
        (TEXT, &[("Stream-TTL", "86400")]),
        (BIN, &[("Stream-Expires-At", "2099-01-02T03:04:05.678Z")]),
        (JSON, &[]),
    ];
    let sources = SURFACES.map(|p| lifetimes.map(|l| (p, l)));
    for (prefix, (ct, life)) in sources.into_iter().flatten() {
        let (mut src, mid, units) = source(&s, prefix, ct, life);
        let (sub, own_ttl): (usize, &Headers) = match ct {
            JSON => (1, &[]),
            TEXT => (3, &[("Stream-TTL", "3600")]),
            _ => (3, &[]),
        };
        let sub_text = sub.to_string();
        let (mid, sub_text) = (mid.as_str(), sub_text.as_str());
        let n = src.data.len();
        let mut tail = src.fork(&s, "tail", 1, own_ttl, n);
        let mut half = src.fork(&s, "mid", 0, &[(FO, mid)], units);
        let mut zero = src.fork(&s, "zero", 1, &[(FO, ZERO)], 0);
        let at_sub = [(FO, mid), (SUB, sub_text)];
        let mut cut = src.fork(&s, "sub", 0, &at_sub, units + sub);
        let first_level = [&mut tail, &mut half, &mut zero, &mut cut];
        for (i, f) in first_level.into_iter().enumerate() {
            f.append(&s, i as u8);
        }
        // A chain: src <- tail <- l2 <- l3, each with appends of its own.
        let mut l2 = tail.fork(&s, "l2", 0, &[], tail.data.len());
        let at = next(&l2.append(&s, 10).0);
        let mut l3 = l2.fork(&s, "l3", 1, &[(FO, &at)], l2.data.len());
        l2.append(&s, 11);
        l3.append(&s, 12);
        src.append(&s, 13);
        for f in [&tail, &half, &zero, &cut, &l2, &l3] {
            f.check(&s, "after the source and the forks diverged");
        }
        // Lifetimes are inherited unless the fork asks for its own.
        let inherited = src.lifetime(&s);
        let own = [Some("3600".to_string()), None];
        let own = if ct == TEXT { &own } else { &inherited };
        for (f, want) in [&half, &zero, &cut, &tail, &l2, &l3].iter().zip(0..) {
            let want = if want < 3 { &inherited } else { own };
            assert_eq!(&f.lifetime(&s), want, "{}", f.path);
        }
        all.extend([src, tail, half, zero, cut, l2, l3]);
    }
    let before: Vec<View> = all.iter().map(|t| view(&s, &t.path)).collect();
    s.kill();
    s.restart();
    for (t, was) in all.iter_mut().zip(&before) {
        assert_eq!(&view(&s, &t.path), was, "{} after SIGKILL", t.path);
        // Appends continue at the same offsets and record ordinals.
        let (r, piece) = t.append(&s, 20);
        let (body, _, _) = read_from(&s, &t.path, &was.2);
        piece.check(&t.path, &body, &format!("{}: from the old tail", t.path));
        if t.ct == JSON {
            let old_next = was.0[6].as_ref().unwrap();
            assert_eq!(&num(&r, "stream-record-start").to_string(), old_next);
        }
        t.check(&s, "appended after SIGKILL");
        if t.headers.is_empty() {
            continue;
        }
        t.recreate_is(&s, &[], 200);
        t.recreate_is(&s, &[("Content-Type", t.ct)], 200);
        t.recreate_is(&s, &[("Content-Type", "text/html")], 409);
        // An omitted sub-offset is 0; any other one is another fork.
        t.recreate_is(&s, &[(SUB, "0")], if t.has(SUB) { 409 } else { 200 });
        t.recreate_is(&s, &[(SUB, if t.has(SUB) { "2" } else { "1" })], 409);
        if t.has(FO) {
            t.recreate_is(&s, &[(FO, ONE)], 409);
        }
    }
}

#[test]
fn soft_delete_survives_restart() {
    // A short cleaner interval: its pass collects what a SIGKILL left.
    let mut s = start(&["--cores", "2", "--clean-interval-ms", "200"]);
    let (mut pairs, mut chains) = (Vec::new(), Vec::new());
    for prefix in SURFACES {
        // A source with two forks.
        let (src, _, _) = source(&s, prefix, TEXT, &[]);
        let mut f1 = src.fork(&s, "f1", 0, &[], src.data.len());
        let mut f2 = src.fork(&s, "f2", 1, &[], src.data.len());
        f1.append(&s, 1);
        f2.append(&s, 2);
        must(&s, "DELETE", &src.path, &[], b"", 204);
        assert_soft_deleted(&s, &src.path, "after DELETE");
        f1.check(&s, "fork of a soft-deleted source");
        pairs.push((src, f1, f2));
        // A chain L0 <- L1 <- L2, L0 and L1 deleted.
        let (l0, _, _) = source(&s, prefix, TEXT, &[]);
        let mut l1 = l0.fork(&s, "l1", 1, &[], l0.data.len());
        l1.append(&s, 1);
        let mut l2 = l1.fork(&s, "l2", 0, &[], l1.data.len());
        l2.append(&s, 2);
        must(&s, "DELETE", &l0.path, &[], b"", 204);
        must(&s, "DELETE", &l1.path, &[], b"", 204);
        chains.push((l0, l1, l2));
    }
    s.kill();
    s.restart();
    for (src, f1, f2) in &pairs {
        assert_soft_deleted(&s, &src.path, "after SIGKILL");
        f1.check(&s, "after SIGKILL");
        f2.check(&s, "after SIGKILL");
        must(&s, "DELETE", &f1.path, &[], b"", 204);
        assert_eq!(status(&s, "HEAD", &f1.path), 404, "gone at once");
        // Time for a wrong collection to happen: the source still has f2.
        thread::sleep(Duration::from_millis(500));
        assert_soft_deleted(&s, &src.path, "with one fork left");
        f2.check(&s, "the other fork");
        must(&s, "DELETE", &f2.path, &[], b"", 204);
        wait_status(&s, &src.path, 404, "the source without forks");
    }
    for (i, (l0, l1, l2)) in chains.iter().enumerate() {
        assert_soft_deleted(&s, &l0.path, "L0 after SIGKILL");
        assert_soft_deleted(&s, &l1.path, "L1 after SIGKILL");
        l2.check(&s, "L2 reads through soft-deleted L1 and L0");
        must(&s, "DELETE", &l2.path, &[], b"", 204);
        assert_eq!(status(&s, "HEAD", &l2.path), 404, "L2 gone at once");
        if i == 1 {
            // SIGKILL right after the last fork's delete: the cascade
            // still completes after the restart.
            s.kill();
            s.restart();
        }
        wait_status(&s, &l1.path, 404, "L1 collected");
        wait_status(&s, &l0.path, 404, "L0 collected");
    }
    s.restart();
    let chained = chains.iter().flat_map(|(l0, l1, l2)| [l0, l1, l2]);
    for t in pairs.iter().map(|(src, _, _)| src).chain(chained) {
        assert_eq!(status(&s, "HEAD", &t.path), 404, "{}", t.path);
    }
    for (src, _, _) in pairs.iter().chain(&chains) {
        must(&s, "PUT", &src.path, &[("Content-Type", TEXT)], b"new", 201);
        assert_eq!(read_from(&s, &src.path, "-1").0, b"new");
    }
}

#[test]
fn fork_of_a_large_source_is_copied_whole() {
    let mut s = start(&["--cores", "2"]);
    let on = |tag: &str, shard: usize| path_on(SURFACES[0], tag, shard);
    let src = on("large", 0);
    let (data, offsets) = big_source(&s, &src, 20);
    let half = 10 * MIB;
    let [tail, mid, sub] = [on("tail", 1), on("mid", 0), on("sub", 1)];
    expect(&fork(&s, &tail, &src, &[]), 201, "fork at the tail");
    let at = [(FO, offsets[9].as_str())];
    expect(&fork(&s, &mid, &src, &at), 201, "fork at 10 MiB");
    let at_sub = [at[0], (SUB, "12345")];
    expect(
        &fork(&s, &sub, &src, &at_sub),
        201,
        "fork at 10 MiB + 12345",
    );
    let cases = [
        (&src, &data[..], Some(&offsets[19])),
        (&tail, &data[..], Some(&offsets[19])),
        (&mid, &data[..half], Some(&offsets[9])),
        (&sub, &data[..half + 12345], None),
    ];
    for round in ["before SIGKILL", "after SIGKILL"] {
        for (path, want, tail_offset) in &cases {
            let (got, next_offset, _) = read_from(&s, path, "-1");
            same_bytes(&got, want, &format!("{path} {round}"));
            if let Some(t) = tail_offset {
                assert_eq!(&next_offset, *t, "{path} {round}");
            }
        }
        s.kill();
        s.restart();
    }
}

/// Fork paths tried, with the status each answered (if it did).
type Attempts = Arc<Mutex<Vec<(String, Option<u16>)>>>;

/// Forks `src` to fresh paths one after the other until a request fails;
/// sends the time each took.
fn fork_repeatedly(s: &Server, src: &str, attempts: &Attempts, took: mpsc::Sender<Duration>) {
    let (addr, attempts, src) = (s.addr, attempts.clone(), src.to_string());
    thread::spawn(move || {
        let mut conn = Conn::open(addr);
        for i in 0..16 {
            let path = path_on(SURFACES[0], "copy", i % 2);
            attempts.lock().unwrap().push((path.clone(), None));
            let began = Instant::now();
            let Ok(r) = conn.try_request("PUT", &path, &[(FROM, &src)], b"") else {
                return;
            };
            attempts.lock().unwrap().last_mut().unwrap().1 = Some(r.status);
            if r.status != 201 || took.send(began.elapsed()).is_err() {
                return;
            }
        }
    });
}

#[test]
fn sigkill_during_fork_copies_leaves_no_partial_fork() {
    let mut s = start(&["--cores", "2"]);
    let src = path_on(SURFACES[0], "huge", 0);
    let (data, offsets) = big_source(&s, &src, 30);
    let complete = |s: &Server, path: &str, what: &str| {
        let (got, next_offset, _) = read_from(s, path, "-1");
        same_bytes(&got, &data, &format!("{what} {path}"));
        assert_eq!(next_offset, offsets[29], "{what} {path}");
    };
    let mut counts = [0; 3];
    // Kill at a quarter, half and three quarters of the second copy.
    for quarter in 1..=3 {
        let attempts = Attempts::default();
        let (tx, rx) = mpsc::channel();
        fork_repeatedly(&s, &src, &attempts, tx);
        let took = rx.recv_timeout(Duration::from_secs(60)).expect("1 fork");
        thread::sleep(took * quarter / 4);
        s.kill();
        s.restart();
        complete(&s, &src, "the source after SIGKILL");
        for (path, answer) in attempts.lock().unwrap().iter() {
            match (answer, status(&s, "HEAD", path)) {
                (Some(201), now) => {
                    assert_eq!(now, 200, "{path} answered 201 before the kill");
                    complete(&s, path, "acknowledged fork");
                    counts[0] += 1;
                }
                (None, 200) => {
                    complete(&s, path, "unacknowledged fork");
                    counts[1] += 1;
                }
                (None, 404) => {
                    // The name is free: a fork made now is whole.
                    let r = fork(&s, path, &src, &[]);
                    expect(&r, 201, "fork after restart");
                    complete(&s, path, "fork made after restart");
                    counts[2] += 1;
                }
                (answer, now) => panic!("{path}: answered {answer:?}, now {now}"),
            }
        }
    }
    let [acked, whole, absent] = counts;
    eprintln!("forks: {acked} acknowledged, {whole} whole unacknowledged, {absent} absent");
    assert!(acked >= 3, "a fork was acknowledged before each kill");
}

#[test]
fn forks_survive_segment_cleaning() {
    let mut s = start(&[
        "--cores=2",
        "--segment-bytes=262144",
        "--max-body-bytes=65536",
        "--clean-interval-ms=100",
        "--cache-bytes=65536",
    ]);
    let baseline = log_bytes(&s.data_dir);
    let mut seed = 0;
    let mut chunk = || {
        seed += 1;
        Data::Bytes(noise(seed, 20_000))
    };
    let on = |i: usize, tag: &str| path_on(SURFACES[i % 2], tag, i % 2);
    let fillers: Vec<String> = (0..8).map(|i| on(i, "filler")).collect();
    let empty = |i| Tracked::new(on(i, "src"), BIN, Data::Bytes(vec![]));
    let mut srcs: Vec<Tracked> = (0..3).map(empty).collect();
    let bin = [("Content-Type", BIN)];
    for path in fillers.iter().chain(srcs.iter().map(|t| &t.path)) {
        must(&s, "PUT", path, &bin, b"", 201);
    }
    let fill = |s: &Server, round: usize, chunk: &mut dyn FnMut() -> Data| {
        let mut conn = Conn::open(s.addr);
        for _ in 0..16 {
            let r = conn.request("POST", &fillers[round], &bin, &chunk().body());
            expect(&r, 204, "filler append");
        }
    };
    // Sources, then forks' copies and appends, interleaved with filler so
    // that they share segments with dead data.
    for round in 0..4 {
        for t in &mut srcs {
            t.push(&s, chunk());
        }
        fill(&s, round, &mut chunk);
    }
    let mut forks: Vec<Vec<Tracked>> = Vec::new();
    for (i, src) in srcs.iter().enumerate() {
        let at = src.data.len() / 2;
        let mid = rill::protocol::offset::format(at as u64);
        let tail = src.fork(&s, "tail", (i + 1) % 2, &[], src.data.len());
        let half = src.fork(&s, "mid", i % 2, &[(FO, &mid)], at);
        forks.push(vec![tail, half]);
    }
    for round in 4..8 {
        for f in forks.iter_mut().flatten().chain([&mut srcs[2]]) {
            f.push(&s, chunk());
        }
        fill(&s, round, &mut chunk);
    }
    let full = log_bytes(&s.data_dir);
    // Source 0: soft-deleted, its forks stay. Source 1: soft-deleted, then
    // its forks are deleted too. Source 2: live, loses one fork.
    let dead = [&srcs[0], &srcs[1], &forks[1][0], &forks[1][1], &forks[2][0]];
    let dead = dead.map(|t| &t.path);
    for path in dead.into_iter().chain(&fillers) {
        must(&s, "DELETE", path, &[], b"", 204);
    }
    wait_status(&s, &srcs[1].path, 404, "source 1 without forks");
    let live_forks = || forks[0].iter().chain(&forks[2][1..]);
    let live = live_forks().chain([&srcs[0], &srcs[2]]);
    let target = baseline + 4 * SEGMENT + live.map(|t| t.data.len() as u64).sum::<u64>();
    assert!(full > target + 4 * SEGMENT, "{full} vs {target}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while log_bytes(&s.data_dir) > target {
        let now = log_bytes(&s.data_dir);
        assert!(Instant::now() < deadline, "not reclaimed: {now} > {target}");
        thread::sleep(Duration::from_millis(100));
    }
    for round in ["after cleaning", "after cleaning and SIGKILL"] {
        for f in live_forks() {
            f.check(&s, round);
            f.recreate_is(&s, &[], 200);
        }
        srcs[2].check(&s, round);
        assert_soft_deleted(&s, &srcs[0].path, round);
        for path in &dead[1..] {
            assert_eq!(status(&s, "HEAD", path), 404, "{round}: {path}");
        }
        s.kill();
        s.restart();
    }
    // Cleaned and restarted streams still fork whole.
    srcs[2].fork(&s, "late", 1, &[], srcs[2].data.len());
    forks[0][0].fork(&s, "late", 0, &[], forks[0][0].data.len());
}

#[test]
fn json_fork_continues_record_ordinals() {
    let mut s = start(&["--cores", "2"]);
    let mut cases: Vec<(Tracked, u64)> = Vec::new();
    for prefix in SURFACES {
        // Records 0..5 appended as [0,1], 2, [3,4]; `mid` is boundary 3.
        let (src, mid, _) = source(&s, prefix, JSON, &[]);
        let mut first = 0;
        if prefix == "/forked/" {
            // Retention (extensions §2.2) up to record 1: forks inherit F = 1.
            let state = [("Content-Type", "application/x-state")];
            let snap = format!("{}/snapshot?record=1", src.path);
            must(&s, "PUT", &snap, &state, b"S1", 204);
            let retain = format!("{}/retention?record=1", src.path);
            must(&s, "PUT", &retain, &[], b"", 204);
            first = 1;
            let gone = path_on(prefix, "gone", 1);
            let r = fork(&s, &gone, &src.path, &[(FO, ZERO)]);
            expect(&r, 410, "fork before the retained data");
        }
        assert_eq!(first_next(&s, &src.path), (first, 5));
        let new = |tag: &str, shard, extra: &Headers, n: u64| {
            let path = path_on(prefix, tag, shard);
            let r = fork(&s, &path, &src.path, extra);
            expect(&r, 201, &format!("fork {path}"));
            assert_eq!(num(&r, "stream-record-next"), n, "{path}: 201");
            // Extensions §6.3: no body, no records of its own.
            assert_eq!(num(&r, "stream-record-start"), n, "{path}: 201 start");
            assert_eq!(first_next(&s, &path), (first, n), "{path}: HEAD");
            Tracked::new(path, JSON, Data::Json(values(first..n)))
        };
        let mut f = new("at3", 1, &[(FO, &mid)], 3);
        assert_eq!(range(&f.append(&s, 3).0), (3, 5), "continues at 3");
        let mut h = new("sub", 0, &[(FO, &mid), (SUB, "1")], 4);
        assert_eq!(range(&h.append(&s, 4).0), (4, 6));
        let mut g = f.fork(&s, "of-fork", 0, &[], f.data.len());
        assert_eq!(first_next(&s, &g.path), (first, 5), "fork of a fork");
        assert_eq!(range(&g.append(&s, 5).0), (5, 7));
        if first == 1 {
            // Forks copied what they inherit: the source's retention
            // moving on does not change them.
            let state = [("Content-Type", "application/x-state")];
            let snap = format!("{}/snapshot?record=4", src.path);
            must(&s, "PUT", &snap, &state, b"S4", 204);
            let retain = format!("{}/retention?record=4", src.path);
            must(&s, "PUT", &retain, &[], b"", 204);
            assert_eq!(first_next(&s, &src.path), (4, 5));
        }
        cases.extend([(f, first), (h, first), (g, first)]);
    }
    let mut before = Vec::new();
    for round in ["before SIGKILL", "after SIGKILL"] {
        for (i, (t, first)) in cases.iter_mut().enumerate() {
            let what = format!("{} {round}", t.path);
            let n = *first + t.data.len() as u64;
            assert_eq!(first_next(&s, &t.path), (*first, n), "{what}");
            // Record reads cross the fork point: records 1.. of the
            // source, then the fork's own.
            let Data::Json(want) = &t.data else {
                unreachable!()
            };
            let got = records_from(&s, &t.path, 1, n);
            assert_eq!(&got, &want[(1 - *first) as usize..], "{what}");
            if *first == 1 {
                let gone = format!("{}?record=0", t.path);
                must(&s, "GET", &gone, &[], b"", 410);
            }
            if round.starts_with("before") {
                before.push(view(&s, &t.path));
                continue;
            }
            assert_eq!(view(&s, &t.path), before[i], "{what}");
            assert_eq!(range(&t.append(&s, 9).0), (n, n + 2), "{what}");
            t.check(&s, "appended after SIGKILL");
        }
        s.kill();
        s.restart();
    }
}

/// Extensions §3.4 on forks: a fork of a stream past retention starts
/// where the source's data does, so it inherits the snapshot covering that
/// start (its bootstrap then misses nothing); a fork point before that
/// snapshot has none and is refused. Across SIGKILL and re-sharding.
#[test]
fn forks_past_retention_inherit_the_snapshot() {
    let mut s = start(&["--cores", "2"]);
    // Records 0..5 as [0,1], 2, [3,4]; snapshot at record 3, retention at 2.
    let (src, mid, _) = source(&s, "/forked/", JSON, &[]);
    let state = [("Content-Type", "application/x-state")];
    let snap = format!("{}/snapshot?record=3", src.path);
    must(&s, "PUT", &snap, &state, b"S3", 204);
    must(
        &s,
        "PUT",
        &format!("{}/retention?record=2", src.path),
        &[],
        b"",
        204,
    );
    let snapshot_at = header(
        &must(&s, "HEAD", &src.path, &[], b"", 200),
        "stream-snapshot-offset",
    );
    assert_eq!(
        snapshot_at.as_deref(),
        Some(mid.as_str()),
        "record 3 is `mid`"
    );
    let retained = next(&must(
        &s,
        "GET",
        &format!("{}?offset=-1", src.path),
        &[],
        b"",
        410,
    ));
    let before = path_on("/forked/", "before-snap", 1);
    let r = fork(&s, &before, &src.path, &[(FO, &retained)]);
    expect(&r, 409, "a fork point the snapshot does not cover");
    let forks: Vec<String> = (0..2)
        .map(|shard| {
            let path = path_on("/forked/", "covered", shard);
            expect(&fork(&s, &path, &src.path, &[]), 201, &path);
            path
        })
        .collect();
    let check = |s: &Server, what: &str| {
        for path in &forks {
            let head = must(s, "HEAD", path, &[], b"", 200);
            assert_eq!(
                header(&head, "stream-snapshot-offset"),
                Some(mid.clone()),
                "{path} {what}"
            );
            let blob = must(s, "GET", &format!("{path}/snapshot/{mid}"), &[], b"", 200);
            assert_eq!(
                (blob.body.as_slice(), blob.header("content-type")),
                (&b"S3"[..], Some("application/x-state")),
                "{path} {what}"
            );
            // The fork's own retention may now move to its snapshot.
            must(s, "PUT", &format!("{path}/retention/{mid}"), &[], b"", 204);
        }
    };
    check(&s, "after the fork");
    // The source's snapshot moving on leaves the forks' own.
    must(
        &s,
        "PUT",
        &format!("{}/snapshot?record=5", src.path),
        &state,
        b"S5",
        204,
    );
    s.kill();
    s.restart();
    check(&s, "after SIGKILL");
    s.restart_with(&["--cores", "1"]);
    check(&s, "after re-sharding");
}

/// A sub-offset is any integer a client sends: one whose sum with the fork
/// point passes u64 is past the next data boundary (400), on byte and JSON
/// sources alike, and the server goes on (it aborted the process).
#[test]
fn a_sub_offset_past_u64_is_an_overshoot() {
    let s = start(&["--cores", "2"]);
    for (ct, first, second) in [(BIN, &b"abc"[..], &b"def"[..]), (JSON, b"[1,2]", b"[3]")] {
        for prefix in SURFACES {
            let src = path_on(prefix, "huge-sub", 0);
            must(&s, "PUT", &src, &[("Content-Type", ct)], first, 201);
            // The fork point: where the second append starts.
            let anchor = next(&must(&s, "HEAD", &src, &[], b"", 200));
            must(&s, "POST", &src, &[("Content-Type", ct)], second, 204);
            for sub in [u64::MAX, u64::MAX - 1].map(|n| n.to_string()) {
                let f = path_on(prefix, "huge-sub-fork", 1);
                let r = fork(&s, &f, &src, &[(FO, &anchor), (SUB, &sub)]);
                expect(&r, 400, &format!("{ct} {prefix} sub {sub}"));
            }
        }
    }
    must(&s, "GET", "/v1/health", &[], b"", 200);
}

/// A fork's first message is its sub-offset prefix and its body, one log
/// record: past `--max-body-bytes` together it is 413, and the server goes
/// on (a record past a segment aborted the process).
#[test]
fn a_prefix_and_body_past_the_body_limit_are_413() {
    let s = start(&SMALL_SEGMENTS);
    let full = noise(1, 65_536);
    for prefix in SURFACES {
        let src = path_on(prefix, "big-prefix", 0);
        must(&s, "PUT", &src, &[("Content-Type", BIN)], &full, 201);
        let anchor = next(&must(&s, "HEAD", &src, &[], b"", 200));
        must(&s, "POST", &src, &[("Content-Type", BIN)], &full, 204);
        let sub = (full.len() - 1).to_string();
        let headers = [(FROM, src.as_str()), (FO, &anchor), (SUB, &sub)];
        let f = path_on(prefix, "big-prefix-fork", 0);
        let r = common::req(s.addr, "PUT", &f, &headers, &full);
        expect(&r, 413, &format!("{prefix}: prefix + body"));
        assert_eq!(status(&s, "HEAD", &f), 404, "no fork was made");
        let fits = common::req(s.addr, "PUT", &f, &headers, b"x");
        expect(&fits, 201, &format!("{prefix}: prefix + one byte"));
        let (data, _, _) = read_from(&s, &f, &anchor);
        same_bytes(
            &data,
            &[&full[..full.len() - 1], b"x"].concat(),
            "the fork's own data",
        );
    }
    must(&s, "GET", "/v1/health", &[], b"", 200);
}

/// §4.2 idempotent fork creation follows §5.1: a re-PUT that asks for no
/// lifetime asks to inherit the source's, so it conflicts with a fork that
/// has one of its own, and matches one that inherited; also after a restart.
#[test]
fn a_fork_re_put_without_a_lifetime_matches_only_an_inherited_one() {
    let mut s = start(&["--cores", "2"]);
    let text = ("Content-Type", "text/plain");
    let src = path_on(SURFACES[0], "life-src", 0);
    must(&s, "PUT", &src, &[text, ("Stream-TTL", "50")], b"abcd", 201);
    let at = next(&must(&s, "HEAD", &src, &[], b"", 200));
    let own = path_on(SURFACES[0], "life-own", 1);
    let inherited = path_on(SURFACES[0], "life-inherited", 1);
    let base = [text, (FROM, src.as_str()), (FO, at.as_str())];
    let with_ttl = [&base[..], &[("Stream-TTL", "100")]].concat();
    must(&s, "PUT", &own, &with_ttl, b"", 201);
    must(&s, "PUT", &inherited, &base, b"", 201);
    for round in ["before a restart", "after a restart"] {
        let what = |w: &str| format!("{w} {round}");
        expect(
            &common::req(s.addr, "PUT", &own, &base, b""),
            409,
            &what("own, none asked"),
        );
        expect(
            &common::req(s.addr, "PUT", &own, &with_ttl, b""),
            200,
            &what("own, same"),
        );
        expect(
            &common::req(s.addr, "PUT", &inherited, &base, b""),
            200,
            &what("inherited"),
        );
        s.restart();
    }
}

/// Forks of one key decided in the same millisecond got one incarnation id
/// and one staging area: the first FORK to apply saw both copies and
/// panicked, leaving a stream half made whose log the next start refused.
/// Every racer now gets an answer (one 201, the rest 200), and a restart
/// finds the forks whole.
#[test]
fn concurrent_forks_of_one_key_are_one_fork() {
    let mut s = start(&["--cores", "1"]);
    let text = [("Content-Type", "text/plain")];
    let src = path_on(SURFACES[1], "race-src", 0);
    must(&s, "PUT", &src, &text, &[b'a'; 1000], 201);
    for _ in 0..5 {
        must(&s, "POST", &src, &text, &[b'b'; 1000], 204);
    }
    let mut forks = Vec::new();
    for _ in 0..20 {
        let f = path_on(SURFACES[1], "race-fork", 0);
        let barrier = Arc::new(std::sync::Barrier::new(6));
        let racers: Vec<_> = (0..6)
            .map(|_| {
                let (addr, f, src, barrier) = (s.addr, f.clone(), src.clone(), barrier.clone());
                thread::spawn(move || {
                    let mut conn = Conn::open(addr);
                    barrier.wait();
                    let answer = conn.try_request("PUT", &f, &[(FROM, src.as_str())], b"");
                    answer.ok().map(|r| r.status)
                })
            })
            .collect();
        let mut statuses: Vec<_> = racers.into_iter().map(|r| r.join().unwrap()).collect();
        statuses.sort();
        let mut expected = [Some(200); 6];
        expected[5] = Some(201);
        assert_eq!(statuses, expected, "{f}: every racer is answered");
        forks.push(f);
    }
    s.restart();
    for f in &forks {
        let (data, _, _) = read_from(&s, f, "-1");
        same_bytes(&data, &[[b'a'; 1000].as_slice(), &[b'b'; 5000]].concat(), f);
    }
}

/// A FORK record carries strings from three heads (the fork's attributes,
/// the source's content type, its snapshot's): with small segments it can
/// outgrow one. It is refused before it is queued (413), and writes of
/// other streams meanwhile are not failed with it (they were rolled back).
#[test]
fn a_fork_record_past_a_segment_is_413_alone() {
    let s = start(&SMALL_SEGMENTS);
    let long_type = |p: &str| format!("application/octet-stream; {p}={}", "a".repeat(28_000));
    let src = path_on(SURFACES[1], "wide-src", 0);
    must(
        &s,
        "PUT",
        &src,
        &[("Content-Type", &long_type("x"))],
        b"abc",
        201,
    );
    let at = next(&must(&s, "HEAD", &src, &[], b"", 200));
    let snapshot = format!("{src}/snapshot/{}", common::enc(&at));
    must(
        &s,
        "PUT",
        &snapshot,
        &[("Content-Type", &long_type("y"))],
        b"S",
        204,
    );
    let other = path_on(SURFACES[1], "wide-other", 0);
    must(&s, "PUT", &other, &[("Content-Type", BIN)], b"", 201);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writer = {
        let (addr, other, stop) = (s.addr, other.clone(), stop.clone());
        thread::spawn(move || {
            let mut conn = Conn::open(addr);
            let mut statuses = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let r = conn.request("POST", &other, &[("Content-Type", BIN)], &[7; 2048]);
                statuses.push(r.status);
            }
            statuses
        })
    };
    let attrs = format!(r#"{{"metadata":{{"k":"{}"}}}}"#, "v".repeat(15_000));
    for i in 0..5 {
        let f = path_on(SURFACES[1], &format!("wide-fork-{i}"), 0);
        let headers = [(FROM, src.as_str()), ("Stream-Attrs", attrs.as_str())];
        let r = common::req(s.addr, "PUT", &f, &headers, &[b'z'; 65_536]);
        expect(&r, 413, "a FORK record past a segment");
        assert!(r.text().contains("record_too_large"), "{}", r.text());
        assert_eq!(status(&s, "HEAD", &f), 404, "no fork was made");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let statuses = writer.join().unwrap();
    assert!(
        statuses.iter().all(|&s| s == 204),
        "other writes: {statuses:?}"
    );
    assert!(!statuses.is_empty());
}

/// A source deleted while forks read it answers 410 to an append-batch as
/// to a plain append (§4.2 soft delete), and takes no frame.
#[test]
fn append_batch_to_a_soft_deleted_source_is_410() {
    let s = start(&["--cores", "1"]);
    let text = [("Content-Type", "text/plain")];
    let src = path_on(SURFACES[1], "soft-batch-src", 0);
    must(&s, "PUT", &src, &text, b"abc", 201);
    let f = path_on(SURFACES[1], "soft-batch-fork", 0);
    expect(&fork(&s, &f, &src, &[]), 201, "fork");
    must(&s, "DELETE", &src, &[], b"", 204);
    must(&s, "POST", &src, &text, b"d", 410);
    let batch = common::req(
        s.addr,
        "POST",
        &format!("{src}/append-batch"),
        &text,
        &[0, 0, 0, 1, b'e'],
    );
    expect(&batch, 410, "append-batch to a soft-deleted source");
    let (data, _, _) = read_from(&s, &f, "-1");
    same_bytes(&data, b"abc", "the fork still reads the source's data");
}

/// §4.2: a soft-deleted stream "returns 410 Gone for all client-facing
/// operations", a long-poll that was waiting on it when it was deleted too.
#[test]
fn a_long_poll_on_a_source_deleted_under_it_gets_410() {
    let s = start(&["--cores", "2"]);
    for prefix in SURFACES {
        let (src, _, _) = source(&s, prefix, TEXT, &[]);
        src.fork(&s, "kept", 0, &[], src.data.len());
        let tail = next(&must(&s, "HEAD", &src.path, &[], b"", 200));
        let poll = format!("{}?offset={tail}&live=long-poll", src.path);
        let addr = s.addr;
        let waiter = thread::spawn(move || common::req(addr, "GET", &poll, &[], b"").status);
        thread::sleep(Duration::from_millis(300));
        must(&s, "DELETE", &src.path, &[], b"", 204);
        assert_eq!(waiter.join().unwrap(), 410, "{}", src.path);
    }
}
