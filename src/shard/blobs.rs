//! Snapshot blob files (extensions §2): one file per snapshot,
//! `shard-NN/snapshots/{incarnation}-{offset}.snap`, written once and never
//! rewritten in place (a publish replaces a file; it does not rewrite one),
//! so that a file may be shared by hard links: forks inherit their source's
//! blob (§3.4) and re-sharding moves blobs with their streams.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The file name of incarnation `stream_id`'s snapshot blob at `offset`.
pub fn name(stream_id: u64, offset: u64) -> String {
    format!("{stream_id:016x}-{offset:016x}.snap")
}

/// The blob file of incarnation `stream_id` at `offset` in `dir`.
pub fn path(dir: &Path, stream_id: u64, offset: u64) -> PathBuf {
    dir.join(name(stream_id, offset))
}

pub fn remove_if_present(path: &Path) -> io::Result<()> {
    match std::fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// Writes a new blob (replacing any file of that name, never rewriting
/// it: a fork may hold the old one) and syncs it and its directory.
pub async fn write(dir: &Path, path: &Path, body: &[u8]) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    remove_if_present(path)?;
    let file = monoio::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)
        .await?;
    let (result, _) = file.write_all_at(body.to_vec(), 0).await;
    result?;
    file.sync_all().await?;
    file.close().await?;
    File::open(dir)?.sync_all()
}

pub async fn read(path: &Path, len: u64) -> io::Result<Vec<u8>> {
    read_open(File::open(path)?, len).await
}

/// Reads the `len` bytes of a blob opened earlier (see `adopt`).
pub async fn read_open(file: File, len: u64) -> io::Result<Vec<u8>> {
    let file = monoio::fs::File::from_std(file)?;
    let (result, buf) = file.read_exact_at(vec![0u8; len as usize], 0).await;
    result?;
    Ok(buf)
}

/// Re-sharding: gives the blob `from` the name of incarnation `stream_id`
/// at `offset` in `dir` (a hard link, else a copy), replacing what an
/// interrupted earlier attempt left; durable when this returns.
pub fn share(from: &Path, dir: &Path, stream_id: u64, offset: u64) -> io::Result<()> {
    std::fs::create_dir_all(dir)?;
    let to = path(dir, stream_id, offset);
    remove_if_present(&to)?;
    if std::fs::hard_link(from, &to).is_err() {
        copy(&mut File::open(from)?, &to)?;
    }
    File::open(dir)?.sync_all()
}

/// Forks: gives the blob held open in `from` (opened when the source
/// planned the fork, so it is that snapshot's even if it was superseded
/// or republished since) the name `to`, which must not exist; `len` is
/// the snapshot's length. A hard link through `/proc/self/fd`, which works
/// while the file has a name; else a copy. Durable when this returns.
pub fn adopt(from: &File, len: u64, to: &Path) -> io::Result<()> {
    if from.metadata()?.len() != len {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "the snapshot blob has the wrong length",
        ));
    }
    let dir = to.parent().expect("a blob path has a directory");
    std::fs::create_dir_all(dir)?;
    if to.exists() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            "another blob has this name",
        ));
    }
    let open = PathBuf::from(format!("/proc/self/fd/{}", from.as_raw_fd()));
    if link_following(&open, to).is_err() {
        copy(&mut File::open(&open)?, to)?;
    }
    File::open(dir)?.sync_all()
}

/// `linkat(2)` with AT_SYMLINK_FOLLOW: links the file `/proc/self/fd/N`
/// names, not the symlink (`std::fs::hard_link` does not follow).
fn link_following(from: &Path, to: &Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_bytes())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))
    };
    let (from, to) = (c(from)?, c(to)?);
    // SAFETY: both are valid NUL-terminated C strings that outlive the
    // call; linkat only reads them.
    let rc = unsafe {
        libc::linkat(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            libc::AT_SYMLINK_FOLLOW,
        )
    };
    match rc {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Copies `from` to a temporary file beside `to`, syncs it and renames it
/// to `to`: `to` never names a partial blob.
fn copy(from: &mut File, to: &Path) -> io::Result<()> {
    let partial = to.with_extension("snap.tmp");
    let mut out = File::create(&partial)?;
    io::copy(from, &mut out)?;
    out.sync_all()?;
    std::fs::rename(&partial, to)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rill-blobs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn an_adopted_blob_is_the_one_held_open() {
        let dir = scratch("adopt");
        let source = path(&dir, 1, 8);
        std::fs::write(&source, b"old").unwrap();
        let held = File::open(&source).unwrap();
        // Republished under the same name after the plan: a new file.
        remove_if_present(&source).unwrap();
        std::fs::write(&source, b"newer").unwrap();
        let fork = path(&dir, 2, 8);
        adopt(&held, 3, &fork).unwrap();
        assert_eq!(std::fs::read(&fork).unwrap(), b"old");
        // Superseded and removed: still adoptable, by a copy.
        let gone = path(&dir, 3, 8);
        std::fs::write(&gone, b"abc").unwrap();
        let held = File::open(&gone).unwrap();
        std::fs::remove_file(&gone).unwrap();
        adopt(&held, 3, &path(&dir, 4, 8)).unwrap();
        assert_eq!(std::fs::read(path(&dir, 4, 8)).unwrap(), b"abc");
        // Never over another blob, never of the wrong length.
        assert_eq!(
            adopt(&held, 3, &fork).unwrap_err().kind(),
            io::ErrorKind::AlreadyExists
        );
        assert_eq!(
            adopt(&held, 4, &path(&dir, 5, 8)).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
