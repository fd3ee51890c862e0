//! Shard threads: CPU pinning, one io_uring runtime and one SO_REUSEPORT
//! listener per shard, the accept loop and the mesh inbox loop.

use std::cell::Cell;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::Arc;

use socket2::{Domain, Protocol, Socket, Type};

use super::mesh::{Mesh, MeshMsg};
use super::signal::Signal;
use super::{
    Shard, buckets, cleaner, conn, fork, guard, metrics, placement, snapshot, startup, store,
    writer,
};
use crate::config::Config;
use crate::stream::Command;
use crate::stream::codec::Entry;

/// How long startup waits for the address to be free of other listeners.
const ADDRESS_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Binds one SO_REUSEPORT listener per shard on the same address. Port 0 is
/// resolved by the first bind so every shard shares the port.
///
/// First the address must be free: a plain bind (no SO_REUSEPORT) is tried
/// until it succeeds. Otherwise our listeners would join the reuseport group
/// of a socket that is still there: another server on the same port, or the
/// listener of a killed predecessor whose io_uring teardown still holds it
/// (its queued connections would then be reset).
pub fn bind_all(addr: SocketAddr, shards: usize) -> io::Result<Vec<std::net::TcpListener>> {
    wait_for_address(addr)?;
    let first = bind_one(addr)?;
    let actual = first.local_addr()?;
    let mut listeners = vec![first];
    for _ in 1..shards {
        listeners.push(bind_one(actual)?);
    }
    Ok(listeners)
}

fn wait_for_address(addr: SocketAddr) -> io::Result<()> {
    if addr.port() == 0 {
        return Ok(());
    }
    let deadline = std::time::Instant::now() + ADDRESS_WAIT;
    let mut told = false;
    loop {
        let probe = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
        probe.set_reuse_address(true)?;
        match probe.bind(&addr.into()) {
            Ok(()) => return Ok(()),
            Err(e)
                if e.kind() == io::ErrorKind::AddrInUse && std::time::Instant::now() < deadline =>
            {
                if !std::mem::replace(&mut told, true) {
                    crate::warn!(
                        "{addr} is in use; waiting up to {} ms for it to be released",
                        ADDRESS_WAIT.as_millis()
                    );
                }
                std::thread::sleep(std::time::Duration::from_millis(25));
            }
            Err(e) => return Err(e),
        }
    }
}

fn bind_one(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nodelay(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    Ok(socket.into())
}

/// Pins the calling thread to the `index`-th CPU it may run on.
fn pin_to_cpu(index: usize) {
    // SAFETY: cpu_set_t is plain data; zeroed is its empty value, and the
    // CPU_* helpers only touch the set we own on this stack frame.
    unsafe {
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        if libc::sched_getaffinity(0, size, &mut allowed) != 0 {
            return;
        }
        let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &allowed))
            .collect();
        if cpus.is_empty() {
            return;
        }
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpus[index % cpus.len()], &mut set);
        if libc::sched_setaffinity(0, size, &set) != 0 {
            crate::warn!(
                shard = index,
                "could not pin to a CPU: {}",
                io::Error::last_os_error()
            );
        }
    }
}

/// The shard's io_uring runtime. Only this thread submits to its ring and
/// reaps it, so the kernel may skip the interrupt it otherwise sends to run
/// each completion's task work at once (`COOP_TASKRUN`: the work runs at the
/// thread's next system call, which the runtime makes every tick) and the
/// locking a shared ring needs (`SINGLE_ISSUER`). A kernel older than 6.0
/// refuses the flags: the ring is then built without them.
fn build_runtime() -> io::Result<monoio::Runtime<monoio::time::TimeDriver<monoio::IoUringDriver>>> {
    let build = |ring: io_uring::Builder| {
        monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
            .uring_builder(ring)
            .with_entries(1024)
            .enable_timer()
            .build()
    };
    let mut flagged = io_uring::IoUring::builder();
    flagged.setup_coop_taskrun().setup_single_issuer();
    build(flagged).or_else(|_| build(io_uring::IoUring::builder()))
}

