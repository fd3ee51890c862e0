//! Reads held by the owning shard: catch-up (PROTOCOL.md §5.5; one window,
//! or whole and streamed window by window, `protocol::whole`), long-poll
//! (§5.6) waiting on the stream's signal up to the configured timeout; SSE
//! (§5.7) is `super::sse_live`. Bytes are fetched (cache or log) before the
//! protocol renders them; a long-poll body is rendered once per audience
//! position and shared (`super::audience`).

use std::rc::Rc;
use std::time::{Duration, Instant};

use monoio::net::TcpStream;

use bytes::Bytes;

use super::Shard;
use super::audience::{Audience, BodyKey, SharedBody};
use super::conn::{VECTORED_BODY_BYTES, respond, respond_shared, responding, write_bytes};
use super::store::{self, FetchError};
use crate::clock;
use crate::http::render::{self, Framing, Persistence, Streamed};
use crate::metrics::Mode;
use crate::protocol::Response;
use crate::protocol::read::{self, LiveMode, MAX_READ_BYTES, ReadPlan};
use crate::protocol::response::{not_found, storage_unavailable};
use crate::protocol::whole;
use crate::protocol::window::{self, Cut};

/// Serves a read the protocol accepted; returns whether the connection
/// stays open.
pub async fn serve(
    shard: &Rc<Shard>,
    (socket, streamed): (&mut TcpStream, Streamed),
    plan: ReadPlan,
    keep: Persistence,
    if_none_match: Option<String>,
) -> bool {
    match plan.mode {
        LiveMode::CatchUp => {
            if let Some(end) = whole_end(shard, &plan) {
                return catch_up_whole(shard, socket, &plan, end, (if_none_match, keep)).await;
            }
            let reply = catch_up(shard, &plan, if_none_match.as_deref()).await;
            respond(shard, socket, reply, keep, false).await
        }
        LiveMode::LongPoll => long_poll(shard, socket, plan, (if_none_match, keep)).await,
        LiveMode::Sse => super::sse_live::serve(shard, (socket, streamed), plan, keep).await,
    }
}

/// A stream gone while (or before) its live read was answered.
pub(super) fn vanished(shard: &Shard, key: &str) -> Response {
    read::vanished(&shard.table.borrow(), key)
}

fn fetch_failed(error: FetchError) -> Response {
    match error {
        FetchError::Gone => not_found("stream not found"),
        FetchError::Trimmed { retained } => read::gone_before(retained),
        FetchError::Io(e) => storage_unavailable(&format!("reading the log failed: {e}")),
    }
}

/// The window to fetch for `plan` now: range and cut.
fn window(shard: &Shard, plan: &ReadPlan) -> Option<(u64, u64, Cut)> {
    let table = shard.table.borrow();
    let stream = table.get_incarnation(&plan.key, plan.stream_id)?;
    Some(read::fetch_span(stream, plan))
}

async fn catch_up(shard: &Shard, plan: &ReadPlan, if_none_match: Option<&str>) -> Response {
    let Some((start, end, cut)) = window(shard, plan) else {
        return vanished(shard, &plan.key);
    };
    // Leased before it is fetched; the answer holds its own lease as it is
    // sent (`conn::respond`), with no await between the two.
    let _lease = match shard.lease_counted_reply(window_bytes(start, end)) {
        Ok(lease) => lease,
        Err(busy) => return busy,
    };
    let fetched = match store::fetch(shard, &plan.key, plan.stream_id, start, end).await {
        Ok(bytes) => bytes,
        Err(e) => return fetch_failed(e),
    };
    let table = shard.table.borrow();
    match table.get_incarnation(&plan.key, plan.stream_id) {
        Some(stream) => read::catch_up(if_none_match, stream, plan, cut, &fetched, clock::now_ms()),
        None => vanished(shard, &plan.key),
    }
}

/// The end of a whole answer to `plan` (`protocol::whole`).
fn whole_end(shard: &Shard, plan: &ReadPlan) -> Option<u64> {
    let table = shard.table.borrow();
    let stream = table.get_incarnation(&plan.key, plan.stream_id)?;
    whole::end(stream, plan)
}

