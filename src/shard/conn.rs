//! One HTTP/1.1 connection on its shard: read a head (with limits and
//! timeouts), hand the connection to the owning shard when the request
//! addresses another shard's stream, read the body (`body.rs`), dispatch,
//! repeat.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use monoio::buf::IoBufMut;
use monoio::io::{AsyncReadRent, AsyncWriteRent};
use monoio::net::TcpStream;

use super::mesh::MeshMsg;
use super::signal::Signal;
use super::{Shard, body, dispatch, placement};
use crate::http::parse::{HttpError, Limits, Method, RequestHead, check_host, parse_head};
use crate::http::render::{self, Framing, Persistence};
use crate::metrics::{Counter, Route};
use crate::protocol::{Response, headers, router};

pub(super) const READ_CHUNK: usize = 16 << 10;

pub(super) enum Fill {
    Data,
    Eof,
    Timeout,
}

/// Reads more bytes onto the end of `buf`. A read that would block (a
/// socket left non-blocking by its previous owner) waits for readability
/// and tries again instead of being taken for a closed connection.
pub(super) async fn fill(socket: &mut TcpStream, buf: &mut Vec<u8>, timeout: Duration) -> Fill {
    fill_to(socket, buf, timeout, usize::MAX).await
}

/// `fill`, reading no further than `end` bytes into `buf` (when its room
/// reaches past `end`).
pub(super) async fn fill_to(
    socket: &mut TcpStream,
    buf: &mut Vec<u8>,
    timeout: Duration,
    end: usize,
) -> Fill {
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let mut owned = std::mem::take(buf);
        if owned.capacity() - owned.len() < READ_CHUNK / 2 {
            owned.reserve(READ_CHUNK);
        }
        let len = owned.len();
        let cap = owned.capacity().min(end.max(len + 1));
        let read = socket.read(owned.slice_mut(len..cap));
        let Ok((result, slice)) = monoio::time::timeout_at(deadline.into(), read).await else {
            return Fill::Timeout;
        };
        *buf = slice.into_inner();
        match result {
            Ok(0) => return Fill::Eof,
            Ok(_) => return Fill::Data,
            Err(e) if retryable(&e) => {
                let ready = monoio::time::timeout_at(deadline.into(), socket.readable(false));
                if ready.await.is_err() {
                    return Fill::Timeout;
                }
            }
            Err(_) => return Fill::Eof,
        }
    }
}

/// How long, and how much, a connection whose request was refused before
/// its body arrived is drained before it closes.
const LINGER: Duration = Duration::from_secs(2);
const LINGER_IDLE: Duration = Duration::from_millis(500);
const LINGER_BYTES: usize = 64 << 20;
/// Long enough for a client's kernel to take the answer before the close.
const LINGER_STOPPING: Duration = Duration::from_millis(250);

/// Closes a connection whose client may still be sending (an early 413 or
/// 431, say): half-closes, then reads and drops what arrives, for a
/// bounded time and amount (RFC 9112 §9.6, lingering close). Closed with
/// unread bytes, the socket would send a reset, and the client's kernel
/// would discard the response before a client that writes its whole body
/// first had read it. A stopping shard lingers `LINGER_STOPPING` at most.
async fn linger_close(mut socket: TcpStream, idle: &Idle) {
    let _ = socket.shutdown().await;
    let mut buf = Vec::with_capacity(READ_CHUNK);
    let mut deadline = std::time::Instant::now() + LINGER;
    let mut drained = 0;
    while drained < LINGER_BYTES {
        let stopping = idle.closing_since.get();
        if let Some(since) = stopping {
            deadline = deadline.min(since + LINGER_STOPPING);
        }
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() {
            return;
        }
        buf.clear();
        let wait = left.min(LINGER_IDLE);
        let filled = match stopping {
            Some(_) => Some(fill(&mut socket, &mut buf, wait).await),
            None => monoio::select! {
                filled = fill(&mut socket, &mut buf, wait) => Some(filled),
                _ = idle.closing() => None,
            },
        };
        let Some(filled) = filled else { continue };
        match filled {
            Fill::Data => drained += buf.len(),
            Fill::Eof | Fill::Timeout => return,
        }
    }
}

