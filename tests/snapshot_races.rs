//! Snapshot publishes racing other snapshot writes (extensions §2.2), against
//! the real binary: a publish writes its blob before its record commits, and
//! §2.2's checks must hold against the state it lands on, not the one it
//! started from. Racing `Stream-Snapshot-Match` publishes have one winner; a
//! retention racing a publish at an older offset never both succeed (that
//! left the visible snapshot behind the retained offset: data gone that no
//! snapshot covered, and `/bootstrap` cut off mid-body).

mod common;

use std::thread;

use common::{Server, req};

const BUCKET: &str = "races";
const TEXT: [(&str, &str); 1] = [("Content-Type", "text/plain")];
/// Large enough that a blob write outlasts a small request's handling.
const BLOB_BYTES: usize = 1 << 20;

fn start() -> Server {
    let s = Server::start(&["--cores", "2"]);
    assert_eq!(
        req(s.addr, "PUT", &format!("/{BUCKET}"), &[], b"").status,
        201
    );
    s
}

/// Creates `path` with `messages` one-byte appends; their end offsets.
fn stream_with(s: &Server, path: &str, messages: usize) -> Vec<String> {
    assert_eq!(req(s.addr, "PUT", path, &TEXT, b"").status, 201);
    (0..messages)
        .map(|i| {
            let r = req(s.addr, "POST", path, &TEXT, &[b'a' + i as u8]);
            assert_eq!(r.status, 204, "{}", r.text());
            r.header("stream-next-offset").unwrap().to_string()
        })
        .collect()
}

fn publish(s: &Server, path: &str, at: &str, headers: &[(&str, &str)], body: &[u8]) -> u16 {
    req(
        s.addr,
        "PUT",
        &format!("{path}/snapshot/{at}"),
        headers,
        body,
    )
    .status
}

#[test]
fn racing_matched_publishes_have_one_winner() {
    let s = start();
    for round in 0..6 {
        let path = format!("/{BUCKET}/match-{round}");
        let offsets = stream_with(&s, &path, 9);
        let first = req(
            s.addr,
            "PUT",
            &format!("{path}/snapshot/{}", offsets[0]),
            &[],
            b"base",
        );
        assert_eq!(first.status, 204);
        let digest = first.header("stream-snapshot-digest").unwrap().to_string();
        let racers: Vec<_> = offsets[1..]
            .iter()
            .map(|at| {
                let (addr, path, at, digest) = (s.addr, path.clone(), at.clone(), digest.clone());
                thread::spawn(move || {
                    let url = format!("{path}/snapshot/{at}");
                    let matched = [("Stream-Snapshot-Match", digest.as_str())];
                    req(addr, "PUT", &url, &matched, &vec![b'x'; BLOB_BYTES]).status
                })
            })
            .collect();
        let statuses: Vec<u16> = racers.into_iter().map(|r| r.join().unwrap()).collect();
        let won = statuses.iter().filter(|&&status| status == 204).count();
        assert!(
            statuses.iter().all(|status| [204, 409].contains(status)),
            "round {round}: {statuses:?}"
        );
        assert_eq!(won, 1, "round {round}: {statuses:?}");
    }
}

#[test]
fn retention_racing_an_older_publish_never_both_succeed() {
    let s = start();
    for round in 0..12 {
        let path = format!("/{BUCKET}/retain-{round}");
        let offsets = stream_with(&s, &path, 6);
        let (newer, older) = (offsets[4].clone(), offsets[1].clone());
        assert_eq!(publish(&s, &path, &newer, &[], b"newer"), 204);
        let publisher = {
            let (addr, path, older) = (s.addr, path.clone(), older.clone());
            thread::spawn(move || {
                let url = format!("{path}/snapshot/{older}");
                req(addr, "PUT", &url, &[], &vec![b'o'; BLOB_BYTES]).status
            })
        };
        // Staggered so the retention lands at various points of the publish.
        thread::sleep(std::time::Duration::from_millis(round % 4));
        let retained = req(
            s.addr,
            "PUT",
            &format!("{path}/retention/{newer}"),
            &[],
            b"",
        );
        let published = publisher.join().unwrap();
        assert!(
            !(retained.status == 204 && published == 204),
            "round {round}: retention and the older publish both succeeded"
        );
        // Whatever won, what the stream still holds is covered.
        let head = req(s.addr, "HEAD", &path, &[], b"");
        let visible = head.header("stream-snapshot-offset").unwrap().to_string();
        let read = req(s.addr, "GET", &format!("{path}?offset={visible}"), &[], b"");
        assert_eq!(read.status, 200, "round {round}: read at the snapshot");
        let boot = req(s.addr, "GET", &format!("{path}/bootstrap"), &[], b"");
        assert_eq!(boot.status, 200, "round {round}: {}", boot.text());
    }
}
