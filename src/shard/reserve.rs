//! The disk reserve (OPERATIONS "Disk"; STATUS Next 8): on a full disk a
//! delete needs a record logged and the cleaner needs room for what it
//! copies, so without room kept back nothing inside rill could free space.
//!
//! Each shard keeps a file of one segment's size (`disk-reserve`, blocks
//! allocated, never written) in its directory. When a log write meets a
//! full disk, the server enters reserve mode: every shard gives its file
//! back to the filesystem, and writes that add data (creates, appends,
//! closes, forks, attributes, snapshots, bucket creates) get 507 while
//! deletes, retention, expiry and the cleaner's copies go on in the room
//! given back. The mode ends once the filesystem has room for every
//! shard's reserve and two segments each again (looked at on each refused
//! write and each cleaner pass); the files are then made again.

use std::collections::HashSet;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::Shard;
use super::commit::CommitError;
use crate::log::storage::{allocate, unlink_off_thread};
use crate::stream::Command;

const FILE: &str = "disk-reserve";

/// Whether any server of this process is in reserve mode (the fast path
/// of every write looks only at this).
static ANY: AtomicBool = AtomicBool::new(false);
/// The servers in reserve mode, by their shared configuration's address
/// (a process runs one server; tests run several).
static RESERVED: Mutex<Option<HashSet<usize>>> = Mutex::new(None);

/// Which server `shard` belongs to: its shards share one configuration.
fn server_of(shard: &Shard) -> usize {
    Arc::as_ptr(&shard.config) as usize
}

fn in_reserve(server: usize) -> bool {
    ANY.load(Ordering::Acquire)
        && RESERVED
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .is_some_and(|servers| servers.contains(&server))
}

/// Marks `server` in or out of reserve mode; whether that changed it.
fn set_reserve(server: usize, on: bool) -> bool {
    let mut guard = RESERVED.lock().unwrap_or_else(|e| e.into_inner());
    let servers = guard.get_or_insert_with(HashSet::new);
    let changed = match on {
        true => servers.insert(server),
        false => servers.remove(&server),
    };
    ANY.store(!servers.is_empty(), Ordering::Release);
    changed
}

/// Whether a command frees space (or costs next to none): taken in
/// reserve mode.
pub fn frees_space(command: &Command) -> bool {
    matches!(
        command,
        Command::Delete { .. }
            | Command::SoftDelete { .. }
            | Command::Retain { .. }
            | Command::Touch { .. }
    )
}

/// The refusal of a write that adds data in reserve mode (507).
pub fn refusal() -> CommitError {
    CommitError {
        no_space: true,
        too_large: false,
        message: "the disk is full: until space is freed, only deletes, retention and \
                  expiry are taken"
            .to_string(),
    }
}

/// Whether a write that adds data must be refused now: the server is in
/// reserve mode and the filesystem has not got room again.
pub fn refuses_data(shard: &Shard) -> bool {
    shard.config.disk_reserve && in_reserve(server_of(shard)) && !room_again(shard)
}

/// Leaves reserve mode (and says so) if the filesystem has room for
/// every shard's reserve and two segments each; whether it had.
fn room_again(shard: &Shard) -> bool {
    let config = &shard.config;
    let wanted = 3 * config.cores as u64 * config.segment_bytes;
    // A filesystem that cannot be measured does not keep writes out.
    let room = super::metrics::disk_space(&config.data_dir).is_none_or(|(free, _)| free >= wanted);
    if room && set_reserve(server_of(shard), false) {
        crate::info!(
            shard = shard.index,
            "the disk has room again: all writes are taken; reserves are made again"
        );
    }
    room
}

/// A log write met a full disk: the server enters reserve mode and this
/// shard's reserve goes back to the filesystem (the others' on their
/// cleaner's next pass, or their own full write).
pub async fn disk_full(shard: &Shard) {
    if !shard.config.disk_reserve {
        return;
    }
    if set_reserve(server_of(shard), true) {
        crate::warn!(
            shard = shard.index,
            "the disk is full: writes that add data get 507 until space is freed; \
             deletes, retention and expiry go on in the reserved room"
        );
    }
    release(&shard_dir(shard)).await;
}

/// The cleaner's pass: in reserve mode, give this shard's reserve back
/// and look whether room came back; otherwise make sure it exists.
pub async fn on_pass(shard: &Shard) {
    if !shard.config.disk_reserve {
        return;
    }
    let dir = shard_dir(shard);
    if in_reserve(server_of(shard)) && !room_again(shard) {
        release(&dir).await;
        return;
    }
    if let Err(e) = make(&dir, shard.config.segment_bytes) {
        crate::warn!(shard = shard.index, "cannot make the disk reserve: {e}");
    }
}

/// Makes the shard's reserve file (at startup and when room came back).
/// On a full disk there is none: the server enters reserve mode.
pub fn make_at_start(shard: &Shard) {
    let dir = shard_dir(shard);
    if !shard.config.disk_reserve {
        // Turned off: a reserve left from before goes back to the disk.
        let _ = std::fs::remove_file(dir.join(FILE));
        return;
    }
    if let Err(e) = make(&dir, shard.config.segment_bytes) {
        crate::warn!(shard = shard.index, "cannot make the disk reserve: {e}");
        if matches!(e.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT)) {
            set_reserve(server_of(shard), true);
        }
    }
}

fn shard_dir(shard: &Shard) -> PathBuf {
    crate::datadir::shard_dir(&shard.config.data_dir, shard.index)
}

/// Allocates `bytes` of blocks to the reserve file unless it has them.
fn make(dir: &Path, bytes: u64) -> io::Result<()> {
    let path = dir.join(FILE);
    if std::fs::metadata(&path).is_ok_and(|m| m.len() >= bytes) {
        return Ok(());
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)?;
    if let Err(e) = allocate(file.as_raw_fd(), bytes) {
        drop(file);
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    Ok(())
}

/// Unlinks the reserve file, if any, off the shard's thread.
async fn release(dir: &Path) {
    let path = dir.join(FILE);
    if path.exists() {
        let _ = unlink_off_thread(path).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_mode_is_per_server() {
        let (a, b) = (1, 3);
        assert!(set_reserve(a, true));
        assert!(!set_reserve(a, true), "already in");
        assert!(in_reserve(a));
        assert!(!in_reserve(b));
        assert!(set_reserve(a, false));
        assert!(!in_reserve(a));
    }

    #[test]
    fn only_writes_that_free_space_pass_the_reserve() {
        let delete = Command::Delete {
            key: "k".into(),
            stream_id: 1,
        };
        assert!(frees_space(&delete));
        let close = Command::Close {
            key: "k".into(),
            stream_id: 1,
            producer: None,
            now_ms: 0,
        };
        assert!(!frees_space(&close));
    }
}
