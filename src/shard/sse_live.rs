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
use super::conn::{respond, responding, send_piece, write_bytes};
use super::live::{expiry, vanished, window_bytes};
use super::replies::{ReplyLease, Turn};
use super::store;
use crate::clock;
use crate::http::render::{self, Persistence, Streamed};
use crate::metrics::Mode;
use crate::protocol::content_type;
use crate::protocol::read::{self, ReadPlan};
use crate::protocol::sse::{self, SseCursor};
use crate::protocol::window::Cut;
use crate::stream::Stream;

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

/// What `next_step` found.
enum Next {
    /// The step to write, shared with the audience.
    Step(Rc<SharedStep>),
    /// Nothing past the cursor, or the stream is gone.
    CaughtUp,
    /// Still waiting for the budget at the next keep-alive: the client
    /// should hear from the response meanwhile.
    StillWaiting,
    /// The response should end here and its client resume: its window's
    /// bytes did not come free within its cycle, or the shard stops.
    Pause,
    /// The log failed.
    Failed,
}

/// When a response waiting for the budget gives up, and when it sends a
/// keep-alive meanwhile.
#[derive(Clone, Copy)]
struct Pace {
    cycle_end: Instant,
    keepalive: Duration,
}

/// The next step for `cursor`: the audience's shared step when another
/// response already rendered it, otherwise fetched, rendered and shared.
/// Its window is leased before it is fetched (`--max-reply-bytes`); a
/// response under way cannot be answered 503, so past the budget it waits
/// its `turn` (`replies::Turn`, kept across keep-alives), planning anew
/// after each wake-up (the window may have grown, or another response
/// rendered it).
async fn next_step(
    shard: &Shard,
    cursor: &mut SseCursor,
    (audience, turn): (&Audience, &mut Option<Turn>),
    pace: Pace,
) -> Next {
    let until = pace.cycle_end.min(Instant::now() + pace.keepalive);
    loop {
        let now_ms = clock::now_ms();
        let (window, key, bytes) = {
            let table = shard.table.borrow();
            // Expired, it is gone: what is left unsent is not served (§5.1).
            let stream = table.get_waited_on(&cursor.plan.key, cursor.plan.stream_id, now_ms);
            let Some((stream, window)) = stream.and_then(|s| Some((s, cursor.next_window(s)?)))
            else {
                return Next::CaughtUp;
            };
            let bytes = rendered_bytes(stream, window_bytes(window.0, window.1));
            (window, cursor.step_key(stream, window, now_ms), bytes)
        };
        if let Some(step) = audience.step(&key) {
            cursor.follow(&step.after);
            return Next::Step(step);
        }
        match shard.lease_in_turn(bytes, turn.take()) {
            Ok(lease) => return fetch_step(shard, cursor, audience, window, lease).await,
            Err(waiting) => *turn = Some(waiting),
        }
        let waiting = turn.as_ref().expect("a turn in the queue");
        if !wait_turn(shard, waiting, until).await {
            return match shard.stopping.get() || Instant::now() >= pace.cycle_end {
                true => Next::Pause,
                false => Next::StillWaiting,
            };
        }
    }
}

/// The bytes the step for a window of `raw` bytes holds: base64 takes
/// 4/3 of them (PROTOCOL.md §5.7); framing is counted once rendered.
fn rendered_bytes(stream: &Stream, raw: usize) -> usize {
    match content_type::is_sse_text(&stream.content_type) {
        true => raw,
        false => raw.div_ceil(3).saturating_mul(4),
    }
}

/// Waits until the reply budget moves (bytes given back, the queue's
/// head left, or a step was shared); `false` at `until` or when the shard
/// stops.
async fn wait_turn(shard: &Shard, turn: &Turn, until: Instant) -> bool {
    if shard.stopping.get() || Instant::now() >= until {
        return false;
    }
    let stop = shard.stop.changed(shard.stop.generation());
    let moved = monoio::select! {
        biased;
        _ = stop => false,
        _ = turn.moved() => true,
        _ = monoio::time::sleep_until(until.into()) => false,
    };
    moved && !shard.stopping.get()
}

