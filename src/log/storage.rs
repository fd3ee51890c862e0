//! The storage seam of the segment log.
//!
//! This file owns every path from the log to the disk: the [`SegmentFile`]
//! and [`Storage`] traits, the real O_DIRECT + io_uring implementation
//! ([`DirectStorage`] / [`DirectFile`]) and crash-safe segment
//! preallocation. The fault-injecting wrapper tests use lives in `faulty`
//! (re-exported here).
//!
//! Segment files live in one directory as `{index:020}.seg`. All positioned
//! I/O is in whole [`BLOCK`]s at `BLOCK`-aligned offsets; the implementations
//! assert this even when O_DIRECT is unavailable, so tests on filesystems
//! without O_DIRECT catch misaligned I/O too.

use std::cell::RefCell;
use std::collections::HashSet;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

use monoio::buf::IoBufMut;

use super::aligned::{AlignedBuf, BLOCK};
pub use super::faulty::{Fault, FaultPlan, FaultyFile, FaultyStorage};

/// Size of each zero-filling write issued by preallocation.
pub const PREALLOC_CHUNK: usize = 1 << 20;

const SEG_SUFFIX: &str = ".seg";
const TMP_SUFFIX: &str = ".seg.tmp";
const INDEX_DIGITS: usize = 20;

/// One open segment file (O_DIRECT): positioned, aligned I/O and data sync.
///
/// `write_at` writes `buf.as_slice()` (length a multiple of `BLOCK`) at a
/// `BLOCK`-aligned `pos` and may report a short count. `read_at` reads up to
/// `buf.capacity()` bytes at a `BLOCK`-aligned `pos`; on `Ok(n)` the returned
/// buffer's `len()` is `n` (0 at end of file).
#[allow(async_fn_in_trait)]
pub trait SegmentFile {
    async fn write_at(&self, buf: AlignedBuf, pos: u64) -> (io::Result<usize>, AlignedBuf);
    async fn read_at(&self, buf: AlignedBuf, pos: u64) -> (io::Result<usize>, AlignedBuf);
    async fn sync_data(&self) -> io::Result<()>;

    /// Reads up to the room `buf` has past its `len()` (a multiple of
    /// `BLOCK`) at a `BLOCK`-aligned `pos`, onto its end: on `Ok(n)` its
    /// `len()` grew by `n`. Direct files read in place; the default reads
    /// through `read_at` and copies (wrappers that inject faults there).
    async fn read_after(&self, mut buf: AlignedBuf, pos: u64) -> (io::Result<usize>, AlignedBuf) {
        let room = buf.capacity() - buf.len();
        let (result, read) = self.read_at(AlignedBuf::with_capacity(room), pos).await;
        if let Ok(n) = result {
            buf.extend_from_slice(&read.as_slice()[..n]);
        }
        (result, buf)
    }

    /// Whether each completed write is already durable (opened `O_DSYNC`),
    /// so that no `sync_data` is needed after it.
    fn write_through(&self) -> bool {
        false
    }

    /// Reserves the file's first `bytes` on disk, so that a full disk fails
    /// here at once rather than after zero-filling what space is left.
    fn reserve(&self, _bytes: u64) -> io::Result<()> {
        Ok(())
    }
}

/// A directory of segment files `{index:020}.seg`.
///
/// `create_tmp`, `publish_tmp` and `discard_tmp` are the building blocks of
/// [`Storage::preallocate`] (so wrappers can intercept its I/O); the log
/// itself should only call `preallocate`.
#[allow(async_fn_in_trait)]
pub trait Storage {
    type File: SegmentFile;

    /// Existing segment indexes in ascending order (ignores other names;
    /// removes leftover `*.seg.tmp` files from an interrupted preallocation,
    /// but not those of a preallocation in flight on this same value).
    fn list(&self) -> io::Result<Vec<u64>>;

    /// Opens existing segment `index` read-write (O_DIRECT when supported).
    async fn open(&self, index: u64) -> io::Result<Self::File>;