pub fn run_shard(
    index: usize,
    config: Arc<Config>,
    mesh: Mesh,
    listener: std::net::TcpListener,
    inbox: flume::Receiver<MeshMsg>,
    dir: std::path::PathBuf,
    startup: startup::Startup,
) {
    pin_to_cpu(index);
    let mut runtime = match build_runtime() {
        Ok(runtime) => runtime,
        // io_uring denied (seccomp, `kernel.io_uring_disabled`, a locked
        // memory limit): a startup failure like a refused log, not a panic.
        Err(e) => {
            let message = format!("cannot start io_uring runtime: {e}");
            let _ = startup.report.send((index, Err(message)));
            return;
        }
    };
    let inbox = Rc::new(inbox);
    runtime.block_on(async {
        let Some(mut ready) = startup::start(index, &config, dir, startup).await else {
            return;
        };
        let conns = Rc::new(Conns::default());
        let finish = Rc::new(Cell::new(false));
        let missing = std::mem::take(&mut ready.missing);
        let legacy_access = ready.legacy_access.take();
        let storage = ready.storage.clone();
        let (shard, writer) = launch(index, config.clone(), mesh, ready, finish.clone());
        monoio::spawn(inbox_loop(shard.clone(), inbox.clone(), conns.clone()));
        prepare(&shard, missing).await;
        // After `prepare`: its first pass runs at once, and must not copy a
        // bucket's delete past the create `prepare` logs for it again.
        monoio::spawn(cleaner::run(shard.clone(), storage));
        if let Some(dir) = legacy_access {
            log_access(&shard, dir);
        }
        match monoio::net::TcpListener::from_std(listener) {
            Ok(listener) => accept_loop(shard.clone(), listener, &conns).await,
            Err(e) => crate::error!(shard = index, "listener: {e}"),
        }
        drain(&shard, &conns, &finish, writer).await;
        shard.close_log();
        shard.mesh.closed_everywhere().await;
    });
    // Messages nobody will serve any more are dropped now, so a shard
    // waiting for their replies hears "no answer" instead of hanging.
    // (Every shard has closed its log by now: none serves a client.)
    inbox.drain().for_each(drop);
}

/// Builds the shard from its recovered state and starts its writer task.
fn launch(
    index: usize,
    config: Arc<Config>,
    mesh: Mesh,
    ready: startup::Ready,
    finish: Rc<Cell<bool>>,
) -> (Rc<Shard>, monoio::task::JoinHandle<()>) {
    let fsync = config.fsync;
    let segments = store::Segments::new(ready.storage.clone());
    let shard = Rc::new(Shard::new(
        index,
        config,
        mesh,
        ready.table,
        ready.next_seq,
        segments,
    ));
    *shard.buckets.borrow_mut() = ready.buckets;
    buckets::count_registry(&shard);
    super::reserve::make_at_start(&shard);
    shard.metrics.set_recovery(ready.recovery);
    // Writes end at the latest half the shutdown timeout after a stop, so
    // the shard's drain and final sync fit in the rest.
    let (stall, grace) = (
        shard.config.idle_timeout_ms,
        shard.config.shutdown_timeout_ms / 2,
    );
    super::conn::set_write_limits(
        std::time::Duration::from_millis(stall),
        shard.stop.clone(),
        std::time::Duration::from_millis(grace),
    );
    let writer = monoio::spawn(writer::run(shard.clone(), ready.appender, fsync, finish));
    (shard, writer)
}

/// Work before serving: drop streams other shards own, sweep snapshot
/// blobs, log the replicated buckets this shard missed.
async fn prepare(shard: &Rc<Shard>, missing: startup::Registry) {
    drop_foreign_streams(shard).await;
    snapshot::sweep_shard(shard);
    for (bucket, created_at_ms) in missing {
        if let Err(e) = shard
            .submit_bucket(Entry::BucketCreate {
                bucket,
                created_at_ms,
            })
            .await
        {
            crate::error!(
                shard = shard.index,
                "cannot log a replicated bucket: {}",
                e.message
            );
        }
    }
}