fn retryable(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
    )
}

/// Writes all of `bytes` (a `Vec`, or shared `Bytes`); false when the
/// connection failed.
pub async fn write_bytes<B: monoio::buf::IoBuf>(socket: &mut TcpStream, bytes: B) -> bool {
    let mut buf = bytes;
    let mut written = 0;
    while written < buf.bytes_init() {
        let write = socket.write(buf.slice(written..));
        let Some((result, slice)) = drained(write).await else {
            return false;
        };
        buf = slice.into_inner();
        match result {
            Ok(0) => return false,
            Ok(n) => written += n,
            Err(e) if retryable(&e) => {
                let writable = socket.writable(false);
                if !matches!(drained(writable).await, Some(Ok(()))) {
                    return false;
                }
            }
            Err(_) => return false,
        }
    }
    true
}

thread_local! {
    /// How long a write may wait for its client to take any byte: one that
    /// stops reading must not hold its reply (and its connection) forever.
    /// Each shard sets it from `--idle-timeout-ms` as it starts.
    static WRITE_STALL: Cell<Duration> = const { Cell::new(Duration::from_secs(60)) };
    /// The shard's stop signal and how long writes may go on after it.
    static WRITE_STOP: RefCell<Option<(Rc<Signal>, Duration)>> = const { RefCell::new(None) };
}

/// Sets this shard's write limits: `stall` without progress, and `grace`
/// after `stop` is notified (once, when the shard begins to stop).
pub fn set_write_limits(stall: Duration, stop: Rc<Signal>, grace: Duration) {
    WRITE_STALL.with(|limit| limit.set(stall));
    WRITE_STOP.with(|s| *s.borrow_mut() = Some((stop, grace)));
}

pub(super) fn write_stall() -> Duration {
    WRITE_STALL.with(Cell::get)
}

/// `io` (one write, or a wait to write) unless its client takes no byte
/// for the write stall, or the shard began to stop more than its grace
/// ago: a reader that stopped reading must not hold up the shutdown past
/// `--shutdown-timeout-ms` (its body is cut short either way). `None` when
/// abandoned; the caller drops the connection.
async fn drained<F: Future>(io: F) -> Option<F::Output> {
    let timed = monoio::time::timeout(write_stall(), io);
    let Some((stop, grace)) = WRITE_STOP.with(|s| s.borrow().clone()) else {
        return timed.await.ok();
    };
    let stopped = async {
        if stop.generation() == 0 {
            stop.changed(0).await;
        }
        monoio::time::sleep(grace).await;
    };
    monoio::select! {
        done = timed => done.ok(),
        () = stopped => None,
    }
}

/// Bodies at least this large go out in a vectored write with the head
/// instead of being copied behind it.
pub(super) const VECTORED_BODY_BYTES: usize = 16 << 10;

/// Writes a whole response; returns whether the connection stays usable.
pub async fn respond(
    shard: &Shard,
    socket: &mut TcpStream,
    resp: Response,
    keep_alive: Persistence,
    head_request: bool,
) -> bool {
    // The body is in memory already (its read was leased before it, a
    // catch-up's or a snapshot's): counted until it is written (this
    // function's end).
    let _lease = match head_request {
        true => None,
        false => shard.hold_reply(resp.body.len()),
    };
    responding(shard, socket, resp.status);
    let vectored = !head_request && resp.body.len() >= VECTORED_BODY_BYTES;
    let mut out = Vec::with_capacity(512 + if vectored { 0 } else { resp.body.len() });
    render::encode(
        &resp,
        Framing::Length,
        keep_alive,
        head_request || vectored,
        &mut out,
    );
    if !vectored {
        return write_bytes(socket, out).await && keep_alive.alive();
    }
    write_vectored(socket, out, resp.body).await && keep_alive.alive()
}

