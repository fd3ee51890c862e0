//! The data directory: its layout, its lock, and the layout's metadata.
//!
//! ```text
//! {data-dir}/LOCK            flock'ed by the running server: one server per data dir
//! {data-dir}/rill.meta       "format=1" and "shards=N": how the logs are partitioned
//! {data-dir}/shard-NN/       one segment log per shard (`log::storage`)
//! ```
//!
//! Streams are placed on shards by hashing their key over the shard count,
//! so a data dir written with N shards holds each stream in the log of
//! `shard_of(key, N)`. Starting with another `--cores` is refused with an
//! explanation until re-sharding at startup exists: never silent loss.

use std::fs::{self, File};
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

pub const FORMAT: u32 = 1;

/// The open data directory; holds the lock for the life of the server.
pub struct DataDir {
    root: PathBuf,
    _lock: File,
}

impl DataDir {
    /// Creates (if needed), locks and checks the data dir for `shards`.
    pub fn open(root: &Path, shards: usize) -> Result<DataDir, String> {
        fs::create_dir_all(root)
            .map_err(|e| format!("cannot create data dir {}: {e}", root.display()))?;
        let lock = lock(root)?;
        let meta_path = root.join("rill.meta");
        match fs::read_to_string(&meta_path) {
            Ok(text) => check_meta(&text, shards, &meta_path)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => write_meta(root, shards)?,
            Err(e) => return Err(format!("cannot read {}: {e}", meta_path.display())),
        }
        Ok(DataDir {
            root: root.to_path_buf(),
            _lock: lock,
        })
    }

    pub fn shard_dir(&self, index: usize) -> PathBuf {
        self.root.join(format!("shard-{index:02}"))
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

fn check_meta(text: &str, shards: usize, path: &Path) -> Result<(), String> {
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
        (Some(_), Some(n)) if n != shards as u64 => Err(format!(
            "the data dir was written with {n} shards and its streams are placed by shard; \
             start with --cores {n} (moving streams to another shard count is not supported yet)"
        )),
        (Some(_), Some(_)) => Ok(()),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rill-datadir-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        dir
    }

    #[test]
    fn meta_is_written_then_checked() {
        let dir = temp("meta");
        drop(DataDir::open(&dir, 2).unwrap());
        assert!(DataDir::open(&dir, 2).is_ok());
        let err = DataDir::open(&dir, 3).err().unwrap();
        assert!(err.contains("--cores 2"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn one_server_per_data_dir() {
        let dir = temp("lock");
        let held = DataDir::open(&dir, 1).unwrap();
        assert!(DataDir::open(&dir, 1).err().unwrap().contains("in use"));
        drop(held);
        assert!(DataDir::open(&dir, 1).is_ok());
        fs::remove_dir_all(&dir).unwrap();
    }
}