    /// Creates (or truncates) `{index}.seg.tmp` for writing.
    async fn create_tmp(&self, index: u64) -> io::Result<Self::File>;

    /// Renames `{index}.seg.tmp` to `{index}.seg` and fsyncs the directory.
    async fn publish_tmp(&self, index: u64) -> io::Result<()>;

    /// Best-effort removal of `{index}.seg.tmp` after a failed preallocation.
    async fn discard_tmp(&self, index: u64);

    /// Unlinks segment `index` and fsyncs the directory.
    async fn remove(&self, index: u64) -> io::Result<()>;

    /// Path of segment `index`.
    fn path(&self, index: u64) -> PathBuf;

    /// Creates segment `index` of `bytes` length (a multiple of `BLOCK`)
    /// filled with zeros, crash-safely: its blocks are reserved first (a
    /// full disk then costs no writes), zeros go to `{index}.seg.tmp` through
    /// the `SegmentFile` path in 1 MiB aligned writes, then `sync_data`,
    /// rename to `{index}.seg`, fsync the directory. Each write is an await,
    /// so this can run in the background beside commits. On failure the tmp
    /// file is removed (best effort) and no `{index}.seg` appears.
    async fn preallocate(&self, index: u64, bytes: u64) -> io::Result<()> {
        assert_eq!(
            bytes % BLOCK as u64,
            0,
            "segment size must be BLOCK-aligned"
        );
        let file = self.create_tmp(index).await?;
        let filled = async {
            file.reserve(bytes)?;
            zero_fill(&file, bytes).await?;
            file.sync_data().await
        }
        .await;
        drop(file);
        match filled {
            Ok(()) => self.publish_tmp(index).await,
            Err(e) => {
                self.discard_tmp(index).await;
                Err(e)
            }
        }
    }
}

/// Allocates the first `bytes` of the file `fd` on disk (fallocate(2),
/// mode 0): a full disk fails here, before any write.
pub fn allocate(fd: std::os::fd::RawFd, bytes: u64) -> io::Result<()> {
    let len = libc::off_t::try_from(bytes).map_err(io::Error::other)?;
    // SAFETY: fallocate on a descriptor the caller owns, with plain integer
    // arguments; no memory is passed.
    match unsafe { libc::fallocate(fd, 0, 0, len) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Unlinks `path` on a thread of its own and waits for it: unlinking a
/// large file blocks in the kernel (freeing its extents, a discard on `-o
/// discard` mounts: 15 ms and more for 64 MiB) while the shard goes on.
pub async fn unlink_off_thread(path: PathBuf) -> io::Result<()> {
    let (done, unlinked) = flume::bounded(1);
    std::thread::Builder::new()
        .name("rill-unlink".to_string())
        .spawn(move || {
            let _ = done.send(std::fs::remove_file(path));
        })?;
    unlinked
        .recv_async()
        .await
        .map_err(|_| io::Error::other("the unlink thread ended without an answer"))?
}

/// Writes `bytes` of zeros from offset 0 in `PREALLOC_CHUNK` writes. A short
/// write is continued from where it stopped; a zero-byte write is an error.
async fn zero_fill<F: SegmentFile>(file: &F, bytes: u64) -> io::Result<()> {
    let chunk = PREALLOC_CHUNK.min(bytes as usize).max(BLOCK);
    let mut buf = AlignedBuf::with_capacity(chunk);
    let mut pos = 0u64;
    while pos < bytes {
        let want = chunk.min((bytes - pos) as usize);
        // Writes never modify the buffer, and growing it zero-fills, so it
        // stays all-zero.
        buf.resize_zeroed(want);
        let (res, back) = file.write_at(buf, pos).await;
        buf = back;
        let n = res?;
        if n == 0 || n % BLOCK != 0 {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("preallocation write at {pos} transferred {n} of {want} bytes"),
            ));
        }
        pos += n as u64;
    }
    Ok(())
}