/// Writes a response whose body is shared with other responses (a
/// long-poll answer, `super::audience`): the head of its own, then the
/// body; the body's lease is its sharer's. Returns whether the connection
/// stays usable.
pub async fn respond_shared(
    shard: &Shard,
    socket: &mut TcpStream,
    head: Response,
    body: &[bytes::Bytes],
    keep_alive: Persistence,
) -> bool {
    debug_assert!(head.body.is_empty(), "the body is the shared one");
    responding(shard, socket, head.status);
    let len: usize = body.iter().map(bytes::Bytes::len).sum();
    let mut out = Vec::with_capacity(512);
    render::encode(
        &head,
        Framing::Sized(len as u64),
        keep_alive,
        false,
        &mut out,
    );
    if len < VECTORED_BODY_BYTES {
        body.iter().for_each(|piece| out.extend_from_slice(piece));
        return write_bytes(socket, out).await && keep_alive.alive();
    }
    if !write_bytes(socket, out).await {
        return false;
    }
    for piece in body {
        if !write_bytes(socket, piece.clone()).await {
            return false;
        }
    }
    keep_alive.alive()
}

/// One writev of head and body; whatever a partial write leaves is written
/// with plain writes. (monoio's `write_vectored_all` panics on partial
/// writes, so the loop is ours.)
async fn write_vectored(socket: &mut TcpStream, head: Vec<u8>, body: Vec<u8>) -> bool {
    let total = head.len() + body.len();
    let writev = socket.writev(monoio::buf::VecBuf::from(vec![head, body]));
    let Some((result, parts)) = drained(writev).await else {
        return false;
    };
    let mut parts: Vec<Vec<u8>> = parts.into();
    let body = parts.pop().unwrap_or_default();
    let head = parts.pop().unwrap_or_default();
    let written = match result {
        Ok(n) => n,
        Err(e) if retryable(&e) => 0,
        Err(_) => return false,
    };
    if written >= total {
        return true;
    }
    if written < head.len() && !write_bytes(socket, head[written..].to_vec()).await {
        return false;
    }
    let body_done = written.saturating_sub(head.len());
    let rest = if body_done == 0 {
        body
    } else {
        body[body_done..].to_vec()
    };
    write_bytes(socket, rest).await
}

/// Notes the status of the response starting on `socket`; the request is
/// counted (`rill_http_requests_total`) once `serve` is done with it.
pub fn responding(shard: &Shard, socket: &TcpStream, status: u16) {
    use std::os::fd::AsRawFd;
    shard.metrics.responding(socket.as_raw_fd(), status);
}

/// Writes `bytes` as the next piece of a streamed body (chunked or raw);
/// false when the client went away.
pub async fn send_piece(socket: &mut TcpStream, streamed: render::Streamed, bytes: &[u8]) -> bool {
    let mut out = Vec::new();
    streamed.frame(bytes, &mut out);
    out.is_empty() || write_bytes(socket, out).await
}

pub(super) fn http_error(e: &HttpError) -> Response {
    Response::error(e.status(), e.code(), &e.message())
}

enum HeadRead {
    Head(RequestHead),
    Closed,
    Fail(Response),
}

async fn read_head(
    socket: &mut TcpStream,
    buf: &mut Vec<u8>,
    limits: &Limits,
    idle: Duration,
) -> HeadRead {
    // Once a head has begun, all of it must arrive within `idle`: a client
    // sending a byte now and then must not hold a connection slot forever.
    let mut begun = (!buf.is_empty()).then(std::time::Instant::now);
    loop {
        match parse_head(buf, limits) {
            Ok(Some(head)) => {
                return match check_host(&head) {
                    Err(e) => HeadRead::Fail(http_error(&e)),
                    Ok(()) => match headers::check_single_valued(&head) {
                        Ok(()) => HeadRead::Head(head),
                        Err(reply) => HeadRead::Fail(reply),
                    },
                };
            }
            Ok(None) => {}
            Err(e) => return HeadRead::Fail(http_error(&e)),
        }
        let wait = begun.map_or(idle, |at| idle.saturating_sub(at.elapsed()));
        // A timed-out read drops the buffer it was given: ask before.
        let partial = !buf.is_empty();
        let filled = fill(socket, buf, wait).await;
        if begun.is_none() && !buf.is_empty() {
            begun = Some(std::time::Instant::now());
        }
        match filled {
            Fill::Data => {}
            Fill::Eof => return HeadRead::Closed,
            Fill::Timeout if !partial => return HeadRead::Closed,
            Fill::Timeout => {
                return HeadRead::Fail(Response::error(
                    408,
                    "request_timeout",
                    "request head not received in time",
                ));
            }
        }
    }
}

