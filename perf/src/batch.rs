//! The `batch` scenario (extensions §4): N `text/plain` streams in a bucket,
//! one closed-loop writer per stream on its own keep-alive connection, each
//! POSTing `/{bucket}/{stream}/append-batch` with F frames of P bytes
//! (`uint32` big-endian length + payload per frame). The server answers 200
//! with a JSON array of per-frame acknowledgements; a frame counts as
//! appended when its ack's `status` is 204.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hyper::Method;
use serde::{Deserialize, Serialize};
use tokio::sync::Barrier;

use crate::client::{Conn, Error, Target};
use crate::stats::{self, Latency};

#[derive(clap::Args, Debug)]
pub struct BatchArgs {
    /// Server base URL, e.g. http://127.0.0.1:4437
    #[arg(long)]
    url: String,
    /// Bucket to create (`PUT /{bucket}`; 201 or 409 are both fine).
    #[arg(long)]
    bucket: String,
    /// Number of streams (`/{bucket}/bench-{run}-{i}`), one connection each.
    #[arg(long, default_value_t = 1)]
    streams: usize,
    /// Frames per append-batch request (the server allows at most 512).
    #[arg(long, default_value_t = 512)]
    frames: usize,
    /// Payload bytes of each frame (after its 4-byte length).
    #[arg(long, default_value_t = 256)]
    payload: usize,
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
    streams: usize,
    connections: usize,
    frames_per_request: usize,
    payload_bytes: usize,
    request_body_bytes: usize,
    duration_s: f64,
    elapsed_s: f64,
    /// Requests answered 200 (whatever their frames' statuses).
    requests: u64,
    /// Frames acknowledged with status 204.
    frames: u64,
    /// Non-200 answers and transport errors.
    request_errors: u64,
    /// Frames in 200 answers whose ack was not 204 (or was missing).
    frame_errors: u64,
    error_kinds: BTreeMap<String, u64>,
    requests_per_s: f64,
    frames_per_s: f64,
    /// Payload bytes of acknowledged frames (length prefixes excluded).
    mb_per_s: f64,
    /// Per request, send to the last byte of the acks.
    latency_us: Latency,
    client_cpu_pct: f64,
    server_cpu_pct: Option<f64>,
    unix_time: u64,
}

#[derive(Default)]
struct Counts {
    requests: u64,
    frames: u64,
    request_errors: u64,
    frame_errors: u64,
    kinds: BTreeMap<String, u64>,
}

impl Counts {
    fn add(&mut self, other: Counts) {
        self.requests += other.requests;
        self.frames += other.frames;
        self.request_errors += other.request_errors;
        self.frame_errors += other.frame_errors;
        for (k, v) in other.kinds {
            *self.kinds.entry(k).or_insert(0) += v;
        }
    }
}

/// The only field of an ack this scenario needs.
#[derive(Deserialize)]
struct Ack {
    status: u16,
}

/// F frames, each `uint32 BE length` + P bytes of `x`.
fn framed_body(frames: usize, payload: usize) -> Result<Bytes, Error> {
    let len = u32::try_from(payload).map_err(|_| "--payload does not fit in a uint32")?;
    let mut body = Vec::with_capacity(frames * (4 + payload));
    for _ in 0..frames {
        body.extend_from_slice(&len.to_be_bytes());
        body.resize(body.len() + payload, b'x');
    }
    Ok(Bytes::from(body))
}

