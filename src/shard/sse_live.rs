//! SSE reads (PROTOCOL.md §5.7, §5.8) held by the owning shard: events
//! streamed as chunks until the stream closes, the cycle
//! (`--sse-cycle-ms`) ends or the shard stops. An event is fetched and
//! rendered once per audience position and shared (`super::audience`);
//! its window is leased against `--max-reply-bytes` before it is fetched.

use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use monoio::net::TcpStream;

use super::Shard;
use super::audience::{Audience, SharedStep};
use super::conn::{respond, responding, send_piece, write_bytes, write_stall};
use super::live::{expiry, vanished, window_bytes};
use super::replies::ReplyLease;
use super::store;
use crate::clock;
use crate::http::render::{self, Persistence, Streamed};
use crate::metrics::Mode;
use crate::protocol::read::{self, ReadPlan};
use crate::protocol::sse::{self, SseCursor};

pub(super) async fn serve(
    shard: &Rc<Shard>,
    (socket, streamed): (&mut TcpStream, Streamed),
    plan: ReadPlan,
    keep: Persistence,
) -> bool {
    let head = shard
        .table
        .borrow()
        .get_incarnation(&plan.key, plan.stream_id)
        .map(|stream| {
            let ended = sse::closed_at_start(stream, &plan);
            (read::sse_head(stream, &plan), ended)
        });
    let Some((head, ended)) = head else {
        return respond(shard, socket, vanished(shard, &plan.key), keep, false).await;
    };
    // A stream already closed at the client's offset gets its final control
    // event and then the connection closes (PROTOCOL.md §5.7: "MUST then
    // close the connection"), announced by `Connection: close`.
    let keep = keep.and(!ended && streamed.keeps_alive());
    responding(shard, socket, head.status);
    let mut out = Vec::new();
    render::encode(&head, streamed.framing(), keep, false, &mut out);
    if !write_bytes(socket, out).await {
        return false;
    }
    let _live = shard.metrics.subscriber(Mode::Sse);
    let (key, id) = (plan.key.clone(), plan.stream_id);
    let audience = shard.waiters.join(&key);
    let cursor = SseCursor::new(plan, clock::now_ms());
    let ok = stream_events(shard, (socket, streamed), cursor, &audience).await;
    shard.waiters.release(&key, audience);
    // After a stream's closure (or deletion) the connection closes too
    // (PROTOCOL.md §5.8 "MUST then close the connection").
    let ended = shard
        .table
        .borrow()
        .get_waited_on(&key, id, clock::now_ms())
        .is_none_or(|s| s.is_closed());
    ok && write_bytes(socket, streamed.end().to_vec()).await && keep.alive() && !ended
}

/// The next step for `cursor`: the audience's shared step when another
/// response already rendered it, otherwise fetched, rendered and shared.
/// `None` when the stream is gone or has nothing past the cursor; `Err`
/// when the log failed.
async fn next_step(
    shard: &Shard,
    cursor: &mut SseCursor,
    audience: &Audience,
) -> Option<Result<Rc<SharedStep>, ()>> {
    let now_ms = clock::now_ms();
    let (window, key) = {
        let table = shard.table.borrow();
        // Expired, it is gone: what is left unsent is not served (§5.1).
        let stream = table.get_waited_on(&cursor.plan.key, cursor.plan.stream_id, now_ms)?;
        let window = cursor.next_window(stream)?;
        (window, cursor.step_key(stream, window, now_ms))
    };
    if let Some(step) = audience.step(&key) {
        cursor.follow(&step.after);
        return Some(Ok(step));
    }
    let (start, end, cut) = window;
    let Some(lease) = lease_window(shard, window_bytes(start, end)).await else {
        return Some(Err(()));
    };
    let id = cursor.plan.stream_id;
    let Ok(fetched) = store::fetch(shard, &cursor.plan.key, id, start, end).await else {
        return Some(Err(()));
    };
    let table = shard.table.borrow();
    let stream = table.get_incarnation(&cursor.plan.key, cursor.plan.stream_id)?;
    // The fetch may have waited for the log: the key must still hold.
    let key = cursor.step_key(stream, window, now_ms);
    let step = cursor.emit(stream, cut, &fetched, now_ms);
    let mut chunk = Vec::new();
    render::chunk(&step.bytes, &mut chunk);
    Some(Ok(audience.share(SharedStep {
        key,
        chunk: Bytes::from(chunk),
        after: cursor.clone(),
        done: step.done,
        lease,
    })))
}