/// A catch-up answered whole (`protocol::whole`): the head with the body's
/// length, then one window at a time fetched, rendered and written, under
/// one window's lease. A body that could not be finished, or (a broken
/// invariant) not at its announced length, closes the connection.
async fn catch_up_whole(
    shard: &Shard,
    socket: &mut TcpStream,
    plan: &ReadPlan,
    end: u64,
    (if_none_match, keep): (Option<String>, Persistence),
) -> bool {
    let started = {
        let table = shard.table.borrow();
        table
            .get_incarnation(&plan.key, plan.stream_id)
            .map(|stream| {
                let now_ms = clock::now_ms();
                let head = whole::head(if_none_match.as_deref(), stream, plan, end, now_ms);
                let body = whole::Body::new(stream, plan);
                let windows = body.window_ends(stream, plan.start, end);
                (head, body, windows)
            })
    };
    let Some((head, body, windows)) = started else {
        return respond(shard, socket, vanished(shard, &plan.key), keep, false).await;
    };
    if head.status != 200 {
        return respond(shard, socket, head, keep, false).await;
    }
    let Some(_lease) = shard.lease_reply(MAX_READ_BYTES) else {
        return respond(shard, socket, super::replies::busy(), keep, false).await;
    };
    // The announced length is served whole, whatever retention does.
    let pin = store::ReadPin::new(shard, &plan.key, plan.stream_id, plan.start);
    responding(shard, socket, head.status);
    let length = body.len(plan.start, end);
    let mut out = Vec::new();
    render::encode(&head, Framing::Sized(length), keep, false, &mut out);
    if !write_bytes(socket, out).await {
        return false;
    }
    let written = write_whole_body(&pin, socket, plan, &windows, body).await;
    debug_assert!(written.is_none_or(|n| n == length), "the announced length");
    written == Some(length) && keep.alive()
}

/// The body of `catch_up_whole` from `plan.start` to `end`; the bytes
/// written, or `None` when it could not be finished (the stream went away
/// or was trimmed, the log failed, the client left, the shard is stopping).
async fn write_whole_body(
    pin: &store::ReadPin<'_>,
    socket: &mut TcpStream,
    plan: &ReadPlan,
    windows: &[u64],
    mut body: whole::Body,
) -> Option<u64> {
    let (shard, id) = (pin.shard(), pin.id());
    let (mut pos, mut written) = (plan.start, 0);
    for &to in windows {
        let there = shard
            .table
            .borrow()
            .get_incarnation(&plan.key, id)
            .is_some();
        // A stopping shard ends the body unfinished too: the client resumes
        // from what it got instead of holding up the shutdown.
        if !there || shard.stopping.get() {
            return None;
        }
        // Cached stored bytes go out as they are: shared, not copied (a
        // fresh 4 MiB buffer per window cost ~15 ms of page faults).
        if let Some(slices) = cached_as_is(shard, (&plan.key, id), &body, (pos, to)) {
            pin.advance(pos);
            written += to - pos;
            if !write_slices(socket, slices).await {
                return None;
            }
            pos = to;
            continue;
        }
        let fetched = pin.fetch(pos, to).await.ok()?;
        debug_assert_eq!(fetched.len() as u64, to - pos, "fetch returns the window");
        let piece = body.piece(fetched);
        // A window past the reader's lease (one JSON message longer than a
        // window) leases the rest while it is written.
        let excess = (piece.len() as u64).saturating_sub(MAX_READ_BYTES);
        let _excess = (excess > 0).then(|| shard.replies.hold(excess));
        written += piece.len() as u64;
        if !write_bytes(socket, piece).await {
            return None;
        }
        pos = to;
    }
    let finish = body.finish();
    written += finish.len() as u64;
    (finish.is_empty() || write_bytes(socket, finish.to_vec()).await).then_some(written)
}

