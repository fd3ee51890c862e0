//! Black-box tests of `/v1/metrics` and `/v1/health/*` on the real `rill`
//! binary with two shards: the scrape parses as Prometheus text 0.0.4
//! (checked by the strict parser below), and its counters and gauges move
//! as traffic flows (appends on both shards, reads from the cache and from
//! the log, SSE and long-poll readers, handoffs, 404s).

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::thread;
use std::time::{Duration, Instant};

use common::{Conn, Server, req};
use rill::shard::placement::shard_of;

const SHARDS: usize = 2;
const BIN: &str = "application/octet-stream";
/// Bounded waits for gauges that follow connections coming and going.
const WAIT: Duration = Duration::from_secs(20);

// ------------------------------------------------------------ the parser

type Labels = BTreeMap<String, String>;

#[derive(Debug)]
struct Sample {
    name: String,
    labels: Labels,
    value: f64,
}

/// A parsed scrape: every family's type and every sample.
struct Scrape {
    types: BTreeMap<String, String>,
    samples: Vec<Sample>,
}

/// Parses Prometheus text 0.0.4 strictly: `# HELP`/`# TYPE` only as
/// comments, a family's TYPE before its samples, a family's lines together,
/// `name{labels} value` samples without timestamps, no duplicates.
fn parse(text: &str) -> Scrape {
    assert!(text.ends_with('\n'), "the exposition ends with a line feed");
    let mut scrape = Scrape {
        types: BTreeMap::new(),
        samples: Vec::new(),
    };
    let (mut current, mut closed) = (String::new(), BTreeSet::new());
    let mut seen = BTreeSet::new();
    for line in text.lines() {
        let family = match line.strip_prefix('#') {
            Some(comment) => comment_family(comment, &mut scrape.types),
            None => {
                let sample = parse_sample(line);
                let family = family_of(&sample.name, &scrape.types);
                let key = format!("{}{:?}", sample.name, sample.labels);
                assert!(seen.insert(key), "duplicate sample: {line}");
                scrape.samples.push(sample);
                family
            }
        };
        if family != current {
            assert!(closed.insert(current.clone()), "family {current} is split");
            assert!(!closed.contains(&family), "family {family} is split");
            current = family;
        }
    }
    scrape
}

/// A `# HELP` or `# TYPE` line; returns its family.
fn comment_family(comment: &str, types: &mut BTreeMap<String, String>) -> String {
    let mut parts = comment.trim_start().splitn(3, ' ');
    let (keyword, name) = (parts.next().unwrap(), parts.next().unwrap_or(""));
    let rest = parts.next().unwrap_or("");
    assert!(valid_name(name), "bad family name in #{comment}");
    match keyword {
        "HELP" => assert!(!rest.is_empty(), "empty help for {name}"),
        "TYPE" => {
            let kinds = ["counter", "gauge", "histogram", "summary", "untyped"];
            assert!(kinds.contains(&rest), "bad type in #{comment}");
            assert!(
                types.insert(name.into(), rest.into()).is_none(),
                "two TYPEs for {name}"
            );
        }
        _ => panic!("unexpected comment #{comment}"),
    }
    name.to_string()
}

/// The family a sample belongs to; its TYPE must have come first.
fn family_of(name: &str, types: &BTreeMap<String, String>) -> String {
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(base) = name.strip_suffix(suffix)
            && types.get(base).is_some_and(|t| t == "histogram")
        {
            return base.to_string();
        }
    }
    assert!(types.contains_key(name), "sample {name} before its # TYPE");
    name.to_string()
}

fn parse_sample(line: &str) -> Sample {
    let end = line
        .find(['{', ' '])
        .unwrap_or_else(|| panic!("no value: {line}"));
    let name = &line[..end];
    assert!(valid_name(name), "bad metric name: {line}");
    let (labels, rest) = match line[end..].strip_prefix('{') {
        Some(inner) => parse_labels(inner, line),
        None => (Labels::new(), &line[end..]),
    };
    let value = rest
        .strip_prefix(' ')
        .unwrap_or_else(|| panic!("no space before the value: {line}"));
    assert!(!value.contains(' '), "timestamps are not expected: {line}");
    Sample {
        name: name.into(),
        labels,
        value: parse_value(value).unwrap_or_else(|| panic!("bad value: {line}")),
    }
}