/// A lease on the `bytes` of an SSE step's window, taken before it is
/// fetched (`--max-reply-bytes`). A response under way cannot be answered
/// 503, so it waits for the budget (other readers finishing, or abandoned
/// as stalled) as long as a stalled write may wait; `None` past that, or
/// once the shard stops: the response then ends and its client resumes.
async fn lease_window(shard: &Shard, bytes: usize) -> Option<Option<ReplyLease>> {
    const RETRY: Duration = Duration::from_millis(20);
    let deadline = Instant::now() + write_stall();
    loop {
        if let Ok(lease) = shard.lease_counted_reply(bytes) {
            return Some(lease);
        }
        if shard.stopping.get() || Instant::now() >= deadline {
            return None;
        }
        monoio::time::sleep(RETRY).await;
    }
}

/// Sends every window available now. `Some(done)` when the response ends
/// (`done` false when the client went away or the log failed).
async fn drain(
    shard: &Shard,
    (socket, streamed): (&mut TcpStream, Streamed),
    cursor: &mut SseCursor,
    audience: &Audience,
) -> Option<bool> {
    loop {
        let step = match next_step(shard, cursor, audience).await? {
            Ok(step) => step,
            Err(()) => return Some(false),
        };
        if !step.chunk.is_empty() && !write_bytes(socket, streamed.from_chunk(&step.chunk)).await {
            return Some(false);
        }
        if step.done {
            return Some(true);
        }
    }
}

/// How often an idle SSE response sends a control event: the long-poll
/// timeout, or half a TTL stream's window when that is shorter. The reader
/// keeps such a stream alive (PROTOCOL.md §5.1); a write is how a reader
/// that went away is noticed, so that it stops doing so within a window.
fn keepalive_every(shard: &Shard, key: &str) -> Duration {
    let configured = Duration::from_millis(shard.config.long_poll_timeout_ms);
    let ttl = shard.table.borrow().get(key).and_then(|s| s.ttl_secs);
    let half_window = ttl.map(|secs| Duration::from_millis(secs.saturating_mul(500)));
    half_window.map_or(configured, |half| {
        configured.min(half.max(Duration::from_millis(100)))
    })
}

/// Writes events until the stream closes or is deleted, the cycle ends, the
/// shard stops, or the client goes away (`false`).
async fn stream_events(
    shard: &Rc<Shard>,
    (socket, streamed): (&mut TcpStream, Streamed),
    mut cursor: SseCursor,
    audience: &Audience,
) -> bool {
    let cycle_end = Instant::now() + Duration::from_millis(shard.config.sse_cycle_ms);
    let keepalive = keepalive_every(shard, &cursor.plan.key);
    let mut expires = expiry(shard, &cursor.plan);
    let signal = &audience.signal;
    let mut timed_out = false;
    loop {
        let seen = signal.generation();
        if let Some(ok) = drain(shard, (&mut *socket, streamed), &mut cursor, audience).await {
            return ok;
        }
        let now_ms = clock::now_ms();
        let step = cursor.idle(
            shard
                .table
                .borrow()
                .get_waited_on(&cursor.plan.key, cursor.plan.stream_id, now_ms),
            now_ms,
            timed_out,
        );
        let (key, id) = (&cursor.plan.key, cursor.plan.stream_id);
        shard.touch_incarnation(key, id, now_ms).await;
        if !send_piece(socket, streamed, &step.bytes).await {
            return false;
        }
        if step.done || shard.stopping.get() || Instant::now() >= cycle_end {
            return true;
        }
        let wake_at = cycle_end.min(Instant::now() + keepalive);
        let wake_at = expires.map_or(wake_at, |at| wake_at.min(at));
        // Woken by the expiry once: never again (no spin should the wall
        // clock lag behind the timer).
        expires = expires.filter(|&at| at > Instant::now());
        timed_out = monoio::time::timeout_at(wake_at.into(), signal.changed(seen))
            .await
            .is_err();
    }
}