/// File name of segment `index`.
fn seg_name(index: u64) -> String {
    format!("{index:0width$}{SEG_SUFFIX}", width = INDEX_DIGITS)
}

/// File name of the preallocation temp file for segment `index`.
fn tmp_name(index: u64) -> String {
    format!("{index:0width$}{TMP_SUFFIX}", width = INDEX_DIGITS)
}

/// Parses `{index:020}.seg` strictly; anything else is `None`.
fn parse_seg_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(SEG_SUFFIX)?;
    if digits.len() != INDEX_DIGITS || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Real storage: one directory, O_DIRECT files driven through monoio io_uring.
///
/// Not `Sync`: one shard thread owns it (share it with `Rc`).
#[derive(Debug)]
pub struct DirectStorage {
    dir: PathBuf,
    direct: bool,
    /// Segments opened for appending get `O_DSYNC` (see `write_through`).
    write_through: bool,
    /// Indexes whose `.seg.tmp` is being filled right now; `list` spares them.
    tmp_in_flight: RefCell<HashSet<u64>>,
}

/// A segment file opened by [`DirectStorage`].
#[derive(Debug)]
pub struct DirectFile {
    file: monoio::fs::File,
    write_through: bool,
}

/// Ensures the O_DIRECT fallback warning is printed once per process.
static FALLBACK_WARNED: AtomicBool = AtomicBool::new(false);

impl DirectStorage {
    /// Creates `dir` (and parents), fsyncs its parent so the directory entry
    /// is durable, and probes whether the filesystem accepts O_DIRECT.
    pub fn new(dir: impl Into<PathBuf>) -> io::Result<Self> {
        let dir = dir.into();
        std::fs::create_dir_all(&dir)?;
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            fsync_dir_blocking(parent)?;
        }
        let direct = probe_direct(&dir)?;
        if !direct && !FALLBACK_WARNED.swap(true, Ordering::Relaxed) {
            crate::warn!(
                "O_DIRECT not supported under {}; segment I/O falls back to buffered",
                dir.display()
            );
        }
        Ok(Self {
            dir,
            direct,
            write_through: false,
            tmp_in_flight: RefCell::default(),
        })
    }

    /// Opens segments with `O_DSYNC`: a write is durable when it completes
    /// (on a preallocated, already written segment that is one FUA write,
    /// or a write and a cache flush, in the block layer), so a durable
    /// commit is one I/O instead of a write and an `fdatasync`, which
    /// io_uring hands to a worker thread. Preallocation is unaffected.
    pub fn with_write_through(mut self, on: bool) -> Self {
        self.write_through = on;
        self
    }

    /// Whether segment files are opened with O_DIRECT.
    pub fn direct_io(&self) -> bool {
        self.direct
    }

    /// The segment directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Opens `path` read-write (O_DIRECT when supported, O_DSYNC when
    /// `write_through`); `create` creates or truncates it.
    fn open_file(&self, path: &Path, write_through: bool, create: bool) -> io::Result<DirectFile> {
        use std::os::unix::fs::OpenOptionsExt;
        let direct = if self.direct { libc::O_DIRECT } else { 0 };
        let dsync = if write_through { libc::O_DSYNC } else { 0 };
        let std_file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(create)
            .custom_flags(direct | dsync)
            .open(path)?;
        // Held while this descriptor or an I/O on it lives, so a process
        // taking over after this one dies waits for its last write.
        super::handover::hold_shared(&std_file);
        Ok(DirectFile {
            file: monoio::fs::File::from_std(std_file)?,
            write_through,
        })
    }

    /// Removes a leftover `*.seg.tmp` unless its preallocation is in flight.
    fn remove_stale_tmp(&self, entry: &std::fs::DirEntry, name: &str) -> io::Result<()> {
        let in_flight = name
            .strip_suffix(TMP_SUFFIX)
            .and_then(|digits| digits.parse::<u64>().ok())
            .is_some_and(|index| self.tmp_in_flight.borrow().contains(&index));
        if in_flight || !entry.file_type()?.is_file() {
            return Ok(());
        }
        std::fs::remove_file(entry.path())
    }

    /// Fsyncs the segment directory through io_uring.
    async fn fsync_dir(&self) -> io::Result<()> {
        let dir = monoio::fs::File::from_std(std::fs::File::open(&self.dir)?)?;
        dir.sync_all().await
    }
}