/// The cached chunks of `[from, to)` of `key`'s incarnation `id`, when
/// the body sends stored bytes as they are and all of them are cached.
fn cached_as_is(
    shard: &Shard,
    (key, id): (&str, u64),
    body: &whole::Body,
    (from, to): (u64, u64),
) -> Option<Vec<bytes::Bytes>> {
    if !body.sends_stored_bytes() {
        return None;
    }
    let table = shard.table.borrow();
    let data = &table.get(key).filter(|s| s.id == id)?.data;
    (data.cache_start() <= from).then(|| data.cached_slices(from, to))
}

/// A cached chunk at least this long is sent as it is; shorter ones are
/// gathered into writes of up to `GATHER_BYTES` (one write per small
/// append would cost a system call each).
const SHARED_SLICE_BYTES: usize = 64 << 10;
const GATHER_BYTES: usize = 256 << 10;

async fn write_slices(socket: &mut TcpStream, slices: Vec<bytes::Bytes>) -> bool {
    let mut gathered: Vec<u8> = Vec::new();
    for slice in slices {
        let shared = slice.len() >= SHARED_SLICE_BYTES;
        if shared || gathered.len() + slice.len() > GATHER_BYTES {
            let full = std::mem::take(&mut gathered);
            if !full.is_empty() && !write_bytes(socket, full).await {
                return false;
            }
        }
        if !shared {
            gathered.extend_from_slice(&slice);
        } else if !write_bytes(socket, slice).await {
            return false;
        }
    }
    gathered.is_empty() || write_bytes(socket, gathered).await
}

/// What a long-poll should do next.
enum Poll {
    Answer(Response),
    Fetch((u64, u64, Cut)),
    Wait,
}

fn poll_once(shard: &Shard, plan: &ReadPlan, timed_out: bool) -> Poll {
    let table = shard.table.borrow();
    let now_ms = clock::now_ms();
    let Some(stream) = table.get_waited_on(&plan.key, plan.stream_id, now_ms) else {
        return Poll::Answer(vanished(shard, &plan.key));
    };
    if plan.start < stream.tail() {
        return Poll::Fetch(read::fetch_span(stream, plan));
    }
    let give_up = timed_out || shard.stopping.get() || plan.past_tail;
    match read::poll_empty(plan, stream, now_ms, give_up) {
        Some(reply) => Poll::Answer(reply),
        None => Poll::Wait,
    }
}

async fn long_poll(
    shard: &Rc<Shard>,
    socket: &mut TcpStream,
    plan: ReadPlan,
    (if_none_match, keep): (Option<String>, Persistence),
) -> bool {
    let waiting = shard.metrics.subscriber(Mode::LongPoll);
    let audience = shard.waiters.join(&plan.key);
    let reply = wait_for_reply(shard, socket, &plan, &audience).await;
    let reply = reply.map(|reply| not_modified(reply, if_none_match.as_deref()));
    shard.waiters.release(&plan.key, audience);
    drop(waiting);
    shard
        .touch_incarnation(&plan.key, plan.stream_id, clock::now_ms())
        .await;
    match reply {
        Some(PollReply::Own(reply)) => respond(shard, socket, reply, keep, false).await,
        Some(PollReply::Shared(head, body)) => {
            respond_shared(shard, socket, head, &body.body, keep).await
        }
        None => false,
    }
}

/// The 304 for a long-poll answer whose ETag `If-None-Match` names
/// (PROTOCOL.md §10.1), or the answer.
fn not_modified(reply: PollReply, if_none_match: Option<&str>) -> PollReply {
    match reply {
        PollReply::Shared(head, body) => match read::not_modified(if_none_match, &head) {
            Some(not_modified) => PollReply::Own(not_modified),
            None => PollReply::Shared(head, body),
        },
        own => own,
    }
}

/// A long-poll answer: its own, or a head of its own with the body every
/// waiter at the same position shares.
enum PollReply {
    Own(Response),
    Shared(Response, Rc<SharedBody>),
}

