//! Memory per idle stream (issue 6's goal: 100,000 idle streams under 200
//! MiB resident) against the real binary: what each small stream adds to
//! the server's resident set, measured from `/proc`. Twice a regression
//! doubled it unnoticed (index chunk slots, then streams inline in the
//! table's B-tree nodes); this bound catches either.

mod common;

use std::thread;

use common::{Conn, Server, req};

const BUCKET: &str = "idle";
const WRITERS: usize = 8;
/// Measured here: ~760 bytes a stream (~955 with a stream's snapshot, fork
/// origin and closing producer inline); ~960 with streams inline in the
/// B-tree's nodes.
const MAX_BYTES_PER_STREAM: u64 = 880;

fn resident_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    let kib: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// Creates streams `from..to` of one byte each over `WRITERS` connections.
fn create(s: &Server, from: usize, to: usize) {
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let addr = s.addr;
            thread::spawn(move || {
                let mut c = Conn::open(addr);
                let text = [("Content-Type", "text/plain")];
                for i in (from + w..to).step_by(WRITERS) {
                    let r = c.request("PUT", &format!("/{BUCKET}/s{i}"), &text, b"x");
                    assert_eq!(r.status, 201, "{}", r.text());
                }
            })
        })
        .collect();
    writers.into_iter().for_each(|w| w.join().unwrap());
}

#[test]
fn an_idle_stream_costs_about_a_kilobyte_of_memory() {
    let s = Server::start(&["--cores", "2"]);
    assert_eq!(
        req(s.addr, "PUT", &format!("/{BUCKET}"), &[], b"").status,
        201
    );
    // Warm up: connections, buffers and the allocator's first pages.
    create(&s, 0, 2_000);
    let before = resident_bytes(s.pid());
    let streams = 40_000;
    create(&s, 2_000, 2_000 + streams);
    let grown = resident_bytes(s.pid()).saturating_sub(before);
    let each = grown / streams as u64;
    eprintln!("{streams} idle streams: {grown} bytes resident, {each} each");
    assert!(
        each <= MAX_BYTES_PER_STREAM,
        "{each} bytes resident per idle stream (at most {MAX_BYTES_PER_STREAM})"
    );
}
