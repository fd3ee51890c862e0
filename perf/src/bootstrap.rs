//! The `bootstrap` scenario (extensions §2–§3): one stream in a bucket is
//! filled with B messages, a snapshot is published at the offset after
//! them, and M more messages are appended (defaults: a 64 KiB snapshot and
//! 10,000 retained 256-byte JSON messages). Then C clients, each on its own
//! keep-alive connection, loop `GET {stream}/bootstrap` for the duration,
//! read every `multipart/mixed` body in full and check it has 1 + M parts
//! and a first part of the snapshot's size; any other body is an error.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hyper::Method;
use serde::Serialize;
use tokio::sync::Barrier;

use crate::Api;
use crate::client::{Conn, Error, Reply, Target};
use crate::multipart;
use crate::stats::{self, Latency};

#[derive(clap::Args, Debug)]
pub struct BootstrapArgs {
    /// Server base URL, e.g. http://127.0.0.1:4437
    #[arg(long)]
    url: String,
    /// Only the bucketed surface has bootstrap; `v1` is refused.
    #[arg(long, value_enum, default_value = "bucket")]
    api: Api,
    /// Bucket to create (`PUT /{bucket}`; 201 or 409 are both fine).
    #[arg(long)]
    bucket: String,
    /// Content type of the stream. With application/json, several
    /// messages go in one POST (a JSON array); otherwise one per POST.
    #[arg(long, default_value = "application/json")]
    content_type: String,
    /// Bytes of each message (JSON: `{"i":N,"pad":"x…"}` padded to this).
    #[arg(long, default_value_t = 256)]
    message_bytes: usize,
    /// Messages appended before the snapshot point (folded into it).
    #[arg(long, default_value_t = 10_000)]
    before: usize,
    /// Messages appended after the snapshot point: the retained parts.
    #[arg(long, default_value_t = 10_000)]
    messages: usize,
    /// JSON messages per POST during the fill.
    #[arg(long, default_value_t = 100)]
    per_post: usize,
    /// Size of the snapshot blob.
    #[arg(long, default_value_t = 64 << 10)]
    snapshot_bytes: usize,
    /// Content type of the snapshot blob.
    #[arg(long, default_value = "application/octet-stream")]
    snapshot_type: String,
    /// Concurrent clients, one connection each.
    #[arg(long, default_value_t = 1)]
    clients: usize,
    /// Measurement length in seconds.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    #[command(flatten)]
    out: crate::output::Output,
}

#[derive(Serialize)]
struct Report {
    scenario: &'static str,
    label: String,
    url: String,
    bucket: String,
    stream: String,
    content_type: String,
    message_bytes: usize,
    messages_before_snapshot: usize,
    retained_messages: usize,
    snapshot_bytes: usize,
    snapshot_offset: String,
    /// Body bytes of one bootstrap response (from the setup probe).
    response_bytes: usize,
    setup_s: f64,
    clients: usize,
    duration_s: f64,
    elapsed_s: f64,
    /// Responses answered 200 with the expected parts.
    bootstraps: u64,
    /// Non-200 answers, malformed or short bodies, transport errors.
    errors: u64,
    error_kinds: BTreeMap<String, u64>,
    bootstraps_per_s: f64,
    /// Body bytes of valid bootstraps.
    mb_per_s: f64,
    /// Per bootstrap, send to the last byte of the body.
    latency_us: Latency,
    client_cpu_pct: f64,
    server_cpu_pct: Option<f64>,
    unix_time: u64,
}

/// The stream the clients bootstrap and what a valid answer looks like.
struct Fixture {
    stream: String,
    snapshot_offset: String,
    expect: Expect,
    response_bytes: usize,
    setup_s: f64,
}

#[derive(Clone, Copy)]
struct Expect {
    parts: usize,
    first_len: usize,
}

#[derive(Default)]
struct Counts {
    bootstraps: u64,
    bytes: u64,
    errors: u64,
    kinds: BTreeMap<String, u64>,
}

impl Counts {
    fn add(&mut self, other: Counts) {
        self.bootstraps += other.bootstraps;
        self.bytes += other.bytes;
        self.errors += other.errors;
        for (k, v) in other.kinds {
            *self.kinds.entry(k).or_insert(0) += v;
        }
    }

    fn error(&mut self, kind: String) {
        self.errors += 1;
        *self.kinds.entry(kind).or_insert(0) += 1;
    }
}