/// Connections waiting for their next request. At shutdown they are told
/// to close (`close_all`) instead of waiting out the idle timeout. Each
/// waiter removes its waker when it stops waiting, so nothing accumulates.
#[derive(Default)]
pub struct Idle {
    next_id: Cell<u64>,
    /// When the shard began to stop (`close_all`).
    closing_since: Cell<Option<std::time::Instant>>,
    waiting: RefCell<HashMap<u64, Waker>>,
}

/// How long a request body still arriving when the shard stops may take
/// before it is refused (503) so the stop does not wait out slow senders.
const BODY_STOP_GRACE: Duration = Duration::from_secs(1);

impl Idle {
    /// Wakes every waiting connection to close; later ones close at once.
    pub fn close_all(&self) {
        self.closing_since.set(Some(std::time::Instant::now()));
        let waiting = std::mem::take(&mut *self.waiting.borrow_mut());
        for waker in waiting.into_values() {
            waker.wake();
        }
    }

    /// Whether the shard began to stop `BODY_STOP_GRACE` ago or more.
    pub(super) fn body_grace_passed(&self) -> bool {
        self.closing_since
            .get()
            .is_some_and(|since| since.elapsed() >= BODY_STOP_GRACE)
    }

    /// Completes `BODY_STOP_GRACE` after the shard began to stop.
    pub(super) async fn body_grace_over(&self) {
        self.closing().await;
        let since = self.closing_since.get().expect("set when closing");
        monoio::time::sleep_until((since + BODY_STOP_GRACE).into()).await;
    }

    fn closing(&self) -> Closing<'_> {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        Closing { idle: self, id }
    }
}

/// Completes when idle connections must close.
struct Closing<'a> {
    idle: &'a Idle,
    id: u64,
}

impl Future for Closing<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.idle.closing_since.get().is_some() {
            return Poll::Ready(());
        }
        let mut waiting = self.idle.waiting.borrow_mut();
        waiting.insert(self.id, cx.waker().clone());
        Poll::Pending
    }
}

impl Drop for Closing<'_> {
    fn drop(&mut self) {
        self.idle.waiting.borrow_mut().remove(&self.id);
    }
}

/// Reads the next request head; between requests (nothing buffered) a
/// closing shard ends the connection instead of waiting for one.
async fn next_head(
    idle: &Idle,
    socket: &mut TcpStream,
    buf: &mut Vec<u8>,
    limits: &Limits,
    timeout: Duration,
) -> HeadRead {
    if !buf.is_empty() {
        return read_head(socket, buf, limits, timeout).await;
    }
    monoio::select! {
        read = read_head(socket, buf, limits, timeout) => read,
        _ = idle.closing() => HeadRead::Closed,
    }
}