pub async fn run(args: BatchArgs) -> Result<(), Error> {
    if args.streams == 0 || args.frames == 0 || args.payload == 0 || args.duration <= 0.0 {
        return Err("--streams, --frames, --payload and --duration must be positive".into());
    }
    let target = Target::parse(&args.url)?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?;
    let run = format!("{}-{}", now.as_millis(), std::process::id());
    let bucket = args.bucket.clone();
    let reply = Conn::new(target.clone())
        .send(Method::PUT, &format!("/{bucket}"), None, Bytes::new())
        .await?;
    if !reply.status.is_success() && reply.status.as_u16() != 409 {
        return Err(format!("PUT /{bucket}: {}", reply.status).into());
    }
    let body = framed_body(args.frames, args.payload)?;
    let duration = Duration::from_secs_f64(args.duration);
    // Workers + this task meet twice: after creating their streams, and
    // when the measurement starts (so the CPU baseline is taken in time).
    let barrier = Arc::new(Barrier::new(args.streams + 1));
    let mut handles = Vec::with_capacity(args.streams);
    for i in 0..args.streams {
        let stream = format!("/{bucket}/bench-{run}-{i}");
        let target = target.clone();
        let body = body.clone();
        let barrier = barrier.clone();
        let frames = args.frames;
        handles.push(tokio::spawn(async move {
            worker(target, stream, body, frames, duration, barrier).await
        }));
    }
    barrier.wait().await; // every stream created
    let cpu0 = stats::self_cpu_seconds();
    let server0 = args.out.server_cpu();
    let start = Instant::now();
    barrier.wait().await; // go
    let mut counts = Counts::default();
    let mut hist = stats::histogram();
    for handle in handles {
        let (c, h) = handle.await??;
        counts.add(c);
        hist.add(&h)?;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let client_cpu = stats::self_cpu_seconds() - cpu0;
    let server_cpu = match (server0, args.out.server_cpu()) {
        (Some(a), Some(b)) => Some((b - a) / elapsed * 100.0),
        _ => None,
    };
    let report = Report {
        scenario: "batch",
        label: args.out.label.clone(),
        url: args.url.clone(),
        bucket,
        streams: args.streams,
        connections: args.streams,
        frames_per_request: args.frames,
        payload_bytes: args.payload,
        request_body_bytes: body.len(),
        duration_s: args.duration,
        elapsed_s: elapsed,
        requests: counts.requests,
        frames: counts.frames,
        request_errors: counts.request_errors,
        frame_errors: counts.frame_errors,
        error_kinds: counts.kinds,
        requests_per_s: counts.requests as f64 / elapsed,
        frames_per_s: counts.frames as f64 / elapsed,
        mb_per_s: (counts.frames * args.payload as u64) as f64 / elapsed / 1e6,
        latency_us: Latency::of(&hist),
        client_cpu_pct: client_cpu / elapsed * 100.0,
        server_cpu_pct: server_cpu,
        unix_time: now.as_secs(),
    };
    print_table(&report);
    args.out.write_json(&report)?;
    Ok(())
}

async fn worker(
    target: Target,
    stream: String,
    body: Bytes,
    frames: usize,
    duration: Duration,
    barrier: Arc<Barrier>,
) -> Result<(Counts, hdrhistogram::Histogram<u64>), Error> {
    let mut conn = Conn::new(target);
    match conn
        .send(Method::PUT, &stream, Some("text/plain"), Bytes::new())
        .await
    {
        Ok(r) if r.status.is_success() => {}
        Ok(r) => return Err(format!("creating {stream}: {}", r.status).into()),
        Err(e) => return Err(format!("creating {stream}: {e}").into()),
    }
    let path = format!("{stream}/append-batch");
    barrier.wait().await;
    barrier.wait().await;
    let deadline = Instant::now() + duration;
    let mut hist = stats::histogram();
    let mut c = Counts::default();
    loop {
        let sent = Instant::now();
        if sent >= deadline {
            break;
        }
        match conn
            .send(Method::POST, &path, Some("text/plain"), body.clone())
            .await
        {
            Ok(r) if r.status.as_u16() == 200 => {
                let micros = sent.elapsed().as_micros() as u64;
                hist.saturating_record(micros.max(1));
                c.requests += 1;
                match serde_json::from_slice::<Vec<Ack>>(&r.body) {
                    Ok(acks) => {
                        for ack in &acks {
                            if ack.status == 204 {
                                c.frames += 1;
                            } else {
                                c.frame_errors += 1;
                                *c.kinds.entry(format!("frame {}", ack.status)).or_insert(0) += 1;
                            }
                        }
                        if acks.len() != frames {
                            let missing = frames.abs_diff(acks.len()) as u64;
                            c.frame_errors += missing;
                            *c.kinds
                                .entry(format!("acks {} for {frames} frames", acks.len()))
                                .or_insert(0) += missing;
                        }
                    }
                    Err(e) => {
                        c.frame_errors += frames as u64;
                        *c.kinds.entry(format!("bad acks: {e}")).or_insert(0) += frames as u64;
                    }
                }
            }
            Ok(r) => {
                c.request_errors += 1;
                *c.kinds
                    .entry(format!("http {}", r.status.as_u16()))
                    .or_insert(0) += 1;
            }
            Err(e) => {
                c.request_errors += 1;
                *c.kinds.entry(format!("transport: {e}")).or_insert(0) += 1;
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
        "batch {label}: {} streams, {} frames × {} B per request ({} B body), {:.1} s",
        r.streams, r.frames_per_request, r.payload_bytes, r.request_body_bytes, r.elapsed_s
    );
    println!(
        "{:>9} {:>10} {:>8} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8} {:>8} {:>8} {:>8}",
        "req/s",
        "frames/s",
        "MB/s",
        "p50 µs",
        "p90 µs",
        "p99 µs",
        "p999 µs",
        "max µs",
        "req err",
        "frm err",
        "cli CPU",
        "srv CPU"
    );
    println!(
        "{:>9.0} {:>10.0} {:>8.2} {:>8} {:>8} {:>8} {:>8} {:>9} {:>8} {:>8} {:>7.0}% {:>8}",
        r.requests_per_s,
        r.frames_per_s,
        r.mb_per_s,
        l.p50,
        l.p90,
        l.p99,
        l.p999,
        l.max,
        r.request_errors,
        r.frame_errors,
        r.client_cpu_pct,
        r.server_cpu_pct
            .map(|c| format!("{c:.0}%"))
            .unwrap_or_else(|| "-".into())
    );
    for (kind, n) in &r.error_kinds {
        println!("  error {kind}: {n}");
    }
}