/// A log that did not record TTL streams' reads (older, or a new shard
/// dir): recovery began every TTL window again, so their accesses as of
/// now are logged, and once they are committed and synced (in the
/// background: serving need not wait) the shard dir says its log keeps
/// them (`datadir::ACCESS_MARKER`). Until then a restart does the same.
fn log_access(shard: &Rc<Shard>, dir: std::path::PathBuf) {
    let now_ms = crate::clock::now_ms();
    let touches: Vec<Command> = shard
        .table
        .borrow()
        .iter()
        .filter(|(_, stream)| stream.ttl_secs.is_some())
        .map(|(key, stream)| Command::Touch {
            key: key.clone(),
            stream_id: stream.id,
            now_ms,
        })
        .collect();
    let ticket = (!touches.is_empty()).then(|| shard.submit(touches));
    let last = shard.commits.submitted_seq();
    let shard = shard.clone();
    monoio::spawn(async move {
        let logged = match ticket {
            Some(ticket) => ticket.await.map_err(|e| e.message),
            None => Ok(()),
        };
        let synced = match logged {
            Ok(()) => synced(&shard, last).await,
            Err(e) => Err(e),
        };
        let marked = synced
            .and_then(|()| crate::datadir::mark_access_logged(&dir).map_err(|e| e.to_string()));
        if let Err(e) = marked {
            crate::warn!(shard = shard.index, "cannot log TTL streams' access: {e}");
        }
    });
}