/// Serves requests on `socket` until it closes, errs, or moves to another shard.
pub async fn serve(shard: Rc<Shard>, mut socket: TcpStream, mut buf: Vec<u8>, waiting: Rc<Idle>) {
    let limits = shard.config.http_limits();
    let idle = Duration::from_millis(shard.config.idle_timeout_ms);
    let _open = shard.metrics.connection();
    let fd = std::os::fd::AsRawFd::as_raw_fd(&socket);
    loop {
        let head = match next_head(&waiting, &mut socket, &mut buf, &limits, idle).await {
            HeadRead::Head(head) => head,
            HeadRead::Closed => return,
            HeadRead::Fail(resp) => {
                let started = std::time::Instant::now();
                // RFC 9110 §9.3.2: no content to a HEAD, even one refused
                // before its head was whole (its request line says so).
                let head_request = buf.starts_with(b"HEAD ");
                drop(buf);
                respond(&shard, &mut socket, resp, Persistence::Close, head_request).await;
                log_unparsed(
                    &shard,
                    shard.metrics.finish_request(fd, Route::Other),
                    started,
                );
                return linger_close(socket, &waiting).await;
            }
        };
        let target = router::route(&head.raw_path);
        if let Some(owner) = other_owner(&shard, &head, &target) {
            return hand_off(&shard, socket, buf, owner);
        }
        let route = Route::of(&target);
        let started = std::time::Instant::now();
        buf.drain(..head.head_len);
        if let Some(resp) = dispatch::refused_before_body(&shard, &head, &target).await {
            refuse(&shard, &mut socket, buf, resp).await;
            finished(&shard, fd, route, &head, started);
            return linger_close(socket, &waiting).await;
        }
        let pace = body::Pace::new(idle, shard.config.min_request_rate, &waiting);
        let read = body::read_body((&shard, &mut socket), &mut buf, &head, &limits, pace).await;
        // The body's leases are held until the request is handled.
        let (body, _leases) = match read {
            Ok(read) => read,
            Err(resp) => {
                refuse(&shard, &mut socket, buf, resp).await;
                finished(&shard, fd, route, &head, started);
                return linger_close(socket, &waiting).await;
            }
        };
        let keep = dispatch::handle(&shard, &mut socket, &head, body, target).await;
        finished(&shard, fd, route, &head, started);
        if !keep {
            return;
        }
    }
}

/// Answers a refused request; the connection then closes. Its buffer (a
/// refused body's MiBs, perhaps) is not kept for the lingering close.
async fn refuse(shard: &Shard, socket: &mut TcpStream, buf: Vec<u8>, resp: Response) {
    drop(buf);
    respond(shard, socket, resp, Persistence::Close, false).await;
}

/// Counts the answered request and, with `--access-log true`, logs it.
fn finished(shard: &Shard, fd: i32, route: Route, head: &RequestHead, started: std::time::Instant) {
    let status = shard.metrics.finish_request(fd, route);
    if let (true, Some(status)) = (shard.config.access_log, status) {
        let micros = started.elapsed().as_micros();
        let method = head.method.as_str();
        crate::logging::access(shard.index, method, &head.raw_path, status, micros);
    }
}

/// With `--access-log true`, logs the answer to a request whose head could
/// not be parsed (method and path `-`); it is counted already.
fn log_unparsed(shard: &Shard, status: Option<u16>, started: std::time::Instant) {
    if let (true, Some(status)) = (shard.config.access_log, status) {
        let micros = started.elapsed().as_micros();
        crate::logging::access(shard.index, "-", "-", status, micros);
    }
}

/// The shard that owns the request's target, when it is not this one.
fn other_owner(shard: &Shard, head: &RequestHead, target: &router::Target) -> Option<usize> {
    if head.method == Method::Options {
        return None;
    }
    let owner = placement::shard_of(target.placement_key()?, shard.shards());
    (owner != shard.index).then_some(owner)
}

/// Moves the connection (socket plus unconsumed bytes, head included) to
/// `owner`, which parses the request again and continues the connection.
fn hand_off(shard: &Shard, socket: TcpStream, buffered: Vec<u8>, owner: usize) {
    use std::os::fd::{FromRawFd, IntoRawFd};
    let fd = socket.into_raw_fd();
    // SAFETY: `into_raw_fd` gave up monoio's ownership of this open socket
    // (no operation was in flight), so the std stream becomes its one owner.
    let socket = unsafe { std::net::TcpStream::from_raw_fd(fd) };
    // io_uring arms a poll for blocking sockets itself; a non-blocking one
    // would surface EAGAIN to the new owner.
    let _ = socket.set_nonblocking(false);
    shard.metrics.add(Counter::Handoffs, 1);
    if !shard
        .mesh
        .send(owner, MeshMsg::Handoff { socket, buffered })
    {
        crate::warn!(shard = shard.index, "handoff to shard {owner} failed");
    }
}
