//! The data directory: its layout, its lock, and the layout's metadata.
//!
//! ```text
//! {data-dir}/LOCK            flock'ed by the running server: one server per data dir
//! {data-dir}/rill.meta       "format=1" and "shards=N": how the logs are partitioned
//! {data-dir}/shard-NN/       one segment log per shard (`log::storage`)
//! {data-dir}/shard-NN/access-logged
//!                            the log records reads of `Stream-TTL` streams
//!                            (`ACCESS_MARKER`)
//! ```
//!
//! Streams are placed on shards by hashing their key over the shard count,
//! so a data dir written with N shards holds each stream in the log of
//! `shard_of(key, N)`. Starting with another `--cores` re-shards first
//! (`reshard`): streams are copied to their new owner's log, then the count
//! is recorded, then leftover shard dirs are removed.

use std::fs::{self, File};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

pub const FORMAT: u32 = 1;

/// In a shard dir: its log records reads of `Stream-TTL` streams (TOUCH
/// records), so recovery may bound their last access by it. A log without
/// it (written before, or a new shard dir) begins every TTL window again
/// at the restart, and the shard then logs each TTL stream's access before
/// it writes this file (`shard::listener`).
pub const ACCESS_MARKER: &str = "access-logged";

/// Whether the log in `shard_dir` records reads of TTL streams.
pub fn access_logged(shard_dir: &Path) -> bool {
    shard_dir.join(ACCESS_MARKER).exists()
}

/// Records that the log in `shard_dir` records reads of TTL streams.
pub fn mark_access_logged(shard_dir: &Path) -> io::Result<()> {
    File::create(shard_dir.join(ACCESS_MARKER))?.sync_all()?;
    File::open(shard_dir)?.sync_all()
}

/// Takes the mark back: some of the log's access records may be gone.
pub fn forget_access_logged(shard_dir: &Path) -> io::Result<()> {
    match std::fs::remove_file(shard_dir.join(ACCESS_MARKER)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => File::open(shard_dir)?.sync_all(),
    }
}

/// The open data directory; holds the lock for the life of the server.
pub struct DataDir {
    root: PathBuf,
    _lock: File,
    /// The recorded shard count (`None` for a new data dir).
    shards: Option<usize>,
}

impl DataDir {
    /// Creates (if needed), locks and reads the data dir.
    pub fn open(root: &Path) -> Result<DataDir, String> {
        if root.exists() && !root.is_dir() {
            return Err(format!("data dir {} is not a directory", root.display()));
        }
        fs::create_dir_all(root)
            .map_err(|e| format!("cannot create data dir {}: {e}", root.display()))?;
        let lock = lock(root)?;
        let meta_path = root.join("rill.meta");
        let shards = match fs::read_to_string(&meta_path) {
            Ok(text) => Some(read_meta(&text, &meta_path)?),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(format!("cannot read {}: {e}", meta_path.display())),
        };
        let data = DataDir {
            root: root.to_path_buf(),
            _lock: lock,
            shards,
        };
        data.wait_for_predecessor()?;
        data.remove_stale_shards()?;
        Ok(data)
    }

    /// How many shards the logs are partitioned for (`None`: a new dir).
    pub fn shards(&self) -> Option<usize> {
        self.shards
    }

    /// Records the shard count (after a re-sharding, or for a new dir).
    pub fn set_shards(&mut self, shards: usize) -> Result<(), String> {
        write_meta(&self.root, shards)?;
        self.shards = Some(shards);
        self.remove_stale_shards()
    }

    /// Waits for the writes a killed predecessor left in flight: the LOCK
    /// is free once it is reaped, its io_uring writes may land later
    /// (`log::handover`).
    fn wait_for_predecessor(&self) -> Result<(), String> {
        for index in 0..256 {
            let dir = self.shard_dir(index);
            crate::log::handover::wait_for_writers(&dir)
                .map_err(|e| format!("cannot take over {}: {e}", dir.display()))?;
        }
        Ok(())
    }

    /// Shard dirs past the recorded count are leftovers of an interrupted
    /// re-sharding (their streams live in the recorded shards): removed.
    fn remove_stale_shards(&self) -> Result<(), String> {
        let Some(shards) = self.shards else {
            return Ok(());
        };
        for index in shards..256 {
            let dir = self.shard_dir(index);
            if dir.exists() {
                crate::info!(
                    "removing {} (not one of the {shards} shards)",
                    dir.display()
                );
                fs::remove_dir_all(&dir)
                    .map_err(|e| format!("cannot remove {}: {e}", dir.display()))?;
            }
        }
        Ok(())
    }

    pub fn shard_dir(&self, index: usize) -> PathBuf {
        shard_dir(&self.root, index)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }
}

fn lock(root: &Path) -> Result<File, String> {
    let path = root.join("LOCK");
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    // SAFETY: flock on a descriptor we own; no memory is involved.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        return Err(format!(
            "data dir {} is in use by another rill process (cannot lock {})",
            root.display(),
            path.display()
        ));
    }
    Ok(file)
}

fn read_meta(text: &str, path: &Path) -> Result<usize, String> {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    match (field("format"), field("shards")) {
        (Some(f), _) if f != u64::from(FORMAT) => Err(format!(
            "{} says data format {f}; this rill reads format {FORMAT}",
            path.display()
        )),
        (Some(_), Some(n)) if (1..=256).contains(&n) => Ok(n as usize),
        _ => Err(format!("{} is not a rill metadata file", path.display())),
    }
}

fn write_meta(root: &Path, shards: usize) -> Result<(), String> {
    let tmp = root.join("rill.meta.tmp");
    let text = format!("format={FORMAT}\nshards={shards}\n");
    let write = || -> io::Result<()> {
        fs::write(&tmp, text)?;
        File::open(&tmp)?.sync_all()?;
        fs::rename(&tmp, root.join("rill.meta"))?;
        File::open(root)?.sync_all()
    };
    write().map_err(|e| format!("cannot write {}: {e}", root.join("rill.meta").display()))
}

/// The directory of shard `index` under the data dir `root`.
pub fn shard_dir(root: &Path, index: usize) -> PathBuf {
    root.join(format!("shard-{index:02}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rill-datadir-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn meta_is_recorded_and_stale_shards_removed() {
        let dir = temp("meta");
        let mut data = DataDir::open(&dir).unwrap();
        assert_eq!(data.shards(), None);
        data.set_shards(3).unwrap();
        fs::create_dir_all(data.shard_dir(2)).unwrap();
        drop(data);
        let mut data = DataDir::open(&dir).unwrap();
        assert_eq!(data.shards(), Some(3));
        data.set_shards(2).unwrap();
        assert!(!data.shard_dir(2).exists());
        drop(data);
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn one_server_per_data_dir() {
        let dir = temp("lock");
        let held = DataDir::open(&dir).unwrap();
        assert!(DataDir::open(&dir).err().unwrap().contains("in use"));
        drop(held);
        assert!(DataDir::open(&dir).is_ok());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_file_is_no_data_dir() {
        let file = temp("file");
        fs::write(&file, b"").unwrap();
        let refused = DataDir::open(&file).err().unwrap();
        assert!(refused.contains("is not a directory"), "{refused}");
        fs::remove_file(&file).unwrap();
    }
}
