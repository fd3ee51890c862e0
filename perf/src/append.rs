//! The `append` scenario: N streams, one closed-loop writer per stream on its
//! own keep-alive connection (or K connections cycling over the streams),
//! optionally paced to a total rate. `--messages json` sends each append as
//! one JSON object of the payload size to `application/json` streams (JSON
//! mode, PROTOCOL.md §7), where a server validates and frames every message.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hyper::Method;
use serde::Serialize;
use tokio::sync::Barrier;

use crate::Api;
use crate::client::{Conn, Error, Target};
use crate::stats::{self, Latency};

#[derive(clap::Args, Debug)]
pub struct AppendArgs {
    /// Server base URL, e.g. http://127.0.0.1:4437
    #[arg(long)]
    url: String,
    #[arg(long, value_enum, default_value = "v1")]
    api: Api,
    /// Bucket name for --api bucket [default: bench-{run}]
    #[arg(long)]
    bucket: Option<String>,
    /// Number of streams.
    #[arg(long, default_value_t = 100)]
    streams: usize,
    /// Payload size of each append, in bytes.
    #[arg(long, default_value_t = 256)]
    payload: usize,
    /// What each append carries: opaque text, or one JSON object (at least
    /// 10 bytes) to a JSON-mode stream.
    #[arg(long, value_enum, default_value = "text")]
    messages: Messages,
    /// Measurement length in seconds.
    #[arg(long, default_value_t = 10.0)]
    duration: f64,
    /// K connections cycling over the N streams instead of one per stream.
    #[arg(long)]
    shared_connections: Option<usize>,
    /// Total appends per second over all connections (open loop; latency is
    /// measured from each request's scheduled time). Default: closed loop.
    #[arg(long)]
    rate: Option<f64>,
    /// Stop after this many appends in total (split over the connections),
    /// or at --duration, whichever comes first.
    #[arg(long)]
    total_appends: Option<u64>,
    #[command(flatten)]
    out: crate::output::Output,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Messages {
    /// `text/plain` streams, a payload of `x` bytes.
    Text,
    /// `application/json` streams, each payload one object `{"pad":"x…"}`.
    Json,
}

impl Messages {
    fn content_type(self) -> &'static str {
        match self {
            Messages::Text => "text/plain",
            Messages::Json => "application/json",
        }
    }