/// Opens (creating) a probe file with O_DIRECT; EINVAL means unsupported.
fn probe_direct(dir: &Path) -> io::Result<bool> {
    use std::os::unix::fs::OpenOptionsExt;
    let probe = dir.join(".odirect-probe");
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&probe);
    let direct = match opened {
        Ok(_) => true,
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => false,
        Err(e) => return Err(e),
    };
    match std::fs::remove_file(&probe) {
        Ok(()) => Ok(direct),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(direct),
        Err(e) => Err(e),
    }
}

/// Fsyncs a directory with a blocking syscall (used only at construction).
fn fsync_dir_blocking(dir: &Path) -> io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

fn assert_aligned_pos(pos: u64) {
    assert_eq!(
        pos % BLOCK as u64,
        0,
        "segment I/O offset {pos} not BLOCK-aligned"
    );
}

impl SegmentFile for DirectFile {
    async fn write_at(&self, buf: AlignedBuf, pos: u64) -> (io::Result<usize>, AlignedBuf) {
        assert_aligned_pos(pos);
        assert_eq!(
            buf.len() % BLOCK,
            0,
            "segment write length {} not BLOCK-aligned",
            buf.len()
        );
        self.file.write_at(buf, pos).await
    }

    async fn read_at(&self, buf: AlignedBuf, pos: u64) -> (io::Result<usize>, AlignedBuf) {
        assert_aligned_pos(pos);
        self.file.read_at(buf, pos).await
    }

    async fn read_after(&self, buf: AlignedBuf, pos: u64) -> (io::Result<usize>, AlignedBuf) {
        assert_aligned_pos(pos);
        let at = buf.len();
        assert!(
            at.is_multiple_of(BLOCK),
            "a direct read lands block-aligned"
        );
        let (result, room) = self.file.read_at(buf.slice_mut(at..), pos).await;
        (result, room.into_inner())
    }

    async fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data().await
    }

    fn write_through(&self) -> bool {
        self.write_through
    }

    fn reserve(&self, bytes: u64) -> io::Result<()> {
        match allocate(self.file.as_raw_fd(), bytes) {
            // A filesystem without fallocate is reserved by the zeros.
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(()),
            other => other,
        }
    }
}

impl Storage for DirectStorage {
    type File = DirectFile;