/// Labels after the `{`; returns them and what follows the `}`.
fn parse_labels<'a>(mut s: &'a str, line: &str) -> (Labels, &'a str) {
    let mut labels = Labels::new();
    loop {
        if let Some(rest) = s.strip_prefix('}') {
            return (labels, rest);
        }
        let eq = s.find("=\"").unwrap_or_else(|| panic!("bad label: {line}"));
        let name = &s[..eq];
        assert!(valid_name(name), "bad label name: {line}");
        let (value, rest) = label_value(&s[eq + 2..], line);
        assert!(
            labels.insert(name.into(), value).is_none(),
            "repeated label: {line}"
        );
        s = rest.strip_prefix(',').unwrap_or(rest);
    }
}

/// An escaped label value up to its closing quote.
fn label_value<'a>(s: &'a str, line: &str) -> (String, &'a str) {
    let mut value = String::new();
    let mut chars = s.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return (value, &s[i + 1..]),
            '\\' => match chars.next().map(|(_, c)| c) {
                Some('\\') => value.push('\\'),
                Some('"') => value.push('"'),
                Some('n') => value.push('\n'),
                other => panic!("bad escape {other:?}: {line}"),
            },
            '\n' => panic!("raw line feed in a label: {line}"),
            c => value.push(c),
        }
    }
    panic!("unterminated label value: {line}")
}

fn parse_value(v: &str) -> Option<f64> {
    match v {
        "+Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        v if v
            .bytes()
            .all(|b| b.is_ascii_digit() || b"+-.eE".contains(&b)) =>
        {
            v.parse().ok()
        }
        _ => None,
    }
}

fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

impl Scrape {
    /// rill's own conventions: `rill_` names, counters in `_total`,
    /// histograms complete and cumulative.
    fn check_conventions(&self) {
        for (name, kind) in &self.types {
            assert!(name.starts_with("rill_"), "{name}");
            assert_eq!(
                kind == "counter",
                name.ends_with("_total"),
                "{name} is a {kind}"
            );
            if kind == "histogram" {
                self.check_histogram(name);
            }
        }
    }

    /// Per series: buckets non-decreasing in `le`, `+Inf` last and equal to
    /// `_count`, `_sum` present.
    fn check_histogram(&self, name: &str) {
        let mut series: BTreeMap<Labels, Vec<(f64, f64)>> = BTreeMap::new();
        for s in self.named(&format!("{name}_bucket")) {
            let mut labels = s.labels.clone();
            let le = labels
                .remove("le")
                .unwrap_or_else(|| panic!("{s:?} has no le"));
            series
                .entry(labels)
                .or_default()
                .push((parse_value(&le).unwrap(), s.value));
        }
        assert!(!series.is_empty(), "{name} has no buckets");
        for (labels, buckets) in series {
            assert!(
                buckets
                    .windows(2)
                    .all(|w| w[0].0 < w[1].0 && w[0].1 <= w[1].1),
                "{name}{labels:?}: {buckets:?}"
            );
            let (le, last) = *buckets.last().unwrap();
            assert_eq!(le, f64::INFINITY, "{name}{labels:?} ends in +Inf");
            assert_eq!(self.value(&format!("{name}_count"), &labels), Some(last));
            assert!(self.value(&format!("{name}_sum"), &labels).is_some());
        }
    }

    fn named<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Sample> + 'a {
        self.samples.iter().filter(move |s| s.name == name)
    }

    fn value(&self, name: &str, labels: &Labels) -> Option<f64> {
        self.named(name)
            .find(|s| &s.labels == labels)
            .map(|s| s.value)
    }

    /// Sum of `name` over samples whose labels include `with`.
    fn sum(&self, name: &str, with: &[(&str, &str)]) -> f64 {
        self.named(name)
            .filter(|s| {
                with.iter()
                    .all(|(k, v)| s.labels.get(*k).map(String::as_str) == Some(*v))
            })
            .map(|s| s.value)
            .sum()
    }

    fn on_shard(&self, name: &str, shard: usize) -> f64 {
        self.sum(name, &[("shard", &shard.to_string())])
    }
}

