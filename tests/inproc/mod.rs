//! In-process harness for tests of the commit pipeline: a real `Shard`,
//! its writer task and `Appender` over a `FaultyStorage<DirectStorage>` in
//! a scratch directory, on a monoio io_uring runtime (`--fsync always`).
#![allow(dead_code)]

use std::cell::Cell;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use rill::config::{Config, FsyncPolicy};
use rill::log::appender::Appender;
use rill::log::recovery;
use rill::log::storage::{DirectStorage, FaultPlan, FaultyStorage, Storage};
use rill::shard::Shard;
use rill::shard::mesh::Mesh;
use rill::shard::store::Segments;
use rill::stream::rebuild::Rebuild;
use rill::stream::{Command, NewStream};

pub const NOW_MS: u64 = 1_700_000_000_000;

/// A create of an empty byte stream `key` at `NOW_MS`.
pub fn create(key: &str) -> Command {
    Command::Create(NewStream {
        key: key.to_string(),
        content_type: "application/octet-stream".to_string(),
        ttl_secs: None,
        expires_at: None,
        expires_at_ms: None,
        closed: false,
        data: Vec::new(),
        now_ms: NOW_MS,
        attrs: Vec::new(),
    })
}

/// A unique scratch directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let path =
            std::env::temp_dir().join(format!("rill-inproc-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub fn run<F: Future>(fut: F) -> F::Output {
    monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
        .enable_timer()
        .build()
        .unwrap()
        .block_on(fut)
}

/// Recovers `storage`, builds the shard on what it found, opens the log and
/// spawns the writer task (`--fsync always`).
pub async fn start<S: Storage + 'static>(storage: Rc<S>, segment_bytes: u64) -> Rc<Shard> {
    let (tx, _rx) = flume::unbounded();
    start_meshed(
        storage,
        segment_bytes,
        Mesh::new(0, vec![tx], Default::default()),
    )
    .await
}

/// `start` as shard 0 of `mesh`, whose inboxes the caller serves.
pub async fn start_meshed<S: Storage + 'static>(
    storage: Rc<S>,
    segment_bytes: u64,
    mesh: Mesh,
) -> Rc<Shard> {
    let mut rebuild = Rebuild::default();
    let recovered = recovery::recover(&*storage, segment_bytes, |kind, payload, at| {
        rill::shard::startup::replay(&mut rebuild, kind, payload, at)
    })
    .await
    .expect("recovery");
    let (table, _) = rebuild.finish(u64::MAX, NOW_MS).expect("a consistent log");
    let config = Arc::new(Config {
        segment_bytes,
        cores: mesh.len(),
        ..Config::default()
    });
    let dir = storage.path(1).parent().expect("segment dir").to_path_buf();
    let segments = Segments::new(Rc::new(DirectStorage::new(dir).unwrap()));
    let shard = Rc::new(Shard::new(
        0,
        config,
        mesh,
        table,
        recovered.next_seq,
        segments,
    ));
    let appender = Appender::open(
        storage,
        segment_bytes,
        recovered.end,
        recovered.tail,
        recovered.scrub_to,
    )
    .await
    .expect("open the log");
    monoio::spawn(rill::shard::writer::run(
        shard.clone(),
        appender,
        FsyncPolicy::Always,
        Rc::new(Cell::new(false)),
    ));
    shard
}

pub fn faulty(dir: &Path) -> (Rc<FaultyStorage<DirectStorage>>, FaultPlan) {
    let plan = FaultPlan::default();
    let storage = FaultyStorage::new(DirectStorage::new(dir).unwrap(), plan.clone());
    (Rc::new(storage), plan)
}
