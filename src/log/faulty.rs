//! The fault-injecting storage wrapper ([`FaultyStorage`]) that tests use
//! to simulate EIO, ENOSPC, short writes and stalls under the segment log
//! (issue 3 "Failures"): it implements the same `Storage` seam as the real
//! O_DIRECT storage and forwards everything else to it.

use std::cell::RefCell;
use std::io;
use std::path::PathBuf;
use std::rc::Rc;

use super::aligned::{AlignedBuf, BLOCK};
use super::storage::{SegmentFile, Storage};

/// What an injected fault does to the next (and every later) operation until
/// changed or cleared.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fault {
    /// Pass through to the real storage.
    #[default]
    None,
    /// Fail with `EIO` without touching the disk.
    Eio,
    /// Fail with `ENOSPC` without touching the disk.
    Enospc,
    /// Writes only: transfer the first half of the buffer rounded down to a
    /// BLOCK multiple and report that count. Always strictly less than the
    /// requested length; a single-block write transfers nothing and reports
    /// `Ok(0)`, so callers must treat 0 as an error rather than retry forever.
    ShortWrite,
    /// Writes only: a write waits (checking every millisecond) until the
    /// plan's write fault is changed, then goes on under the new one: a
    /// disk frozen for as long as a test needs commits to stay pending.
    Stall,
}

#[derive(Debug, Default)]
struct FaultState {
    writes: Fault,
    syncs: Fault,
}

/// Shared handle to the faults a [`FaultyStorage`] injects; tests keep a
/// clone and flip it at runtime. Faults persist until changed or cleared.
#[derive(Clone, Debug, Default)]
pub struct FaultPlan(Rc<RefCell<FaultState>>);

impl FaultPlan {
    /// Fault applied to every `write_at` (including preallocation writes).
    pub fn set_writes(&self, f: Fault) {
        self.0.borrow_mut().writes = f;
    }

    /// Fault applied to every file `sync_data`; `Eio`, `Enospc` or `None`.
    pub fn set_syncs(&self, f: Fault) {
        assert!(
            !matches!(f, Fault::ShortWrite | Fault::Stall),
            "{f:?} is not a sync fault"
        );
        self.0.borrow_mut().syncs = f;
    }

    /// Stops injecting faults.
    pub fn clear(&self) {
        *self.0.borrow_mut() = FaultState::default();
    }

    fn writes(&self) -> Fault {
        self.0.borrow().writes
    }

    fn syncs(&self) -> Fault {
        self.0.borrow().syncs
    }
}

fn fault_error(f: Fault) -> Option<io::Error> {
    match f {
        Fault::Eio => Some(io::Error::from_raw_os_error(libc::EIO)),
        Fault::Enospc => Some(io::Error::from_raw_os_error(libc::ENOSPC)),
        Fault::None | Fault::ShortWrite | Fault::Stall => None,
    }
}

/// Test-only wrapper that injects faults from a [`FaultPlan`] into every file
/// write and `sync_data` (preallocation included). Reads, listing, renames,
/// removals and directory fsyncs pass through unfaulted.
#[derive(Debug)]
pub struct FaultyStorage<S: Storage> {
    inner: S,
    plan: FaultPlan,
}

/// A file of a [`FaultyStorage`].
#[derive(Debug)]
pub struct FaultyFile<F: SegmentFile> {
    inner: F,
    plan: FaultPlan,
}

impl<S: Storage> FaultyStorage<S> {
    pub fn new(inner: S, plan: FaultPlan) -> Self {
        Self { inner, plan }
    }

    pub fn plan(&self) -> &FaultPlan {
        &self.plan
    }

    pub fn inner(&self) -> &S {
        &self.inner
    }

    fn wrap(&self, inner: S::File) -> FaultyFile<S::File> {
        FaultyFile {
            inner,
            plan: self.plan.clone(),
        }
    }
}

impl<F: SegmentFile> FaultyFile<F> {
    /// Writes the first half of `buf` (rounded down to BLOCK) and returns the
    /// untouched original buffer.
    async fn short_write(&self, buf: AlignedBuf, pos: u64) -> (io::Result<usize>, AlignedBuf) {
        let half = buf.len() / 2 / BLOCK * BLOCK;
        if half == 0 {
            return (Ok(0), buf);
        }
        let mut prefix = AlignedBuf::with_capacity(half);
        prefix.extend_from_slice(&buf.as_slice()[..half]);
        let (res, _) = self.inner.write_at(prefix, pos).await;
        (res, buf)
    }
}

impl<F: SegmentFile> SegmentFile for FaultyFile<F> {
    async fn write_at(&self, buf: AlignedBuf, pos: u64) -> (io::Result<usize>, AlignedBuf) {
        while self.plan.writes() == Fault::Stall {
            monoio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        match self.plan.writes() {
            Fault::None | Fault::Stall => self.inner.write_at(buf, pos).await,
            Fault::ShortWrite => self.short_write(buf, pos).await,
            f => (Err(fault_error(f).expect("error fault")), buf),
        }
    }

    async fn read_at(&self, buf: AlignedBuf, pos: u64) -> (io::Result<usize>, AlignedBuf) {
        self.inner.read_at(buf, pos).await
    }

    async fn sync_data(&self) -> io::Result<()> {
        match fault_error(self.plan.syncs()) {
            Some(e) => Err(e),
            None => self.inner.sync_data().await,
        }
    }

    fn write_through(&self) -> bool {
        self.inner.write_through()
    }

    fn reserve(&self, bytes: u64) -> io::Result<()> {
        match fault_error(self.plan.writes()) {
            Some(e) => Err(e),
            None => self.inner.reserve(bytes),
        }
    }
}

impl<S: Storage> Storage for FaultyStorage<S> {
    type File = FaultyFile<S::File>;

    fn list(&self) -> io::Result<Vec<u64>> {
        self.inner.list()
    }

    async fn open(&self, index: u64) -> io::Result<Self::File> {
        Ok(self.wrap(self.inner.open(index).await?))
    }

    async fn create_tmp(&self, index: u64) -> io::Result<Self::File> {
        Ok(self.wrap(self.inner.create_tmp(index).await?))
    }

    async fn publish_tmp(&self, index: u64) -> io::Result<()> {
        self.inner.publish_tmp(index).await
    }

    async fn discard_tmp(&self, index: u64) {
        self.inner.discard_tmp(index).await
    }

    async fn remove(&self, index: u64) -> io::Result<()> {
        self.inner.remove(index).await
    }

    fn path(&self, index: u64) -> PathBuf {
        self.inner.path(index)
    }
}