    fn list(&self) -> io::Result<Vec<u64>> {
        let mut indexes = Vec::new();
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.ends_with(TMP_SUFFIX) {
                self.remove_stale_tmp(&entry, name)?;
            } else if let Some(index) = parse_seg_name(name) {
                indexes.push(index);
            }
        }
        indexes.sort_unstable();
        Ok(indexes)
    }

    async fn open(&self, index: u64) -> io::Result<DirectFile> {
        self.open_file(&self.path(index), self.write_through, false)
    }

    async fn create_tmp(&self, index: u64) -> io::Result<DirectFile> {
        let file = self.open_file(&self.dir.join(tmp_name(index)), false, true)?;
        self.tmp_in_flight.borrow_mut().insert(index);
        Ok(file)
    }

    async fn publish_tmp(&self, index: u64) -> io::Result<()> {
        self.tmp_in_flight.borrow_mut().remove(&index);
        std::fs::rename(self.dir.join(tmp_name(index)), self.path(index))?;
        self.fsync_dir().await
    }

    async fn discard_tmp(&self, index: u64) {
        self.tmp_in_flight.borrow_mut().remove(&index);
        let _ = std::fs::remove_file(self.dir.join(tmp_name(index)));
    }

    async fn remove(&self, index: u64) -> io::Result<()> {
        unlink_off_thread(self.path(index)).await?;
        self.fsync_dir().await
    }

    fn path(&self, index: u64) -> PathBuf {
        self.dir.join(seg_name(index))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::Future;

    /// A unique scratch directory removed on drop.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new(tag: &str) -> Self {
            static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let pid = std::process::id();
            let path = std::env::temp_dir().join(format!("rill-storage-{tag}-{pid}-{n}"));
            let _ = std::fs::remove_dir_all(&path);
            Self(path)
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn run<F: Future>(fut: F) -> F::Output {
        monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
            .enable_timer()
            .build()
            .unwrap()
            .block_on(fut)
    }

    fn block_of(byte: u8) -> AlignedBuf {
        let mut buf = AlignedBuf::with_capacity(BLOCK);
        buf.extend_from_slice(&[byte; BLOCK]);
        buf
    }

    fn dir_names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn an_open_segment_is_held_against_a_takeover() {
        let tmp = TempDir::new("held");
        run(async {
            let storage = DirectStorage::new(&tmp.0).unwrap();
            storage.preallocate(1, BLOCK as u64).await.unwrap();
            let file = storage.open(1).await.unwrap();
            let other = std::fs::File::open(storage.path(1)).unwrap();
            // SAFETY: flock on a descriptor this test owns.
            let rc = unsafe { libc::flock(other.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            assert_ne!(rc, 0, "a takeover must wait while the segment is open");
            drop(file);
            // monoio closes a dropped file through the ring: soon, not now.
            let mut rc = -1;
            for _ in 0..500 {
                monoio::time::sleep(std::time::Duration::from_millis(2)).await;
                // SAFETY: as above.
                rc = unsafe { libc::flock(other.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
                if rc == 0 {
                    break;
                }
            }
            assert_eq!(rc, 0, "and may go on once it is closed");
        });
    }

    #[test]
    fn names_are_zero_padded_and_parsed_strictly() {
        assert_eq!(seg_name(42), "00000000000000000042.seg");
        assert_eq!(parse_seg_name("00000000000000000042.seg"), Some(42));
        assert_eq!(parse_seg_name("42.seg"), None);
        assert_eq!(parse_seg_name("0000000000000000004x.seg"), None);
        assert_eq!(parse_seg_name("00000000000000000042.seg.tmp"), None);
        assert_eq!(parse_seg_name("99999999999999999999.seg"), None);
    }

    #[test]
    fn preallocate_creates_zeroed_file_without_tmp() {
        let tmp = TempDir::new("prealloc");
        run(async {
            let storage = DirectStorage::new(&tmp.0).unwrap();
            let size = 2 * PREALLOC_CHUNK as u64 + 3 * BLOCK as u64;
            storage.preallocate(7, size).await.unwrap();
            let data = std::fs::read(storage.path(7)).unwrap();
            assert_eq!(data.len() as u64, size);
            assert!(data.iter().all(|&b| b == 0));
            assert_eq!(dir_names(&tmp.0), vec![seg_name(7)]);
        });
    }

    #[test]
    fn a_segment_the_disk_cannot_hold_fails_before_any_zeros() {
        // 1 PiB: past any test machine's free space (ENOSPC) or past the
        // filesystem's largest file (EFBIG). Without the reservation the
        // zeros would fill the disk before failing.
        let tmp = TempDir::new("reserve");
        run(async {
            let storage = DirectStorage::new(&tmp.0).unwrap();
            let file = storage.create_tmp(3).await.unwrap();
            let err = file.reserve(1 << 50).unwrap_err();
            assert!(
                matches!(err.raw_os_error(), Some(libc::ENOSPC | libc::EFBIG)),
                "{err}"
            );
            storage.discard_tmp(3).await;
            let err = storage.preallocate(3, 1 << 50).await.unwrap_err();
            assert!(matches!(
                err.raw_os_error(),
                Some(libc::ENOSPC | libc::EFBIG)
            ));
            assert!(dir_names(&tmp.0).is_empty(), "no tmp file left");
            // A size that fits is reserved: its blocks are allocated.
            let file = storage.create_tmp(4).await.unwrap();
            file.reserve(1 << 20).unwrap();
            let meta = std::fs::metadata(tmp.0.join(tmp_name(4))).unwrap();
            use std::os::unix::fs::MetadataExt;
            assert!(meta.blocks() * 512 >= 1 << 20, "{} blocks", meta.blocks());
        });
    }

    #[test]
    fn write_sync_read_round_trips_a_block() {
        let tmp = TempDir::new("roundtrip");
        run(async {
            let storage = DirectStorage::new(&tmp.0).unwrap();
            storage.preallocate(1, 4 * BLOCK as u64).await.unwrap();
            let file = storage.open(1).await.unwrap();
            let (res, _) = file.write_at(block_of(0x5A), 2 * BLOCK as u64).await;
            assert_eq!(res.unwrap(), BLOCK);
            file.sync_data().await.unwrap();
            let (res, buf) = file
                .read_at(AlignedBuf::with_capacity(BLOCK), 2 * BLOCK as u64)
                .await;
            assert_eq!(res.unwrap(), BLOCK);
            assert_eq!(buf.as_slice(), &[0x5A; BLOCK]);
            let (res, buf) = file
                .read_at(AlignedBuf::with_capacity(BLOCK), BLOCK as u64)
                .await;
            assert_eq!(res.unwrap(), BLOCK);
            assert!(buf.as_slice().iter().all(|&b| b == 0));
            let (res, buf) = file
                .read_at(AlignedBuf::with_capacity(BLOCK), 4 * BLOCK as u64)
                .await;
            assert_eq!(res.unwrap(), 0);
            assert!(buf.is_empty());
        });
    }

    #[test]
    fn open_missing_segment_fails() {
        let tmp = TempDir::new("missing");
        run(async {
            let storage = DirectStorage::new(&tmp.0).unwrap();
            let err = storage.open(3).await.unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::NotFound);
        });
    }

    #[test]
    fn list_sorts_ignores_others_and_cleans_tmp() {
        let tmp = TempDir::new("list");
        run(async {
            let storage = DirectStorage::new(&tmp.0).unwrap();
            for index in [30, 2, 100] {
                storage.preallocate(index, BLOCK as u64).await.unwrap();
            }
            std::fs::write(tmp.0.join(tmp_name(5)), b"partial").unwrap();
            std::fs::write(tmp.0.join("notes.txt"), b"x").unwrap();
            std::fs::write(tmp.0.join("12.seg"), b"x").unwrap();
            assert_eq!(storage.list().unwrap(), vec![2, 30, 100]);
            assert!(!tmp.0.join(tmp_name(5)).exists());
            assert!(tmp.0.join("notes.txt").exists());
            storage.remove(30).await.unwrap();
            assert_eq!(storage.list().unwrap(), vec![2, 100]);
        });
    }

    #[test]
    fn list_spares_tmp_of_preallocation_in_flight() {
        let tmp = TempDir::new("inflight");
        run(async {
            let storage = std::rc::Rc::new(DirectStorage::new(&tmp.0).unwrap());
            let size = 64 * PREALLOC_CHUNK as u64;
            let bg = storage.clone();
            let handle = monoio::spawn(async move { bg.preallocate(9, size).await });
            monoio::time::sleep(std::time::Duration::from_millis(1)).await;
            assert_eq!(storage.list().unwrap(), Vec::<u64>::new());
            assert!(tmp.0.join(tmp_name(9)).exists(), "tmp must survive list()");
            handle.await.unwrap();
            assert_eq!(storage.list().unwrap(), vec![9]);
            let len = std::fs::metadata(storage.path(9)).unwrap().len();
            assert_eq!(len, size);
        });
    }

    #[test]
    fn write_through_opens_segments_dsync_and_preallocates_without() {
        let flags = |file: &DirectFile| {
            // SAFETY: F_GETFL on a descriptor the file keeps open.
            unsafe { libc::fcntl(file.file.as_raw_fd(), libc::F_GETFL) }
        };
        let tmp = TempDir::new("dsync");
        run(async {
            let storage = DirectStorage::new(&tmp.0).unwrap().with_write_through(true);
            storage.preallocate(0, 4 * BLOCK as u64).await.unwrap();
            let file = storage.open(0).await.unwrap();
            assert!(file.write_through());
            assert_eq!(flags(&file) & libc::O_DSYNC, libc::O_DSYNC);
            let tmp_file = storage.create_tmp(1).await.unwrap();
            assert!(!tmp_file.write_through());
            assert_eq!(flags(&tmp_file) & libc::O_DSYNC, 0);
            let plain = DirectStorage::new(&tmp.0).unwrap().open(0).await.unwrap();
            assert_eq!(flags(&plain) & libc::O_DSYNC, 0);
        });
    }

    #[test]
    fn faulty_storage_injects_and_recovers() {
        let tmp = TempDir::new("faults");
        run(async {
            let plan = FaultPlan::default();
            let storage = FaultyStorage::new(DirectStorage::new(&tmp.0).unwrap(), plan.clone());
            storage.preallocate(0, 4 * BLOCK as u64).await.unwrap();
            let file = storage.open(0).await.unwrap();

            plan.set_writes(Fault::Eio);
            let (res, _) = file.write_at(block_of(1), 0).await;
            assert_eq!(res.unwrap_err().raw_os_error(), Some(libc::EIO));

            plan.set_writes(Fault::Enospc);
            let (res, _) = file.write_at(block_of(1), 0).await;
            assert_eq!(res.unwrap_err().raw_os_error(), Some(libc::ENOSPC));

            plan.set_writes(Fault::ShortWrite);
            let mut three = AlignedBuf::with_capacity(3 * BLOCK);
            three.extend_from_slice(&[9; 3 * BLOCK]);
            let (res, back) = file.write_at(three, 0).await;
            assert_eq!(res.unwrap(), BLOCK);
            assert_eq!(back.len(), 3 * BLOCK);
            let (res, _) = file.write_at(block_of(1), 0).await;
            assert_eq!(res.unwrap(), 0);

            plan.set_syncs(Fault::Eio);
            assert_eq!(
                file.sync_data().await.unwrap_err().raw_os_error(),
                Some(libc::EIO)
            );
            plan.set_syncs(Fault::Enospc);
            let err = file.sync_data().await.unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));

            plan.clear();
            let (res, _) = file.write_at(block_of(2), BLOCK as u64).await;
            assert_eq!(res.unwrap(), BLOCK);
            file.sync_data().await.unwrap();
            let (res, buf) = file.read_at(AlignedBuf::with_capacity(2 * BLOCK), 0).await;
            assert_eq!(res.unwrap(), 2 * BLOCK);
            assert_eq!(&buf.as_slice()[..BLOCK], &[9; BLOCK]);
            assert_eq!(&buf.as_slice()[BLOCK..], &[2; BLOCK]);
        });
    }

    #[test]
    fn faulty_preallocate_fails_cleanly_then_succeeds() {
        let tmp = TempDir::new("faulty-prealloc");
        run(async {
            let plan = FaultPlan::default();
            let storage = FaultyStorage::new(DirectStorage::new(&tmp.0).unwrap(), plan.clone());
            plan.set_writes(Fault::Enospc);
            let err = storage.preallocate(4, 8 * BLOCK as u64).await.unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::ENOSPC));
            plan.set_writes(Fault::None);
            plan.set_syncs(Fault::Eio);
            let err = storage.preallocate(4, 8 * BLOCK as u64).await.unwrap_err();
            assert_eq!(err.raw_os_error(), Some(libc::EIO));
            assert!(dir_names(&tmp.0).is_empty());
            plan.clear();
            storage.preallocate(4, 8 * BLOCK as u64).await.unwrap();
            assert_eq!(storage.list().unwrap(), vec![4]);
        });
    }
}
