//! Live reads held by the owning shard: long-poll (PROTOCOL.md §5.6) waits
//! on the stream's signal up to the configured timeout; SSE (§5.7) streams
//! events as chunks until the stream closes or the ~60 s cycle ends.

use std::rc::Rc;
use std::time::{Duration, Instant};

use monoio::net::TcpStream;

use super::Shard;
use super::conn::{respond, write_bytes};
use crate::clock;
use crate::http::render::{self, Framing};
use crate::protocol::read::{self, ReadPlan};
use crate::protocol::response::not_found;
use crate::protocol::sse::SseCursor;

pub async fn long_poll(
    shard: &Rc<Shard>,
    socket: &mut TcpStream,
    plan: ReadPlan,
    keep: bool,
) -> bool {
    let deadline = Instant::now() + Duration::from_millis(shard.config.long_poll_timeout_ms);
    let signal = shard.waiters.signal(&plan.key);
    let mut timed_out = false;
    let reply = loop {
        let seen = signal.generation();
        if let Some(reply) = poll_once(shard, &plan, timed_out) {
            break reply;
        }
        timed_out = monoio::time::timeout_at(deadline.into(), signal.changed(seen))
            .await
            .is_err();
    };
    shard.table.borrow_mut().touch(&plan.key, clock::now_ms());
    shard.waiters.release(&plan.key, signal);
    respond(socket, reply, keep, false).await
}

/// The long-poll's answer now, if it has one (a deleted stream is a 404).
fn poll_once(shard: &Shard, plan: &ReadPlan, timed_out: bool) -> Option<crate::protocol::Response> {
    let table = shard.table.borrow();
    let Some(stream) = table.get_visible(&plan.key) else {
        return Some(not_found("stream not found"));
    };
    let give_up = timed_out || shard.stopping.get();
    read::poll(plan, stream, clock::now_ms(), shard.next_random(), give_up)
}

pub async fn sse(shard: &Rc<Shard>, socket: &mut TcpStream, plan: ReadPlan, keep: bool) -> bool {
    let head = shard
        .table
        .borrow()
        .get_visible(&plan.key)
        .map(|stream| read::sse_head(stream, plan.surface));
    let Some(head) = head else {
        return respond(socket, not_found("stream not found"), keep, false).await;
    };
    let mut out = Vec::new();
    render::encode(&head, Framing::Chunked, keep, false, &mut out);
    if !write_bytes(socket, out).await {
        return false;
    }
    let key = plan.key.clone();
    let signal = shard.waiters.signal(&key);
    let ok = stream_events(shard, socket, SseCursor::new(plan), &signal).await;
    shard.waiters.release(&key, signal);
    ok && write_bytes(socket, render::LAST_CHUNK.to_vec()).await && keep
}

/// Writes events until the stream closes or is deleted, the cycle ends, the
/// shard stops, or the client goes away (`false`).
async fn stream_events(
    shard: &Rc<Shard>,
    socket: &mut TcpStream,
    mut cursor: SseCursor,
    signal: &Rc<super::signal::Signal>,
) -> bool {
    let cycle_end = Instant::now() + Duration::from_millis(shard.config.sse_cycle_ms);
    let keepalive = Duration::from_millis(shard.config.long_poll_timeout_ms);
    let mut timed_out = false;
    loop {
        let seen = signal.generation();
        let now_ms = clock::now_ms();
        let step = cursor.step(
            shard.table.borrow().get_visible(&cursor.plan.key),
            now_ms,
            shard.next_random(),
            timed_out,
        );
        shard.table.borrow_mut().touch(&cursor.plan.key, now_ms);
        let mut out = Vec::new();
        render::chunk(&step.bytes, &mut out);
        if !out.is_empty() && !write_bytes(socket, out).await {
            return false;
        }
        if step.done || shard.stopping.get() || Instant::now() >= cycle_end {
            return true;
        }
        let wake_at = cycle_end.min(Instant::now() + keepalive);
        timed_out = monoio::time::timeout_at(wake_at.into(), signal.changed(seen))
            .await
            .is_err();
    }
}