/// The long-poll answer once data arrives or the wait times out; `None`
/// when the client went away meanwhile: it gives up its socket then rather
/// than at the timeout (one readiness poll for the whole wait).
async fn wait_for_reply(
    shard: &Shard,
    socket: &TcpStream,
    plan: &ReadPlan,
    audience: &Audience,
) -> Option<PollReply> {
    let timeout = Instant::now() + Duration::from_millis(shard.config.long_poll_timeout_ms);
    // An expiry first answers then (404, PROTOCOL.md §5.1).
    let deadline = expiry(shard, plan).map_or(timeout, |at| at.min(timeout));
    let mut timed_out = false;
    let mut gone = std::pin::pin!(peer_closed(socket));
    let signal = &audience.signal;
    loop {
        let seen = signal.generation();
        match poll_once(shard, plan, timed_out) {
            Poll::Answer(reply) => return Some(PollReply::Own(reply)),
            Poll::Fetch(window) => {
                return Some(poll_data(shard, plan, window, audience).await);
            }
            Poll::Wait => {}
        }
        monoio::select! {
            woken = monoio::time::timeout_at(deadline.into(), signal.changed(seen)) => {
                timed_out = woken.is_err();
            }
            () = &mut gone => return None,
        }
        if !timed_out {
            // Every waiter at this stream woke with this one: take turns.
            audience.turn(&shard.turns).await;
        }
    }
}

/// When `plan`'s stream has passed its `Stream-Expires-At`, if it has one
/// (a millisecond after it: the wall clock must agree when it wakes).
pub(super) fn expiry(shard: &Shard, plan: &ReadPlan) -> Option<Instant> {
    let table = shard.table.borrow();
    let at_ms = table
        .get_incarnation(&plan.key, plan.stream_id)?
        .expires_at_ms?;
    let left = at_ms.saturating_sub(clock::now_ms()) + 1;
    Some(Instant::now() + Duration::from_millis(left))
}

/// Completes once the peer closed or reset the connection; never, once it
/// has sent more bytes (a pipelined request stays queued for later, and
/// the socket staying readable must not wake the wait again and again).
async fn peer_closed(socket: &TcpStream) {
    use std::os::fd::AsRawFd;
    if socket.readable(false).await.is_ok() {
        let mut byte = 0u8;
        // SAFETY: a one-byte recv into a local we own; MSG_PEEK leaves any
        // data queued, MSG_DONTWAIT keeps the shard from blocking.
        let n = unsafe {
            libc::recv(
                socket.as_raw_fd(),
                (&mut byte as *mut u8).cast(),
                1,
                libc::MSG_PEEK | libc::MSG_DONTWAIT,
            )
        };
        let pending = n > 0
            || (n < 0 && std::io::Error::last_os_error().kind() == std::io::ErrorKind::WouldBlock);
        if pending {
            std::future::pending::<()>().await;
        }
    }
}

/// The answer with data: the body the audience shares for this position
/// (fetched and rendered by the first waiter to get here), and a head of
/// its own (its cursor).
async fn poll_data(
    shard: &Shard,
    plan: &ReadPlan,
    (start, fetch_end, cut): (u64, u64, Cut),
    audience: &Audience,
) -> PollReply {
    let (surface, records) = (plan.surface, plan.records);
    let key = BodyKey {
        id: plan.stream_id,
        start,
        fetch_end,
        cut,
        surface,
        records,
    };
    let body = match audience.body(&key) {
        Some(body) => body,
        None => match render_poll_body(shard, plan, key).await {
            Ok(body) => audience.share_body(body, &shard.turns),
            Err(reply) => return PollReply::Own(reply),
        },
    };
    let table = shard.table.borrow();
    let Some(stream) = table.get_incarnation(&plan.key, plan.stream_id) else {
        return PollReply::Own(vanished(shard, &plan.key));
    };
    // A body rendered before retention passed its start is still exact,
    // but the read is answered as its own fetch would be now (410).
    if start < stream.retained {
        return PollReply::Own(read::gone_before(stream.retained));
    }
    let now_ms = clock::now_ms();
    match read::poll_head(plan, stream, body.end, now_ms) {
        Ok(head) => PollReply::Shared(head, body),
        Err(reply) => PollReply::Own(reply),
    }
}

