//! A request's body as it arrives (RFC 9112 §6: Content-Length or chunked),
//! answering `Expect: 100-continue`, under two bounds an abusive or stalled
//! sender meets: bytes held are leased from the shard's share of
//! `--max-request-bytes` as they arrive (never on a declared length alone),
//! and the body must keep an average pace (`--min-request-rate`, after an
//! `--idle-timeout-ms` grace, as Apache's mod_reqtimeout `MinRate` does).
//! A body still arriving a second after the shard began to stop gets 503.

use std::time::{Duration, Instant};

use bytes::Bytes;

use monoio::net::TcpStream;

use super::Shard;
use super::conn::{Fill, Idle, READ_CHUNK, fill_to, http_error, write_bytes};
use super::replies::{COUNTED_BYTES, ReplyLease, bodies_busy};
use crate::http::chunked::ChunkedDecoder;
use crate::http::parse::{BodyKind, Limits, RequestHead};
use crate::protocol::Response;
use crate::protocol::append::SHARED_FROM;

/// Leases on the request body bytes a connection holds; bodies under
/// `COUNTED_BYTES` take none (a read buffer's worth).
pub type BodyLeases = Vec<ReplyLease>;

/// An append's body as the protocol takes it: shared, so that a large one
/// is stored as sent (`append::canonical` copies a small one). The cache
/// keeps the allocation for as long as the bytes stay cached and counts
/// only their length, so a large body whose buffer has more than a quarter
/// of its length spare (a chunked one) is copied to its length first; a
/// counted body has `READ_CHUNK` spare and is not.
pub fn shared(body: Vec<u8>) -> Bytes {
    let spare = body.capacity() - body.len();
    match body.len() >= SHARED_FROM && spare > body.len() / 4 {
        true => Bytes::copy_from_slice(&body),
        false => Bytes::from(body),
    }
}

/// The first lease of a counted body; later ones double what is leased, so
/// a large body takes a few leases and its buffer a few reallocations.
const FIRST_LEASE_BYTES: u64 = COUNTED_BYTES as u64;

/// How long a body may still take: the idle timeout bounds each wait, and
/// the whole body's deadline moves out one second per `min_rate` bytes.
/// Once the shard stops, a body still arriving has `BODY_STOP_GRACE` more.
pub struct Pace<'a> {
    started: Instant,
    idle: Duration,
    min_rate: u64,
    stopping: &'a Idle,
}

impl Pace<'_> {
    pub fn new(idle: Duration, min_rate: u64, stopping: &Idle) -> Pace<'_> {
        Pace {
            started: Instant::now(),
            idle,
            min_rate,
            stopping,
        }
    }

    /// How long the next read may wait once `arrived` bytes came; `None`
    /// when the body is already behind its pace.
    fn wait(&self, arrived: u64) -> Option<Duration> {
        if self.min_rate == 0 {
            return Some(self.idle);
        }
        let earned = Duration::from_secs_f64(arrived as f64 / self.min_rate as f64);
        let deadline = self.started + self.idle + earned;
        let left = deadline.checked_duration_since(Instant::now())?;
        Some(left.min(self.idle)).filter(|left| !left.is_zero())
    }
}

/// The body leases of one request, taken ahead of what arrives.
struct Leases<'a> {
    shard: &'a Shard,
    held: BodyLeases,
    leased: u64,
    /// Where leasing stops: the declared length, or the body limit.
    total: u64,
}

impl Leases<'_> {
    /// Makes sure a read's worth past `arrived` is leased (or everything
    /// up to `total`); `Err` with the 503 when the shard's share is spent.
    fn cover(&mut self, arrived: u64) -> Result<u64, Response> {
        let wanted = (arrived + READ_CHUNK as u64).min(self.total);
        if wanted > self.leased {
            let next = (self.leased * 2)
                .max(arrived + FIRST_LEASE_BYTES)
                .min(self.total);
            let lease = self.shard.lease_body(next - self.leased, self.leased);
            self.held.push(lease.ok_or_else(bodies_busy)?);
            self.leased = next;
        }
        debug_assert!(self.leased >= wanted);
        Ok(self.leased)
    }
}

