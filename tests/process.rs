//! The server process itself: it opts out of transparent huge pages
//! (`disable_transparent_huge_pages` in src/main.rs), whatever the kernel's
//! system-wide THP mode, a stop signal while it starts ends it at once, and
//! reload signals (SIGHUP, SIGUSR1/2) are logged and ignored.

mod common;

use std::time::Duration;

use common::{Server, req};

const TEXT: [(&str, &str); 1] = [("Content-Type", "text/plain")];

#[test]
fn the_server_runs_without_transparent_huge_pages() {
    let s = Server::start(&["--cores", "1"]);
    let status = std::fs::read_to_string(format!("/proc/{}/status", s.pid())).unwrap();
    let Some(line) = status.lines().find(|l| l.starts_with("THP_enabled:")) else {
        eprintln!("skipped: this kernel does not report THP_enabled (before 6.0)");
        return;
    };
    assert_eq!(line.split_whitespace().nth(1), Some("0"), "{line}");
}

/// A stop signal while the data dir is being re-sharded (or the shards
/// recover) ends the process at once with status 0, as a kill would (both
/// are crash-safe), rather than after the re-shard; the next start
/// finishes it, and every acknowledged append is there.
#[test]
fn a_stop_signal_while_starting_exits_at_once() {
    let mut s = Server::start(&["--cores", "2"]);
    let chunk = vec![b'r'; 512 << 10];
    let streams: Vec<String> = (0..48).map(|i| format!("/v1/stream/startup-{i}")).collect();
    for path in &streams {
        assert_eq!(req(s.addr, "PUT", path, &TEXT, &chunk).status, 201);
    }
    let stopped = s.signal_and_wait(libc::SIGTERM, Duration::from_secs(10));
    assert_eq!(stopped, Some(0), "{}", s.stderr());

    s.restart_unready(&["--cores", "1"]);
    s.stderr_once_it_says("moving streams to 1 shards");
    let code = s.signal_and_wait(libc::SIGTERM, Duration::from_secs(10));
    let stderr = s.stderr();
    assert_eq!(code, Some(0), "{stderr}");
    assert!(
        stderr.contains("received while starting; exiting"),
        "{stderr}"
    );
    assert_eq!(stderr.matches("listening on").count(), 1, "{stderr}");

    s.restart_with(&["--cores", "1"]);
    for path in &streams {
        let r = req(s.addr, "GET", &format!("{path}?offset=-1"), &[], b"");
        assert_eq!((r.status, r.body.len()), (200, chunk.len()), "{path}");
        assert!(r.body == chunk, "{path}: the bytes");
    }
}

/// SIGHUP, SIGUSR1 and SIGUSR2 (a reload or log reopen elsewhere) are
/// logged and ignored: their default action would end the server without a
/// drain or a word. SIGTERM still stops it cleanly after them.
#[test]
fn reload_signals_are_logged_and_ignored() {
    let mut s = Server::start(&["--cores", "1"]);
    for signal in [libc::SIGHUP, libc::SIGUSR1, libc::SIGUSR2] {
        // SAFETY: a signal to the test's own child process.
        unsafe { libc::kill(s.pid() as i32, signal) };
        let said = s.stderr_once_it_says(&format!("signal {signal} ignored"));
        assert!(said.contains("no reload"), "{said}");
        assert!(s.is_running(), "signal {signal} ended the server");
        assert_eq!(req(s.addr, "GET", "/v1/health/live", &[], b"").status, 200);
    }
    let code = s.signal_and_wait(libc::SIGTERM, Duration::from_secs(10));
    assert_eq!(code, Some(0), "{}", s.stderr());
}
