//! Black-box tests of the engine: one pinned OS thread per shard, clean
//! exit on SIGTERM/SIGINT, and the command line's help.

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use common::{Server, req};

/// Shard threads of `pid` by name, with their allowed-CPU lists.
fn shard_threads(pid: u32) -> BTreeMap<String, Vec<String>> {
    let mut threads: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for task in std::fs::read_dir(format!("/proc/{pid}/task")).unwrap() {
        let dir = task.unwrap().path();
        let name = std::fs::read_to_string(dir.join("comm"))
            .unwrap()
            .trim()
            .to_string();
        if !name.starts_with("rill-shard-") {
            continue;
        }
        let status = std::fs::read_to_string(dir.join("status")).unwrap();
        let cpus = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim()
            .to_string();
        threads.entry(name).or_default().push(cpus);
    }
    threads
}

#[test]
fn one_pinned_thread_per_shard() {
    let server = Server::start(&["--cores", "2"]);
    assert_eq!(req(server.addr, "GET", "/v1/health", &[], b"").status, 200);
    let threads = shard_threads(server.pid());
    assert_eq!(
        threads.keys().cloned().collect::<Vec<_>>(),
        ["rill-shard-0", "rill-shard-1"]
    );
    for (name, cpus) in &threads {
        assert_eq!(cpus.len(), 1, "{name} must be a single thread");
        let cpu = &cpus[0];
        assert!(
            cpu.parse::<usize>().is_ok(),
            "{name} must be pinned to one CPU, allowed: {cpu}"
        );
    }
    let online = std::thread::available_parallelism().map_or(1, |n| n.get());
    if online >= 2 {
        assert_ne!(
            threads["rill-shard-0"], threads["rill-shard-1"],
            "shards share a CPU"
        );
    }
}

#[test]
fn sigterm_and_sigint_exit_zero() {
    for signal in [libc::SIGTERM, libc::SIGINT] {
        let mut server = Server::start(&["--cores", "2"]);
        assert_eq!(req(server.addr, "GET", "/v1/health", &[], b"").status, 200);
        let code = server.signal_and_wait(signal, Duration::from_secs(10));
        assert_eq!(
            code,
            Some(0),
            "signal {signal}; stderr:\n{}",
            server.stderr()
        );
        assert!(server.stderr().contains("listening on 127.0.0.1:"));
    }
}

#[test]
fn help_explains_every_flag() {
    let out = Command::new(env!("CARGO_BIN_EXE_rill"))
        .args(["serve", "--help"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for flag in [
        "--listen",
        "--data-dir",
        "--cores",
        "--long-poll-timeout-ms",
        "4437",
        "./data",
        "30000",
    ] {
        assert!(help.contains(flag), "serve --help lacks {flag}");
    }
    let out = Command::new(env!("CARGO_BIN_EXE_rill"))
        .arg("--help")
        .output()
        .unwrap();
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("rill serve"));
    let bad = Command::new(env!("CARGO_BIN_EXE_rill"))
        .args(["serve", "--cores", "0"])
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
}