pub async fn read_body(
    (shard, socket): (&Shard, &mut TcpStream),
    buf: &mut Vec<u8>,
    head: &RequestHead,
    limits: &Limits,
    pace: Pace<'_>,
) -> Result<(Vec<u8>, BodyLeases), Response> {
    let total = match head.body {
        BodyKind::None => return Ok((Vec::new(), BodyLeases::new())),
        BodyKind::Length(len) => len,
        BodyKind::Chunked => limits.max_body_bytes,
    };
    let mut leases = Leases {
        shard,
        held: BodyLeases::new(),
        leased: 0,
        total,
    };
    let counted = matches!(head.body, BodyKind::Length(len) if len >= COUNTED_BYTES as u64);
    if counted {
        // Before `100 Continue`: a client told to wait is not invited to
        // send a body the shard has no room for (RFC 9110 §10.1.1).
        leases.cover(buf.len() as u64)?;
    }
    if head.expect_continue && total > 0 {
        // Nor invited once the stop's grace has passed: it would be refused.
        if pace.stopping.body_grace_passed() {
            return Err(super::listener::stopped());
        }
        if buf.is_empty() && !write_bytes(socket, b"HTTP/1.1 100 Continue\r\n\r\n".to_vec()).await {
            return Err(Response::error(400, "disconnected", "client went away"));
        }
    }
    match head.body {
        BodyKind::Length(len) if !counted => {
            let body = read_length(socket, buf, len as usize, &pace).await?;
            Ok((body, BodyLeases::new()))
        }
        BodyKind::Length(_) => read_counted(socket, buf, leases, &pace).await,
        _ => read_chunked(socket, buf, leases, limits, &pace).await,
    }
}

/// A small body: it grows with its bytes like any read buffer.
async fn read_length(
    socket: &mut TcpStream,
    buf: &mut Vec<u8>,
    len: usize,
    pace: &Pace<'_>,
) -> Result<Vec<u8>, Response> {
    while buf.len() < len {
        next_read(socket, buf, pace, (buf.len() as u64, usize::MAX)).await?;
    }
    let rest = buf.split_off(len);
    Ok(std::mem::replace(buf, rest))
}

/// A large Content-Length body, read no further than its leases reach (a
/// read chunk past them).
async fn read_counted(
    socket: &mut TcpStream,
    buf: &mut Vec<u8>,
    mut leases: Leases<'_>,
    pace: &Pace<'_>,
) -> Result<(Vec<u8>, BodyLeases), Response> {
    let len = leases.total as usize;
    // Room for all of it at once: address space, not memory (its pages are
    // touched only as leased bytes arrive), so a large body is not copied
    // as it grows (session 10's profile: 8.7 % of a 1 MiB append's CPU).
    // Where the kernel will not promise that much (strict overcommit), the
    // buffer grows with the leases instead.
    if buf.capacity() < len + READ_CHUNK {
        let _ = buf.try_reserve_exact(len + READ_CHUNK - buf.len());
    }
    while buf.len() < len {
        let leased = leases.cover(buf.len() as u64)? as usize;
        let end = leased + READ_CHUNK;
        if buf.capacity() < end {
            buf.reserve_exact(end - buf.len());
        }
        next_read(socket, buf, pace, (buf.len() as u64, end)).await?;
    }
    // What came with the head, or filled room the buffer had before its
    // leases, is covered too.
    leases.cover(len as u64)?;
    let rest = buf.split_off(len);
    Ok((std::mem::replace(buf, rest), leases.held))
}