// ------------------------------------------------------------ helpers

fn scrape(s: &Server) -> Scrape {
    let r = req(s.addr, "GET", "/v1/metrics", &[], b"");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(
        r.header("content-type"),
        Some("text/plain; version=0.0.4; charset=utf-8")
    );
    let scrape = parse(&r.text());
    scrape.check_conventions();
    scrape
}

/// A `/v1/stream/` path whose stream lives on `shard`.
fn path_on(shard: usize, tag: &str) -> String {
    (0..)
        .map(|i| format!("/v1/stream/metrics-{tag}-{i}"))
        .find(|p| shard_of(p, SHARDS) == shard)
        .unwrap()
}

fn create(s: &Server, path: &str) {
    let r = req(s.addr, "PUT", path, &[("Content-Type", BIN)], b"");
    assert_eq!(r.status, 201, "create {path}: {}", r.text());
}

fn append(conn: &mut Conn, path: &str, body: &[u8]) {
    let r = conn.request("POST", path, &[("Content-Type", BIN)], body);
    assert_eq!(r.status, 204, "append {path}: {}", r.text());
}

fn read_all(s: &Server, path: &str) -> Vec<u8> {
    let r = req(s.addr, "GET", &format!("{path}?offset=-1"), &[], b"");
    assert_eq!(r.status, 200, "read {path}: {}", r.text());
    r.body
}

/// Scrapes until `done` holds (bounded by `WAIT`, poking with `poke`).
fn wait_for(s: &Server, what: &str, mut poke: impl FnMut(), done: impl Fn(&Scrape) -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done(&scrape(s)) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        poke();
        thread::sleep(Duration::from_millis(50));
    }
}

// ------------------------------------------------------------ tests