/// Fetches and renders the body of `key`, leasing its bytes when large:
/// the window from before it is fetched, the body once it is rendered.
async fn render_poll_body(
    shard: &Shard,
    plan: &ReadPlan,
    key: BodyKey,
) -> Result<SharedBody, Response> {
    if let Some(body) = cached_poll_body(shard, plan, key)? {
        return Ok(body);
    }
    let fetch_lease = shard.lease_counted_reply(window_bytes(key.start, key.fetch_end))?;
    let fetched = store::fetch(shard, &plan.key, key.id, key.start, key.fetch_end)
        .await
        .map_err(fetch_failed)?;
    let table = shard.table.borrow();
    let stream = table
        .get_incarnation(&plan.key, plan.stream_id)
        .ok_or_else(|| vanished(shard, &plan.key))?;
    let (end, body) = read::poll_body(plan, stream, key.cut, &fetched)?;
    // No await between the two: the bytes stay counted throughout.
    drop(fetch_lease);
    let lease = shard.hold_reply(body.len());
    Ok(SharedBody {
        key,
        end,
        body: vec![Bytes::from(body)],
        lease,
    })
}

/// The body of `key` as the cache's chunks, uncopied, when it is stored
/// bytes all cached in chunks large enough to write one by one (or a body
/// small enough to go out with its head): a copy per reader arriving after
/// the data (whose audience is gone by then) cost a fresh window and its
/// page faults each. Small appends are still copied, into one piece, or
/// each reader would hold a slice (and a write) per append.
fn cached_poll_body(
    shard: &Shard,
    plan: &ReadPlan,
    key: BodyKey,
) -> Result<Option<SharedBody>, Response> {
    let table = shard.table.borrow();
    let stream = table
        .get_incarnation(&plan.key, plan.stream_id)
        .ok_or_else(|| vanished(shard, &plan.key))?;
    read::poll_check(plan, stream)?;
    let data = &stream.data;
    if !read::sends_stored_bytes(stream, plan) || data.cache_start() > key.start {
        return Ok(None);
    }
    // A character cut looks at most 4 bytes around its limit.
    let near = match key.cut {
        Cut::Utf8Near(limit) => limit.saturating_sub(4).max(key.start),
        Cut::At(_) => key.fetch_end,
    };
    let around = data.cached_slices(near, key.fetch_end);
    let byte_at = |at: u64| byte_of(&around, (key.start + at).checked_sub(near)?);
    let end = window::resolve_by(key.cut, key.start, byte_at).min(key.fetch_end);
    // Small enough to go with its head, or chunks large enough to write
    // one by one; else each reader would hold a slice and a write per append.
    let len = window_bytes(key.start, end);
    let small = len < VECTORED_BODY_BYTES;
    if !small && !data.cached_inner_chunks_at_least(key.start, end, SHARED_SLICE_BYTES) {
        return Ok(None);
    }
    let lease = shard.lease_counted_reply(len)?;
    Ok(Some(SharedBody {
        key,
        end,
        body: data.cached_slices(key.start, end),
        lease,
    }))
}

/// Byte `at` of the bytes `slices` hold one after another.
fn byte_of(slices: &[Bytes], mut at: u64) -> Option<u8> {
    for slice in slices {
        match slice.get(at as usize) {
            Some(&byte) => return Some(byte),
            None => at -= slice.len() as u64,
        }
    }
    None
}

/// The bytes a window from `start` to `end` takes in memory.
pub(super) fn window_bytes(start: u64, end: u64) -> usize {
    usize::try_from(end.saturating_sub(start)).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_is_found_across_chunks() {
        let chunks = [Bytes::from_static(b"ab"), Bytes::from_static(b"cde")];
        let found: Vec<Option<u8>> = (0..6).map(|at| byte_of(&chunks, at)).collect();
        assert_eq!(
            found,
            [
                Some(b'a'),
                Some(b'b'),
                Some(b'c'),
                Some(b'd'),
                Some(b'e'),
                None
            ]
        );
    }
}