/// Waits until record `last` is synced (`--fsync interval:MS`: the writer
/// syncs every MS), so a mark never outlives the records it vouches for on
/// a power loss.
async fn synced(shard: &Shard, last: u64) -> Result<(), String> {
    let most = match shard.config.fsync {
        crate::config::FsyncPolicy::Always => 0,
        crate::config::FsyncPolicy::Interval(ms) => ms + 1_000,
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_millis(most);
    while !shard.commits.synced_through(last) {
        if std::time::Instant::now() >= deadline {
            return Err("the log was not synced in time".to_string());
        }
        monoio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    Ok(())
}

/// Shutdown, once accepting stopped: waits until every connection ended
/// (live reads were woken and end their responses, idle keep-alive
/// connections close), then lets the writer write what is queued, sync
/// the log and return. The main thread bounds how long this may take.
async fn drain(
    shard: &Shard,
    conns: &Conns,
    finish: &Cell<bool>,
    writer: monoio::task::JoinHandle<()>,
) {
    conns.idle.close_all();
    conns.all_closed().await;
    finish.set(true);
    shard.commits.wake_writer.notify();
    writer.await;
}

/// Counts a shard's connection tasks so shutdown can wait for them.
#[derive(Default)]
struct Conns {
    open: Cell<usize>,
    closed: Rc<Signal>,
    idle: Rc<conn::Idle>,
}

/// Held by a connection task; dropped when it ends (or is dropped).
struct Open(Rc<Conns>);

impl Drop for Open {
    fn drop(&mut self) {
        let open = self.0.open.get() - 1;
        self.0.open.set(open);
        if open == 0 {
            self.0.closed.notify();
        }
    }
}

impl Conns {
    /// Spawns a task serving `socket` (starting with `buffered` bytes).
    fn spawn(
        self: &Rc<Self>,
        shard: &Rc<Shard>,
        socket: monoio::net::TcpStream,
        buffered: Vec<u8>,
    ) {
        self.open.set(self.open.get() + 1);
        let open = Open(self.clone());
        let serve = conn::serve(shard.clone(), socket, buffered, self.idle.clone());
        let served = guard::contain(shard.index, serve);
        monoio::spawn(async move {
            served.await;
            drop(open);
        });
    }

    /// Whether this shard serves `--max-connections` connections already.
    /// Counted when a connection's task is spawned, not when it first runs:
    /// a burst of accepts or handoffs decided before their tasks ran would
    /// pass the limit together.
    fn at_limit(&self, shard: &Shard) -> bool {
        self.open.get() as u64 >= shard.config.max_connections
    }

    async fn all_closed(&self) {
        loop {
            let seen = self.closed.generation();
            if self.open.get() == 0 {
                return;
            }
            self.closed.changed(seen).await;
        }
    }
}

/// Streams this shard recovered but no longer owns (copies left by a
/// re-sharding: their owner has them) are deleted from its log.
async fn drop_foreign_streams(shard: &Shard) {
    let shards = shard.shards();
    let foreign: Vec<Command> = shard
        .table
        .borrow()
        .iter()
        .filter(|(key, _)| placement::shard_of(key, shards) != shard.index)
        .map(|(key, stream)| Command::Delete {
            key: key.clone(),
            stream_id: stream.id,
        })
        .collect();
    if foreign.is_empty() {
        return;
    }
    let count = foreign.len();
    match shard.submit(foreign).await {
        Ok(()) => crate::info!(
            shard = shard.index,
            "dropped {count} streams now owned by other shards"
        ),
        Err(e) => crate::error!(
            shard = shard.index,
            "cannot drop streams of other shards: {}",
            e.message
        ),
    }
}

/// A connection over `--max-connections` (accepted here, or handed over
/// with its request read): 503 with Retry-After, then close.
fn at_limit() -> crate::protocol::Response {
    crate::protocol::response::retry_soon(
        "too_many_connections",
        "this server shard is at its connection limit; retry shortly",
    )
}

/// Counts `n` connections refused at the connection limit (their request
/// unread) in `rill_http_requests_total` and, with `--access-log true`,
/// logs them (method and path `-`).
fn refused(shard: &Shard, n: u64) {
    if n == 0 {
        return;
    }
    shard
        .metrics
        .count_requests(crate::metrics::Route::Other, 503, n);
    if shard.config.access_log {
        (0..n).for_each(|_| crate::logging::access(shard.index, "-", "-", 503, 0));
    }
}

/// A connection handed over after this shard closed its log at shutdown.
pub(super) fn stopped() -> crate::protocol::Response {
    crate::protocol::response::retry_soon("shutting_down", "this server is stopping; retry shortly")
}

/// Answers `reply` (a 503 with Retry-After), then closes the connection.
async fn refuse(mut socket: monoio::net::TcpStream, reply: crate::protocol::Response) {
    conn::write_bytes(&mut socket, refusal_bytes(&reply)).await;
}

/// A refusal on the wire: whole (Content-Length), the connection closing.
fn refusal_bytes(reply: &crate::protocol::Response) -> Vec<u8> {
    use crate::http::render::{Framing, Persistence, encode};
    let mut out = Vec::new();
    encode(reply, Framing::Length, Persistence::Close, false, &mut out);
    out
}

/// Answers `reply` on a blocking socket from the shard thread, waiting at
/// most `REFUSE_WRITE_TIMEOUT` for room (a few hundred bytes: an empty send
/// buffer takes them at once), then closes it.
fn refuse_at_once(mut socket: std::net::TcpStream, reply: &crate::protocol::Response) {
    use std::io::Write;
    let _ = socket.set_nonblocking(false);
    let _ = socket.set_write_timeout(Some(REFUSE_WRITE_TIMEOUT));
    let _ = socket.write_all(&refusal_bytes(reply));
    let _ = socket.shutdown(std::net::Shutdown::Write);
}

const REFUSE_WRITE_TIMEOUT: std::time::Duration = std::time::Duration::from_millis(100);

/// At most one accept error is logged per this interval (with how many
/// were not): out of descriptors, every accept fails for as long as it lasts.
const ACCEPT_ERROR_LOG_EVERY: std::time::Duration = std::time::Duration::from_secs(5);

async fn accept_loop(shard: Rc<Shard>, listener: monoio::net::TcpListener, conns: &Rc<Conns>) {
    let mut last_logged: Option<std::time::Instant> = None;
    let mut unlogged = 0u64;
    let mut spare = super::fd_spare::Spare::default();
    while !shard.stopping.get() {
        let seen = shard.stop.generation();
        monoio::select! {
            accepted = listener.accept() => match accepted {
                Ok((socket, _peer)) => {
                    shard.metrics.add(crate::metrics::Counter::Accepted, 1);
                    let _ = socket.set_nodelay(true);
                    if conns.at_limit(&shard) {
                        refused(&shard, 1);
                        monoio::spawn(refuse(socket, at_limit()));
                        continue;
                    }
                    conns.spawn(&shard, socket, Vec::new());
                }
                Err(e) => {
                    // Out of descriptors: the waiting clients get the 503
                    // of a full server through the spare descriptor.
                    if super::fd_spare::out_of_descriptors(&e) {
                        use std::os::fd::AsRawFd;
                        let refuse = |socket| refuse_at_once(socket, &at_limit());
                        let n = spare.refuse_waiting(listener.as_raw_fd(), refuse);
                        refused(&shard, n as u64);
                    }
                    // EMFILE and friends: back off instead of spinning.
                    if last_logged.is_none_or(|at| at.elapsed() >= ACCEPT_ERROR_LOG_EVERY) {
                        crate::warn!(
                            shard = shard.index,
                            "accept: {e} ({unlogged} more since the last such line)"
                        );
                        (last_logged, unlogged) = (Some(std::time::Instant::now()), 0);
                    } else {
                        unlogged += 1;
                    }
                    monoio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
            },
            _ = shard.stop.changed(seen) => break,
        }
    }
}

/// Serves mesh messages until the runtime ends: after `Shutdown` too, so
/// handoffs and replication requests of draining connections get served,
/// and after the log closed, until every shard's has (writes then fail).
async fn inbox_loop(shard: Rc<Shard>, inbox: Rc<flume::Receiver<MeshMsg>>, conns: Rc<Conns>) {
    while let Ok(msg) = inbox.recv_async().await {
        match msg {
            // Closed at shutdown: its writes would fail, and a task would
            // outlive the runtime (the client saw a close): answered here.
            MeshMsg::Handoff { socket, .. } if shard.commits.is_closed() => {
                refuse_at_once(socket, &stopped());
            }
            MeshMsg::Handoff { socket, buffered } => match monoio::net::TcpStream::from_std(socket)
            {
                // The limit holds for connections handed over too: else a
                // busy stream's shard gathers them past it.
                Ok(socket) if conns.at_limit(&shard) => {
                    refused(&shard, 1);
                    monoio::spawn(refuse(socket, at_limit()));
                }
                Ok(socket) => conns.spawn(&shard, socket, buffered),
                Err(e) => crate::warn!(shard = shard.index, "handoff: {e}"),
            },
            MeshMsg::Metrics { reply } => {
                let _ = reply.send(metrics::snapshot(&shard));
            }
            MeshMsg::Shutdown => shard.begin_stop(),
            msg @ (MeshMsg::ForkSource { .. }
            | MeshMsg::ForkRefs { .. }
            | MeshMsg::ForkReleased { .. }
            | MeshMsg::ForkLeaseEnded { .. }
            | MeshMsg::ForkSettle { .. }) => fork::handle_mesh(&shard, msg),
            other => buckets::handle_mesh(&shard, other),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    #[test]
    fn a_refusal_at_once_answers_503_and_closes() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        super::refuse_at_once(accepted, &super::stopped());
        let mut answer = String::new();
        client.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 503 "), "{answer}");
        assert!(
            answer.to_ascii_lowercase().contains("retry-after: "),
            "{answer}"
        );
        assert!(
            answer.ends_with("}") && answer.contains("shutting_down"),
            "{answer}"
        );
    }
}