#[test]
fn health_live_and_ready() {
    let s = Server::start(&["--cores", "2"]);
    let before = scrape(&s);
    assert_eq!(before.sum("rill_ready", &[]), 1.0);
    for path in ["/v1/health", "/v1/health/live", "/v1/health/ready"] {
        let r = req(s.addr, "GET", path, &[], b"");
        assert_eq!(r.status, 200, "{path}: {}", r.text());
        assert_eq!(r.text(), r#"{"status":"ok"}"#, "{path}");
        let r = req(s.addr, "POST", path, &[], b"");
        assert_eq!(r.status, 405, "{path}: {}", r.text());
        assert_eq!(r.header("allow"), Some("GET, HEAD, OPTIONS"));
    }
    assert_eq!(req(s.addr, "DELETE", "/v1/metrics", &[], b"").status, 405);
    let health = [("route", "health"), ("status", "200")];
    let after = scrape(&s);
    assert_eq!(
        delta(&before, &after, "rill_http_requests_total", &health),
        3.0
    );
}

#[test]
fn counters_move_as_traffic_flows() {
    // 64 KiB of cache over 2 shards: a 48 KiB append is evicted at once.
    let s = Server::start(&["--cores", "2", "--cache-bytes", "65536"]);
    let before = scrape(&s);
    let paths = [path_on(0, "a"), path_on(1, "b")];
    for p in &paths {
        create(&s, p);
    }
    // One connection for all appends: it must move between the shards.
    let mut conn = Conn::open(s.addr);
    let chunk = [7u8; 100];
    for _ in 0..5 {
        for p in &paths {
            append(&mut conn, p, &chunk);
        }
    }
    let big = path_on(0, "big");
    create(&s, &big);
    append(&mut conn, &big, &[1u8; 48 << 10]);
    assert_eq!(read_all(&s, &big).len(), 48 << 10, "read from the log");
    assert_eq!(read_all(&s, &paths[1]).len(), 500, "read from the cache");
    assert_eq!(
        req(s.addr, "GET", "/v1/stream/metrics-missing", &[], b"").status,
        404
    );
    assert_eq!(req(s.addr, "GET", "/", &[], b"").status, 404);
    let after = scrape(&s);
    assert_commits_moved(&before, &after);
    assert_reads_moved(&before, &after);
    assert_requests_moved(&before, &after);
    assert_gauges(&after);
}

fn delta(before: &Scrape, after: &Scrape, name: &str, with: &[(&str, &str)]) -> f64 {
    after.sum(name, with) - before.sum(name, with)
}

fn assert_commits_moved(before: &Scrape, after: &Scrape) {
    for shard in 0..SHARDS {
        let grew = |name| after.on_shard(name, shard) - before.on_shard(name, shard);
        assert!(grew("rill_appends_total") >= 5.0, "shard {shard} appends");
        assert!(
            grew("rill_append_bytes_total") >= 500.0,
            "shard {shard} bytes"
        );
        assert!(
            grew("rill_group_commits_total") >= 1.0,
            "shard {shard} commits"
        );
        assert!(
            grew("rill_commit_batch_records_count") >= 1.0,
            "shard {shard} batches"
        );
        // `--fsync always` writes batches O_DSYNC: durable without a
        // separate data sync (no segment rolled here).
        assert_eq!(
            grew("rill_fdatasync_seconds_count"),
            0.0,
            "shard {shard} syncs"
        );
        assert!(
            grew("rill_log_write_bytes_total") >= 500.0,
            "shard {shard} log bytes"
        );
    }
    assert!(delta(before, after, "rill_appends_total", &[]) >= 11.0);
    assert!(delta(before, after, "rill_append_bytes_total", &[]) >= (1000 + (48 << 10)) as f64);
    assert!(delta(before, after, "rill_commit_seconds_sum", &[]) > 0.0);
    // Every committed write is timed from its decision to its commit.
    let appends = delta(before, after, "rill_appends_total", &[]);
    assert!(delta(before, after, "rill_commit_seconds_count", &[]) >= appends);
    assert!(delta(before, after, "rill_commit_seconds_sum", &[]) > 0.0);
}

fn assert_reads_moved(before: &Scrape, after: &Scrape) {
    assert!(
        delta(before, after, "rill_cache_misses_total", &[]) >= 1.0,
        "the evicted read"
    );
    assert!(delta(before, after, "rill_log_read_bytes_total", &[]) >= (48 << 10) as f64);
    assert!(
        delta(before, after, "rill_cache_hits_total", &[]) >= 1.0,
        "the cached read"
    );
    assert!(after.on_shard("rill_cached_bytes", 1) >= 500.0);
}

fn assert_requests_moved(before: &Scrape, after: &Scrape) {
    let requests = |route, status| {
        delta(
            before,
            after,
            "rill_http_requests_total",
            &[("route", route), ("status", status)],
        )
    };
    assert_eq!(requests("stream", "201"), 3.0, "creates");
    assert_eq!(requests("stream", "204"), 11.0, "appends");
    assert!(requests("stream", "200") >= 2.0, "reads");
    assert_eq!(requests("stream", "404"), 1.0, "missing stream");
    assert_eq!(requests("other", "404"), 1.0, "unknown path");
    assert!(requests("metrics", "200") >= 1.0, "the first scrape");
    assert!(delta(before, after, "rill_handoffs_total", &[]) >= 1.0);
    assert!(delta(before, after, "rill_connections_accepted_total", &[]) >= 8.0);
}

fn assert_gauges(after: &Scrape) {
    for shard in 0..SHARDS {
        assert!(
            after.on_shard("rill_streams", shard) >= 1.0,
            "shard {shard} streams"
        );
        assert!(
            after.on_shard("rill_log_segments", shard) >= 1.0,
            "shard {shard} segments"
        );
        assert!(
            after.on_shard("rill_log_bytes", shard) >= 4194304.0,
            "shard {shard} bytes"
        );
        assert!(after.on_shard("rill_recovery_seconds", shard) >= 0.0);
        assert_eq!(
            after.on_shard("rill_commit_queue_bytes", shard),
            0.0,
            "nothing in flight"
        );
    }
    assert_eq!(after.sum("rill_streams", &[]), 3.0);
    assert!(
        after.sum("rill_connections", &[]) >= 1.0,
        "the scrape's own connection"
    );
    assert_eq!(
        after
            .samples
            .iter()
            .filter(|s| s.name == "rill_recovery_seconds")
            .count(),
        SHARDS
    );
}

#[test]
fn live_subscriber_gauges_follow_readers() {
    let s = Server::start(&["--cores", "2", "--long-poll-timeout-ms", "5000"]);
    let path = path_on(1, "live");
    create(&s, &path);
    let live = |m: &Scrape, mode| m.sum("rill_live_subscribers", &[("mode", mode)]);
    assert_eq!(live(&scrape(&s), "sse"), 0.0);

    let mut sse = Conn::open(s.addr);
    let request = sse.build_request("GET", &format!("{path}?offset=-1&live=sse"), &[], b"");
    sse.send_raw(&request);
    assert_eq!(sse.read_head().status, 200);
    wait_for(&s, "an SSE subscriber", || {}, |m| live(m, "sse") == 1.0);
    drop(sse);
    // The server notices the client left when it next writes: appends wake it.
    let mut poker = Conn::open(s.addr);
    let poke = || append(&mut poker, &path, b"x");
    wait_for(&s, "the SSE subscriber to leave", poke, |m| {
        live(m, "sse") == 0.0
    });

    let tail = req(s.addr, "HEAD", &path, &[], b"");
    let offset = tail.header("stream-next-offset").unwrap().to_string();
    let (addr, poll_path) = (s.addr, format!("{path}?offset={offset}&live=long-poll"));
    let waiter = thread::spawn(move || req(addr, "GET", &poll_path, &[], b"").status);
    wait_for(
        &s,
        "a long-poll subscriber",
        || {},
        |m| live(m, "long_poll") == 1.0,
    );
    append(&mut Conn::open(s.addr), &path, b"wake");
    assert_eq!(
        waiter.join().unwrap(),
        200,
        "the append answers the long-poll"
    );
    wait_for(
        &s,
        "the long-poll to end",
        || {},
        |m| live(m, "long_poll") == 0.0,
    );
}

/// A long-poll waiter whose client went away gives its socket up at once,
/// not at the (here 60 s) timeout: nothing is appended meanwhile.
#[test]
fn a_long_poll_whose_client_left_ends_without_waiting_for_the_timeout() {
    let s = Server::start(&["--cores", "2", "--long-poll-timeout-ms", "60000"]);
    let path = path_on(0, "left");
    create(&s, &path);
    let live = |m: &Scrape| m.sum("rill_live_subscribers", &[("mode", "long_poll")]);
    let tail = req(s.addr, "HEAD", &path, &[], b"");
    let offset = tail.header("stream-next-offset").unwrap().to_string();
    let mut waiter = Conn::open(s.addr);
    let poll = format!("{path}?offset={offset}&live=long-poll");
    waiter.send_raw(&waiter.build_request("GET", &poll, &[], b""));
    wait_for(&s, "a long-poll subscriber", || {}, |m| live(m) == 1.0);
    drop(waiter);
    wait_for(&s, "the waiter to be let go", || {}, |m| live(m) == 0.0);
    // A waiter that pipelines its next request is still answered.
    let mut pipelined = Conn::open(s.addr);
    let mut two = pipelined.build_request("GET", &poll, &[], b"");
    two.extend(pipelined.build_request("HEAD", &path, &[], b""));
    pipelined.send_raw(&two);
    wait_for(&s, "the pipelining waiter", || {}, |m| live(m) == 1.0);
    append(&mut Conn::open(s.addr), &path, b"wake");
    assert_eq!(pipelined.read_response().body, b"wake");
    assert_eq!(pipelined.read_response_for("HEAD").status, 200);
}