/// What the measurement produced.
struct Measured {
    counts: Counts,
    hist: hdrhistogram::Histogram<u64>,
    elapsed: f64,
    client_cpu: f64,
    server_cpu: Option<f64>,
}

fn check_args(args: &BootstrapArgs) -> Result<(), Error> {
    if args.api != Api::Bucket {
        return Err(
            "bootstrap exists only on the bucketed surface (extensions §3): use --api bucket"
                .into(),
        );
    }
    if args.before == 0 || args.messages == 0 || args.per_post == 0 {
        return Err("--before, --messages and --per-post must be positive".into());
    }
    if args.clients == 0 || args.message_bytes == 0 || args.duration <= 0.0 {
        return Err("--clients, --message-bytes and --duration must be positive".into());
    }
    Ok(())
}

pub async fn run(args: BootstrapArgs) -> Result<(), Error> {
    check_args(&args)?;
    let target = Target::parse(&args.url)?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?;
    let run = format!("{}-{}", now.as_millis(), std::process::id());
    let fixture = setup(&target, &args, &run).await?;
    eprintln!(
        "rill-bench bootstrap: {} messages, snapshot at {}, {} retained; {} B per bootstrap; setup {:.2} s",
        args.before + args.messages,
        fixture.snapshot_offset,
        args.messages,
        fixture.response_bytes,
        fixture.setup_s
    );
    let m = measure(&target, &args, &fixture).await?;
    let report = report(&args, fixture, m, now.as_secs());
    print_table(&report);
    args.out.write_json(&report)?;
    Ok(())
}

fn report(args: &BootstrapArgs, f: Fixture, m: Measured, unix_time: u64) -> Report {
    Report {
        scenario: "bootstrap",
        label: args.out.label.clone(),
        url: args.url.clone(),
        bucket: args.bucket.clone(),
        stream: f.stream,
        content_type: args.content_type.clone(),
        message_bytes: args.message_bytes,
        messages_before_snapshot: args.before,
        retained_messages: args.messages,
        snapshot_bytes: args.snapshot_bytes,
        snapshot_offset: f.snapshot_offset,
        response_bytes: f.response_bytes,
        setup_s: f.setup_s,
        clients: args.clients,
        duration_s: args.duration,
        elapsed_s: m.elapsed,
        bootstraps: m.counts.bootstraps,
        errors: m.counts.errors,
        error_kinds: m.counts.kinds,
        bootstraps_per_s: m.counts.bootstraps as f64 / m.elapsed,
        mb_per_s: m.counts.bytes as f64 / m.elapsed / 1e6,
        latency_us: Latency::of(&m.hist),
        client_cpu_pct: m.client_cpu / m.elapsed * 100.0,
        server_cpu_pct: m.server_cpu.map(|c| c / m.elapsed * 100.0),
        unix_time,
    }
}

/// Bucket, stream, the fill before the snapshot, the snapshot, the
/// retained messages, and one probe bootstrap that must already be valid.
async fn setup(target: &Target, args: &BootstrapArgs, run: &str) -> Result<Fixture, Error> {
    let start = Instant::now();
    let mut conn = Conn::new(target.clone());
    let bucket = format!("/{}", args.bucket);
    let r = conn.send(Method::PUT, &bucket, None, Bytes::new()).await?;
    if !r.status.is_success() && r.status.as_u16() != 409 {
        return Err(format!("PUT {bucket}: {}", r.status).into());
    }
    let stream = format!("{bucket}/bench-bootstrap-{run}");
    let ct = Some(args.content_type.as_str());
    let r = conn.send(Method::PUT, &stream, ct, Bytes::new()).await?;
    if !r.status.is_success() {
        return Err(format!("creating {stream}: {}", r.status).into());
    }
    let snapshot_offset = fill(&mut conn, &stream, args, 0, args.before).await?;
    publish_snapshot(&mut conn, &stream, &snapshot_offset, args).await?;
    fill(&mut conn, &stream, args, args.before, args.messages).await?;
    let expect = Expect {
        parts: 1 + args.messages,
        first_len: args.snapshot_bytes,
    };
    let path = format!("{stream}/bootstrap");
    let r = conn.send(Method::GET, &path, None, Bytes::new()).await?;
    let response_bytes = check(&r, expect).map_err(|e| format!("probe GET {path}: {e}"))?;
    Ok(Fixture {
        stream,
        snapshot_offset,
        expect,
        response_bytes,
        setup_s: start.elapsed().as_secs_f64(),
    })
}