/// Fetches, renders and shares the step for `window`, leased by `lease`.
async fn fetch_step(
    shard: &Shard,
    cursor: &mut SseCursor,
    audience: &Audience,
    (start, end, cut): (u64, u64, Cut),
    lease: Option<ReplyLease>,
) -> Next {
    let now_ms = clock::now_ms();
    let (key, id) = (&cursor.plan.key, cursor.plan.stream_id);
    let Ok(fetched) = store::fetch(shard, key, id, start, end).await else {
        return Next::Failed;
    };
    let table = shard.table.borrow();
    let Some(stream) = table.get_incarnation(key, id) else {
        return Next::CaughtUp;
    };
    // The fetch may have waited for the log: the key must still hold.
    let key = cursor.step_key(stream, (start, end, cut), now_ms);
    let step = cursor.emit(stream, cut, &fetched, now_ms);
    let mut chunk = Vec::new();
    render::chunk(&step.bytes, &mut chunk);
    let lease = count_rendered(shard, lease, chunk.len());
    let shared = SharedStep {
        key,
        chunk: Bytes::from(chunk),
        after: cursor.clone(),
        done: step.done,
        lease,
    };
    let shared = audience.share(shared, &shard.turns);
    // Responses waiting for the budget may be waiting for this very step.
    shard.replies.nudge();
    Next::Step(shared)
}

/// The lease on a rendered chunk of `bytes`: the window's, grown to what
/// the chunk holds when its framing made it larger.
fn count_rendered(shard: &Shard, lease: Option<ReplyLease>, bytes: usize) -> Option<ReplyLease> {
    match lease {
        Some(mut lease) => {
            lease.grow_to(bytes as u64);
            Some(lease)
        }
        None => shard.hold_reply(bytes),
    }
}

/// How a run of windows ended.
enum Drained {
    /// The response ends: `true` after the stream's final event, `false`
    /// when the client went away or the log failed.
    Ended(bool),
    /// Every window available now went out.
    CaughtUp,
    /// The response should end before the tail (`Next::Pause`), or its
    /// cycle is over, or the shard stops.
    Pause,
}

/// Sends every window available now, up to the end of the cycle.
async fn drain(
    shard: &Shard,
    (socket, streamed): (&mut TcpStream, Streamed),
    cursor: &mut SseCursor,
    (audience, pace): (&Audience, Pace),
) -> Drained {
    let mut turn = None;
    loop {
        let next = next_step(shard, cursor, (audience, &mut turn), pace).await;
        if !matches!(next, Next::StillWaiting) {
            // A response writing a step another rendered keeps no place:
            // its next window queues anew if it must.
            turn = None;
        }
        let step = match next {
            Next::Step(step) => step,
            Next::CaughtUp => return Drained::CaughtUp,
            Next::StillWaiting => match keep_alive(shard, (&mut *socket, streamed), cursor).await {
                true => continue,
                false => return Drained::Ended(false),
            },
            Next::Pause => return Drained::Pause,
            Next::Failed => return Drained::Ended(false),
        };
        if !step.chunk.is_empty() && !write_bytes(socket, streamed.from_chunk(&step.chunk)).await {
            return Drained::Ended(false);
        }
        if step.done {
            return Drained::Ended(true);
        }
        // A reader far behind ends its cycle, and stops with the shard,
        // as a caught-up one does (`--sse-cycle-ms`).
        if shard.stopping.get() || Instant::now() >= pace.cycle_end {
            return Drained::Pause;
        }
    }
}

/// The control event that says where the client resumes, once (`again`
/// false: every data event went out with its control already) or as a
/// keep-alive of a response waiting for the budget, which also keeps a TTL
/// stream alive as an idle reader does (PROTOCOL.md §5.1).
async fn send_position(
    shard: &Shard,
    (socket, streamed): (&mut TcpStream, Streamed),
    cursor: &mut SseCursor,
    again: bool,
) -> bool {
    let now_ms = clock::now_ms();
    let step = {
        let table = shard.table.borrow();
        let stream = table.get_waited_on(&cursor.plan.key, cursor.plan.stream_id, now_ms);
        cursor.position(stream, now_ms, again)
    };
    if again {
        let (key, id) = (&cursor.plan.key, cursor.plan.stream_id);
        shard.touch_incarnation(key, id, now_ms).await;
    }
    send_piece(socket, streamed, &step.bytes).await
}

/// A keep-alive while waiting for the budget.
async fn keep_alive(shard: &Shard, io: (&mut TcpStream, Streamed), cursor: &mut SseCursor) -> bool {
    send_position(shard, io, cursor, true).await
}

/// Ends a response before the tail.
async fn pause(shard: &Shard, io: (&mut TcpStream, Streamed), cursor: &mut SseCursor) -> bool {
    send_position(shard, io, cursor, false).await
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
        let io = (&mut *socket, streamed);
        let pace = Pace {
            cycle_end,
            keepalive,
        };
        match drain(shard, io, &mut cursor, (audience, pace)).await {
            Drained::Ended(ok) => return ok,
            Drained::Pause => return pause(shard, (socket, streamed), &mut cursor).await,
            Drained::CaughtUp => {}
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
        if !timed_out {
            // The whole audience woke with this reader: take turns.
            audience.turn(&shard.turns).await;
        }
    }
}
