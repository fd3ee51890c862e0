//! Shards: one pinned thread per core, each with its own io_uring runtime,
//! SO_REUSEPORT listener, connections, stream table and waiters (DESIGN.md).
//! This is the only layer that ties protocol decisions to sockets.

pub mod buckets;
pub mod conn;
pub mod dispatch;
pub mod guard;
pub mod listener;
pub mod live;
pub mod mesh;
pub mod placement;
pub mod signal;

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use crate::config::Config;
use crate::stream::{Command, Table};
use mesh::{Mesh, MeshMsg};
use signal::{Signal, Waiters};

/// Everything one shard owns. Lives in an `Rc` on its thread; never shared.
pub struct Shard {
    pub index: usize,
    pub config: Arc<Config>,
    pub table: RefCell<Table>,
    pub waiters: Waiters,
    pub mesh: Mesh,
    /// Replicated bucket registry: id -> creation time (extensions §1).
    pub buckets: RefCell<BTreeMap<String, buckets::Bucket>>,
    pub stopping: Cell<bool>,
    pub stop: Rc<Signal>,
    jitter: Cell<u64>,
}

impl Shard {
    pub fn new(index: usize, config: Arc<Config>, mesh: Mesh) -> Shard {
        Shard {
            index,
            config,
            table: RefCell::new(Table::default()),
            waiters: Waiters::default(),
            mesh,
            buckets: RefCell::new(BTreeMap::new()),
            stopping: Cell::new(false),
            stop: Rc::new(Signal::default()),
            jitter: Cell::new(0x9E37_79B9_7F4A_7C15 ^ index as u64 ^ crate::clock::now_ms()),
        }
    }

    pub fn shards(&self) -> usize {
        self.mesh.len()
    }

    /// Applies a command and publishes it to readers. Storage is in memory
    /// for now: commit is immediate.
    pub fn apply(&self, command: Command) {
        let mut table = self.table.borrow_mut();
        let (applied, _undo) = table.apply(command);
        let wake = table.publish(&applied);
        drop(table);
        if wake {
            self.waiters.notify(&applied.key);
        }
    }

    /// A fresh pseudo-random number (xorshift) for cursor jitter.
    pub fn next_random(&self) -> u64 {
        let mut x = self.jitter.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.jitter.set(x);
        x
    }

    /// Stops accepting, wakes waiters so live reads end.
    pub fn begin_stop(&self) {
        self.stopping.set(true);
        self.stop.notify();
        self.waiters.notify_all();
    }
}

/// Shard threads and the mesh senders that reach them (to deliver shutdown).
pub type Started = (
    Vec<std::thread::JoinHandle<()>>,
    Vec<flume::Sender<MeshMsg>>,
);

/// Starts `config.cores` shard threads and returns their join handles and
/// the mesh senders (to deliver shutdown).
pub fn start(config: Arc<Config>) -> std::io::Result<Started> {
    let listeners = listener::bind_all(config.listen, config.cores)?;
    let (senders, receivers): (Vec<_>, Vec<_>) =
        (0..config.cores).map(|_| flume::unbounded()).unzip();
    let mut handles = Vec::new();
    for (index, (listener, inbox)) in listeners.into_iter().zip(receivers).enumerate() {
        let config = config.clone();
        let mesh = Mesh::new(index, senders.clone());
        let handle = std::thread::Builder::new()
            .name(format!("rill-shard-{index}"))
            .spawn(move || listener::run_shard(index, config, mesh, listener, inbox))?;
        handles.push(handle);
    }
    Ok((handles, senders))
}