fn is_json(content_type: &str) -> bool {
    let mime = content_type.split(';').next().unwrap_or("").trim();
    mime.eq_ignore_ascii_case("application/json")
}

/// Message `i`: `{"i":i,"pad":"x…"}` for JSON, `i ` then `x…` otherwise,
/// `bytes` long (or just the prefix when that is longer).
fn message(i: usize, bytes: usize, json: bool) -> Vec<u8> {
    let (head, tail) = if json {
        (format!("{{\"i\":{i},\"pad\":\""), "\"}")
    } else {
        (format!("{i} "), "")
    };
    let pad = bytes.saturating_sub(head.len() + tail.len());
    let mut out = Vec::with_capacity(head.len() + pad + tail.len());
    out.extend_from_slice(head.as_bytes());
    out.resize(out.len() + pad, b'x');
    out.extend_from_slice(tail.as_bytes());
    out
}

/// One POST body: messages `from..to` (a JSON array, or one raw message).
fn post_body(from: usize, to: usize, bytes: usize, json: bool) -> Bytes {
    if !json {
        return Bytes::from(message(from, bytes, false));
    }
    let mut body = vec![b'['];
    for i in from..to {
        if i > from {
            body.push(b',');
        }
        body.extend_from_slice(&message(i, bytes, true));
    }
    body.push(b']');
    Bytes::from(body)
}

/// Appends messages `first..first + count`; returns the Stream-Next-Offset
/// after the last one.
async fn fill(
    conn: &mut Conn,
    stream: &str,
    args: &BootstrapArgs,
    first: usize,
    count: usize,
) -> Result<String, Error> {
    let json = is_json(&args.content_type);
    let step = if json { args.per_post } else { 1 };
    let ct = Some(args.content_type.as_str());
    let mut next = None;
    let mut i = first;
    while i < first + count {
        let to = (i + step).min(first + count);
        let body = post_body(i, to, args.message_bytes, json);
        let r = conn.send(Method::POST, stream, ct, body).await?;
        if !r.status.is_success() {
            return Err(format!("append to {stream}: {}", r.status).into());
        }
        next = r.next_offset;
        i = to;
    }
    next.ok_or_else(|| format!("append to {stream}: no Stream-Next-Offset").into())
}

/// Percent-encodes everything but RFC 3986 unreserved characters.
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out += &format!("%{b:02X}");
        }
    }
    out
}

async fn publish_snapshot(
    conn: &mut Conn,
    stream: &str,
    offset: &str,
    args: &BootstrapArgs,
) -> Result<(), Error> {
    let path = format!("{stream}/snapshot/{}", percent_encode(offset));
    let blob = Bytes::from(vec![b's'; args.snapshot_bytes]);
    let ct = Some(args.snapshot_type.as_str());
    let r = conn.send(Method::PUT, &path, ct, blob).await?;
    if !r.status.is_success() {
        let why = String::from_utf8_lossy(&r.body);
        return Err(format!("PUT {path}: {} {why}", r.status).into());
    }
    Ok(())
}

/// A 200 `multipart/mixed` body with the expected parts: its length.
fn check(r: &Reply, expect: Expect) -> Result<usize, String> {
    if r.status.as_u16() != 200 {
        return Err(format!("http {}", r.status.as_u16()));
    }
    let ct = r.content_type.as_deref().unwrap_or("");
    let boundary = multipart::boundary(ct).ok_or("content type is not multipart/mixed")?;
    let summary = multipart::parse(&r.body, boundary).map_err(|e| format!("malformed: {e}"))?;
    if summary.parts != expect.parts {
        return Err(format!(
            "{} parts, expected {}",
            summary.parts, expect.parts
        ));
    }
    if summary.first_len != expect.first_len {
        return Err(format!("snapshot part of {} B", summary.first_len));
    }
    Ok(r.body_len)
}