async fn read_chunked(
    socket: &mut TcpStream,
    buf: &mut Vec<u8>,
    mut leases: Leases<'_>,
    limits: &Limits,
    pace: &Pace<'_>,
) -> Result<(Vec<u8>, BodyLeases), Response> {
    let mut decoder =
        ChunkedDecoder::new(limits.max_body_bytes).with_max_trailer_bytes(limits.max_head_bytes);
    let mut body = Vec::new();
    let mut arrived = buf.len() as u64;
    loop {
        let used = decoder.decode(buf, &mut body).map_err(|e| http_error(&e))?;
        buf.drain(..used);
        if body.len() >= COUNTED_BYTES {
            leases.cover(body.len() as u64)?;
        }
        if decoder.is_done() {
            return Ok((body, leases.held));
        }
        let before = buf.len();
        next_read(socket, buf, pace, (arrived, usize::MAX)).await?;
        arrived += (buf.len() - before) as u64;
    }
}

/// Reads more of a body that has `arrived` bytes so far, within its pace,
/// filling `buf` no further than `end`.
async fn next_read(
    socket: &mut TcpStream,
    buf: &mut Vec<u8>,
    pace: &Pace<'_>,
    (arrived, end): (u64, usize),
) -> Result<(), Response> {
    let Some(wait) = pace.wait(arrived) else {
        return Err(too_slow());
    };
    let filled = monoio::select! {
        // Bytes read in the same wake-up as the grace's end are kept.
        biased;
        filled = fill_to(socket, buf, wait, end) => filled,
        // The read's buffer goes with it: the request is refused anyway.
        _ = pace.stopping.body_grace_over() => return Err(super::listener::stopped()),
    };
    match filled {
        Fill::Data => Ok(()),
        Fill::Eof => Err(Response::error(
            400,
            "truncated_body",
            "connection closed inside the body",
        )),
        Fill::Timeout => Err(too_slow()),
    }
}

fn too_slow() -> Response {
    Response::error(408, "request_timeout", "request body not received in time")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pace_allows_the_idle_grace_then_a_second_per_min_rate_bytes() {
        let idle = Duration::from_secs(2);
        let open = Idle::default();
        let mut pace = Pace::new(idle, 1000, &open);
        assert_eq!(pace.wait(0).map(|w| w <= idle), Some(true));
        pace.started -= Duration::from_secs(5);
        assert_eq!(pace.wait(2000), None, "5 s for 2,000 bytes: behind");
        let left = pace.wait(4000).expect("4,000 bytes earn 4 s + 2 s");
        assert!(left > Duration::from_millis(900) && left <= Duration::from_secs(1));
        assert_eq!(pace.wait(1 << 30), Some(idle), "a wait is never past idle");
    }

    #[test]
    fn without_a_floor_only_the_idle_timeout_bounds_a_wait() {
        let idle = Duration::from_secs(2);
        let open = Idle::default();
        let mut pace = Pace::new(idle, 0, &open);
        pace.started -= Duration::from_secs(3600);
        assert_eq!(pace.wait(0), Some(idle));
    }

    #[test]
    fn a_body_is_shared_unless_its_buffer_has_much_room_to_spare() {
        let mut tight = Vec::with_capacity(1 << 20);
        tight.resize((1 << 20) - READ_CHUNK, b'x');
        let at = tight.as_ptr();
        let kept = shared(tight);
        assert_eq!(kept.as_ptr(), at, "a counted body's buffer is kept");
        let mut loose = Vec::with_capacity(4 * SHARED_FROM);
        loose.resize(SHARED_FROM, b'x');
        let at = loose.as_ptr();
        let copy = shared(loose);
        assert_ne!(copy.as_ptr(), at, "a mostly empty buffer is copied");
        assert_eq!(copy.len(), SHARED_FROM);
        let mut small = Vec::with_capacity(4096);
        small.resize(100, b'x');
        let at = small.as_ptr();
        assert_eq!(shared(small).as_ptr(), at, "canonical copies a small one");
    }
}
