//! The server process itself: it opts out of transparent huge pages
//! (`disable_transparent_huge_pages` in src/main.rs), whatever the kernel's
//! system-wide THP mode.

mod common;

use common::Server;

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