async fn measure(
    target: &Target,
    args: &BootstrapArgs,
    fixture: &Fixture,
) -> Result<Measured, Error> {
    let duration = Duration::from_secs_f64(args.duration);
    let path = format!("{}/bootstrap", fixture.stream);
    // Workers + this task meet once connected, so the CPU baseline and
    // the clock start together with the load.
    let barrier = Arc::new(Barrier::new(args.clients + 1));
    let handles: Vec<_> = (0..args.clients)
        .map(|_| {
            let (target, path) = (target.clone(), path.clone());
            let (barrier, expect) = (barrier.clone(), fixture.expect);
            tokio::spawn(async move { worker(target, path, expect, duration, barrier).await })
        })
        .collect();
    let cpu0 = stats::self_cpu_seconds();
    let server0 = args.out.server_cpu();
    let start = Instant::now();
    barrier.wait().await;
    let mut counts = Counts::default();
    let mut hist = stats::histogram();
    for handle in handles {
        let (c, h) = handle.await??;
        counts.add(c);
        hist.add(&h)?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let server1 = args.out.server_cpu();
    Ok(Measured {
        counts,
        hist,
        elapsed,
        client_cpu: stats::self_cpu_seconds() - cpu0,
        server_cpu: server0.zip(server1).map(|(a, b)| b - a),
    })
}

async fn worker(
    target: Target,
    path: String,
    expect: Expect,
    duration: Duration,
    barrier: Arc<Barrier>,
) -> Result<(Counts, hdrhistogram::Histogram<u64>), Error> {
    let mut conn = Conn::new(target);
    barrier.wait().await;
    let deadline = Instant::now() + duration;
    let mut hist = stats::histogram();
    let mut c = Counts::default();
    loop {
        let sent = Instant::now();
        if sent >= deadline {
            break;
        }
        match conn.send(Method::GET, &path, None, Bytes::new()).await {
            Ok(r) => {
                let micros = sent.elapsed().as_micros() as u64;
                match check(&r, expect) {
                    Ok(bytes) => {
                        hist.saturating_record(micros.max(1));
                        c.bootstraps += 1;
                        c.bytes += bytes as u64;
                    }
                    Err(kind) => c.error(kind),
                }
            }
            Err(e) => {
                c.error(format!("transport: {e}"));
                // Do not spin on a refused connection.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    Ok((c, hist))
}

fn print_table(r: &Report) {
    let l = &r.latency_us;
    let label = if r.label.is_empty() { &r.url } else { &r.label };
    println!(
        "bootstrap {label}: {} clients, {} B snapshot + {} × {} B messages ({} B body), {:.1} s",
        r.clients,
        r.snapshot_bytes,
        r.retained_messages,
        r.message_bytes,
        r.response_bytes,
        r.elapsed_s
    );
    println!(
        "{:>8} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>7} {:>8} {:>8}",
        "boot/s",
        "MB/s",
        "p50 µs",
        "p90 µs",
        "p99 µs",
        "p999 µs",
        "max µs",
        "errors",
        "cli CPU",
        "srv CPU"
    );
    println!(
        "{:>8.1} {:>8.1} {:>8} {:>8} {:>8} {:>8} {:>9} {:>7} {:>7.0}% {:>8}",
        r.bootstraps_per_s,
        r.mb_per_s,
        l.p50,
        l.p90,
        l.p99,
        l.p999,
        l.max,
        r.errors,
        r.client_cpu_pct,
        r.server_cpu_pct
            .map(|c| format!("{c:.0}%"))
            .unwrap_or_else(|| "-".into())
    );
    for (kind, n) in &r.error_kinds {
        println!("  error {kind}: {n}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_have_the_requested_size() {
        let m = message(12345, 256, true);
        assert_eq!(m.len(), 256);
        let v: serde_json::Value = serde_json::from_slice(&m).unwrap();
        assert_eq!(v["i"], 12345);
        assert_eq!(message(7, 10, false).len(), 10);
        assert_eq!(message(7, 1, true), b"{\"i\":7,\"pad\":\"\"}");
    }

    #[test]
    fn json_posts_are_arrays_of_messages() {
        let body = post_body(3, 6, 64, true);
        let v: Vec<serde_json::Value> = serde_json::from_slice(&body).unwrap();
        assert_eq!(v.len(), 3);
        assert_eq!(v[2]["i"], 5);
        assert_eq!(post_body(3, 6, 64, false).len(), 64);
    }

    #[test]
    fn offsets_are_percent_encoded() {
        assert_eq!(percent_encode("0000_0042"), "0000_0042");
        assert_eq!(percent_encode("a/b c%"), "a%2Fb%20c%25");
    }

    #[test]
    fn is_json_ignores_parameters_and_case() {
        assert!(is_json("application/json"));
        assert!(is_json("Application/JSON; charset=utf-8"));
        assert!(!is_json("text/plain"));
    }
}
