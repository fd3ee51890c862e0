//! The `catchup` scenario: pre-fill one stream with 64 KiB appends, then C
//! clients read it from the start, each on its own connection, following
//! `Stream-Next-Offset` until `Stream-Up-To-Date`.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hyper::Method;
use serde::Serialize;

use crate::Api;
use crate::client::{Conn, Error, Target};
use crate::live;
use crate::stats::{self, Latency};

const CHUNK: usize = 64 << 10;
/// Transport errors one reader tolerates before giving up.
const MAX_ERRORS: u64 = 1000;

#[derive(clap::Args, Debug)]
pub struct CatchupArgs {
    /// Server base URL, e.g. http://127.0.0.1:4437
    #[arg(long)]
    url: String,
    /// Which surface the stream lives on.
    #[arg(long, value_enum, default_value = "v1")]
    api: Api,
    /// With `--api bucket`: the bucket to create (201 or 409 are both fine);
    /// by default named like the stream.
    #[arg(long)]
    bucket: Option<String>,
    /// Bytes to write into the stream before reading.
    #[arg(long, default_value_t = 64 << 20)]
    stream_bytes: u64,
    /// Concurrent readers.
    #[arg(long, default_value_t = 4)]
    clients: usize,
    /// Label for the table and the JSON.
    #[arg(long, default_value = "")]
    label: String,
    /// Write the results as JSON to this file.
    #[arg(long)]
    json: Option<std::path::PathBuf>,
}

#[derive(Serialize)]
struct Report {
    scenario: &'static str,
    label: String,
    url: String,
    stream_bytes: u64,
    clients: usize,
    fill_s: f64,
    read_s: f64,
    bytes_read: u64,
    requests: u64,
    errors: u64,
    gb_per_s: f64,
    request_latency_us: Latency,
    client_cpu_pct: f64,
    unix_time: u64,
}

pub async fn run(args: CatchupArgs) -> Result<(), Error> {
    if args.clients == 0 || args.stream_bytes == 0 {
        return Err("--clients and --stream-bytes must be positive".into());
    }
    let target = Target::parse(&args.url)?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?;
    let name = format!("bench-catchup-{}", live::run_id());
    let path = live::create_stream(&target, args.api, args.bucket.as_deref(), &name).await?;
    let mut conn = Conn::new(target.clone());
    let chunk = Bytes::from(vec![b'y'; CHUNK]);
    let fill_start = Instant::now();
    let mut written = 0u64;
    while written < args.stream_bytes {
        let part = chunk.slice(..CHUNK.min((args.stream_bytes - written) as usize));
        let len = part.len() as u64;
        let r = conn
            .send(Method::POST, &path, Some("text/plain"), part)
            .await?;
        if !r.status.is_success() {
            return Err(format!("append to {path}: {}", r.status).into());
        }
        written += len;
    }
    let fill_s = fill_start.elapsed().as_secs_f64();
    eprintln!(
        "rill-bench catchup: wrote {written} bytes in {fill_s:.2} s ({:.1} MB/s)",
        written as f64 / fill_s / 1e6
    );

    let cpu0 = stats::self_cpu_seconds();
    let start = Instant::now();
    let mut handles = Vec::new();
    for _ in 0..args.clients {
        let target = target.clone();
        let path = path.clone();
        handles.push(tokio::spawn(async move { read_all(target, path).await }));
    }
    let mut bytes_read = 0;
    let mut requests = 0;
    let mut errors = 0;
    let mut hist = stats::histogram();
    for handle in handles {
        let (bytes, reqs, errs, h) = handle.await??;
        errors += errs;
        bytes_read += bytes;
        requests += reqs;
        hist.add(&h)?;
    }
    let read_s = start.elapsed().as_secs_f64();
    let client_cpu = stats::self_cpu_seconds() - cpu0;
    let report = Report {
        scenario: "catchup",
        label: args.label.clone(),
        url: args.url.clone(),
        stream_bytes: args.stream_bytes,
        clients: args.clients,
        fill_s,
        read_s,
        bytes_read,
        requests,
        errors,
        gb_per_s: bytes_read as f64 / read_s / 1e9,
        request_latency_us: Latency::of(&hist),
        client_cpu_pct: client_cpu / read_s * 100.0,
        unix_time: now.as_secs(),
    };
    let l = &report.request_latency_us;
    println!(
        "catchup {}: {} clients read {} bytes each",
        if report.label.is_empty() {
            &report.url
        } else {
            &report.label
        },
        report.clients,
        report.stream_bytes
    );
    println!(
        "{:>8} {:>8} {:>10} {:>8} {:>8} {:>8} {:>9} {:>8}",
        "GB/s", "read s", "requests", "errors", "p50 µs", "p99 µs", "max µs", "cli CPU"
    );
    println!(
        "{:>8.3} {:>8.2} {:>10} {:>8} {:>8} {:>8} {:>9} {:>7.0}%",
        report.gb_per_s,
        report.read_s,
        report.requests,
        report.errors,
        l.p50,
        l.p99,
        l.max,
        report.client_cpu_pct
    );
    if bytes_read != args.stream_bytes * args.clients as u64 {
        eprintln!(
            "rill-bench catchup: warning: read {bytes_read} bytes, expected {}",
            args.stream_bytes * args.clients as u64
        );
    }
    if let Some(file) = &args.json {
        std::fs::write(file, serde_json::to_string_pretty(&report)? + "\n")?;
    }
    Ok(())
}

async fn read_all(
    target: Target,
    path: String,
) -> Result<(u64, u64, u64, hdrhistogram::Histogram<u64>), Error> {
    let mut conn = Conn::new(target);
    let mut offset = "-1".to_string();
    let mut bytes = 0u64;
    let mut requests = 0u64;
    let mut hist = stats::histogram();
    let mut errors = 0u64;
    loop {
        let sent = Instant::now();
        let url = format!("{path}?offset={offset}");
        let r = match conn.get_counted(&url).await {
            Ok(r) => r,
            // A dropped connection: retry the same offset on a new one.
            Err(e) if errors < MAX_ERRORS => {
                if errors == 0 {
                    eprintln!("rill-bench catchup: GET {url}: {e}; retrying");
                }
                errors += 1;
                continue;
            }
            Err(e) => return Err(format!("{errors} errors, the last: {e}").into()),
        };
        hist.saturating_record((sent.elapsed().as_micros() as u64).max(1));
        requests += 1;
        if !r.status.is_success() {
            return Err(format!("GET {path}?offset={offset}: {}", r.status).into());
        }
        bytes += r.body_len as u64;
        let next = r.next_offset.ok_or("response without Stream-Next-Offset")?;
        if r.up_to_date || (r.body_len == 0 && next == offset) {
            break;
        }
        offset = next;
    }
    Ok((bytes, requests, errors, hist))
}