    /// One append's body of exactly `size` bytes.
    fn payload(self, size: usize) -> Result<Bytes, Error> {
        match self {
            Messages::Text => Ok(Bytes::from(vec![b'x'; size])),
            Messages::Json => {
                const FRAME: usize = r#"{"pad":""}"#.len();
                if size < FRAME {
                    return Err(
                        format!("--messages json needs --payload of {FRAME} or more").into(),
                    );
                }
                let body = format!(r#"{{"pad":"{}"}}"#, "x".repeat(size - FRAME));
                debug_assert_eq!(body.len(), size);
                Ok(Bytes::from(body))
            }
        }
    }
}

#[derive(Serialize)]
struct Report {
    scenario: &'static str,
    label: String,
    url: String,
    api: Api,
    streams: usize,
    connections: usize,
    messages: Messages,
    payload_bytes: usize,
    duration_s: f64,
    rate_limit: Option<f64>,
    elapsed_s: f64,
    appends: u64,
    errors: u64,
    error_kinds: BTreeMap<String, u64>,
    appends_per_s: f64,
    mb_per_s: f64,
    latency_us: Latency,
    client_cpu_pct: f64,
    server_cpu_pct: Option<f64>,
    unix_time: u64,
}

struct WorkerResult {
    ok: u64,
    errors: BTreeMap<String, u64>,
    hist: hdrhistogram::Histogram<u64>,
}

fn stream_path(api: Api, run: &str, bucket: &str, i: usize) -> String {
    match api {
        Api::V1 => format!("/v1/stream/bench-{run}-{i}"),
        Api::Bucket => format!("/{bucket}/bench-{i}"),
    }
}

pub async fn run(args: AppendArgs) -> Result<(), Error> {
    if args.streams == 0 || args.payload == 0 || args.duration <= 0.0 {
        return Err("--streams, --payload and --duration must be positive".into());
    }
    let target = Target::parse(&args.url)?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?;
    let run = format!("{}-{}", now.as_millis(), std::process::id());
    let bucket = args
        .bucket
        .clone()
        .unwrap_or_else(|| format!("bench-{run}"));
    if args.api == Api::Bucket {
        let reply = Conn::new(target.clone())
            .send(Method::PUT, &format!("/{bucket}"), None, Bytes::new())
            .await?;
        if !reply.status.is_success() && reply.status.as_u16() != 409 {
            return Err(format!("PUT /{bucket}: {}", reply.status).into());
        }
    }
    let paths: Vec<String> = (0..args.streams)
        .map(|i| stream_path(args.api, &run, &bucket, i))
        .collect();
    let workers = args
        .shared_connections
        .unwrap_or(args.streams)
        .clamp(1, args.streams);
    let payload = args.messages.payload(args.payload)?;
    let content_type = args.messages.content_type();
    let duration = Duration::from_secs_f64(args.duration);
    // Each worker's interval between sends when paced.
    let interval = args
        .rate
        .filter(|r| *r > 0.0)
        .map(|r| Duration::from_secs_f64(workers as f64 / r));
    // Workers + this task meet twice: after creating their streams, and
    // after the measurement starts (so the CPU baseline is taken in time).
    let barrier = Arc::new(Barrier::new(workers + 1));
    let mut handles = Vec::with_capacity(workers);
    for w in 0..workers {
        let mine: Vec<String> = paths.iter().skip(w).step_by(workers).cloned().collect();
        let target = target.clone();
        let payload = payload.clone();
        let barrier = barrier.clone();
        // Worker w's share of --total-appends (the first ones take the remainder).
        let limit = args.total_appends.map(|t| {
            let w = w as u64;
            let n = workers as u64;
            t / n + u64::from(w < t % n)
        });
        handles.push(tokio::spawn(async move {
            let plan = Plan {
                content_type,
                payload,
                duration,
                interval,
                limit,
            };
            worker(target, mine, plan, barrier).await
        }));
    }
    barrier.wait().await; // every stream created
    let cpu0 = stats::self_cpu_seconds();
    let server0 = args.out.server_cpu();
    let start = Instant::now();
    barrier.wait().await; // go
    let mut ok = 0;
    let mut error_kinds = BTreeMap::new();
    let mut hist = stats::histogram();
    for handle in handles {
        let r = handle.await??;
        ok += r.ok;
        for (k, v) in r.errors {
            *error_kinds.entry(k).or_insert(0) += v;
        }
        hist.add(&r.hist)?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let client_cpu = stats::self_cpu_seconds() - cpu0;
    let server_cpu = match (server0, args.out.server_cpu()) {
        (Some(a), Some(b)) => Some((b - a) / elapsed * 100.0),
        _ => None,
    };
    let errors = error_kinds.values().sum();
    let report = Report {
        scenario: "append",
        label: args.out.label.clone(),
        url: args.url.clone(),
        api: args.api,
        streams: args.streams,
        connections: workers,
        messages: args.messages,
        payload_bytes: args.payload,
        duration_s: args.duration,
        rate_limit: args.rate,
        elapsed_s: elapsed,
        appends: ok,
        errors,
        error_kinds,
        appends_per_s: ok as f64 / elapsed,
        mb_per_s: (ok * args.payload as u64) as f64 / elapsed / 1e6,
        latency_us: Latency::of(&hist),
        client_cpu_pct: client_cpu / elapsed * 100.0,
        server_cpu_pct: server_cpu,
        unix_time: now.as_secs(),
    };
    print_table(&report);
    args.out.write_json(&report)?;
    Ok(())
}

/// What one worker sends, and for how long.
struct Plan {
    content_type: &'static str,
    payload: Bytes,
    duration: Duration,
    interval: Option<Duration>,
    limit: Option<u64>,
}

async fn worker(
    target: Target,
    paths: Vec<String>,
    plan: Plan,
    barrier: Arc<Barrier>,
) -> Result<WorkerResult, Error> {
    let Plan {
        content_type,
        payload,
        duration,
        interval,
        limit,
    } = plan;
    let mut conn = Conn::new(target);
    let mut errors = BTreeMap::new();
    let created = create_streams(&mut conn, &paths, content_type).await;
    // Meet the others even when creation failed, so the run ends with the
    // error instead of waiting forever at the barrier.
    barrier.wait().await;
    barrier.wait().await;
    created?;
    let start = Instant::now();
    let deadline = start + duration;
    let mut hist = stats::histogram();
    let mut ok = 0u64;
    let mut sent = 0u64;
    loop {
        let scheduled = match interval {
            Some(every) => {
                let at = start + every.mul_f64(sent as f64);
                tokio::time::sleep_until(at.into()).await;
                at
            }
            None => Instant::now(),
        };
        if scheduled >= deadline || limit.is_some_and(|l| sent >= l) {
            break;
        }
        let path = &paths[(sent as usize) % paths.len()];
        sent += 1;
        match conn
            .send(Method::POST, path, Some(content_type), payload.clone())
            .await
        {
            Ok(r) if r.status.is_success() => {
                ok += 1;
                let micros = scheduled.elapsed().as_micros() as u64;
                hist.saturating_record(micros.max(1));
            }
            Ok(r) => {
                *errors
                    .entry(format!("http {}", r.status.as_u16()))
                    .or_insert(0) += 1
            }
            Err(e) => {
                *errors.entry(format!("transport: {e}")).or_insert(0) += 1;
                // Do not spin on a refused connection.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    Ok(WorkerResult { ok, errors, hist })
}

/// `PUT` each stream; the first failure, with its body.
async fn create_streams(
    conn: &mut Conn,
    paths: &[String],
    content_type: &str,
) -> Result<(), Error> {
    for path in paths {
        match conn
            .send(Method::PUT, path, Some(content_type), Bytes::new())
            .await
        {
            Ok(r) if r.status.is_success() => {}
            Ok(r) => {
                let body = String::from_utf8_lossy(&r.body);
                return Err(format!("creating {path}: {} {body}", r.status).into());
            }
            Err(e) => return Err(format!("creating {path}: {e}").into()),
        }
    }
    Ok(())
}

fn print_table(r: &Report) {
    let l = &r.latency_us;
    let label = if r.label.is_empty() { &r.url } else { &r.label };
    println!(
        "append {label}: {} streams, {} connections, {} B {} payload, {:.1} s{}",
        r.streams,
        r.connections,
        r.payload_bytes,
        r.messages.content_type(),
        r.elapsed_s,
        r.rate_limit
            .map(|x| format!(", rate {x}/s"))
            .unwrap_or_default()
    );
    println!(
        "{:>12} {:>9} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8} {:>8} {:>8}",
        "appends/s",
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
        "{:>12.0} {:>9.2} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8} {:>7.0}% {:>8}",
        r.appends_per_s,
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
    use clap::Parser;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        append: AppendArgs,
    }

    /// A server that answers every request on every connection with 400.
    async fn refusing_server() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut request = [0u8; 4096];
                    while socket.read(&mut request).await.is_ok_and(|n| n > 0) {
                        let refusal =
                            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 7\r\n\r\nrefused";
                        if socket.write_all(refusal).await.is_err() {
                            break;
                        }
                    }
                });
            }
        });
        url
    }

    #[tokio::test]
    async fn a_refused_stream_creation_ends_the_run_with_its_error() {
        let url = refusing_server().await;
        let args = Cli::parse_from(["append", "--url", &url, "--streams", "3", "--duration", "1"]);
        let run = tokio::time::timeout(Duration::from_secs(20), run(args.append));
        let error = run
            .await
            .expect("the run ends instead of waiting at its barrier");
        let message = error.expect_err("creation was refused").to_string();
        assert!(
            message.contains("400") && message.contains("refused"),
            "{message}"
        );
    }

    #[test]
    fn a_json_message_is_one_object_of_exactly_the_payload_size() {
        for size in [10, 11, 256, 4096] {
            let body = Messages::Json.payload(size).unwrap();
            assert_eq!(body.len(), size);
            let value: serde_json::Value = serde_json::from_slice(&body).unwrap();
            assert!(value.is_object(), "{value}");
        }
        assert!(Messages::Json.payload(9).is_err());
        assert_eq!(
            Messages::Text.payload(3).unwrap(),
            Bytes::from_static(b"xxx")
        );
    }
}
