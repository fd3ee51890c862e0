//! The hand-over of a log from a process that died to the next one.
//!
//! A SIGKILLed rill is reaped while writes it submitted through io_uring may
//! still be in flight: the kernel tears the ring down afterwards, and the
//! data dir's `LOCK` is free by then. A next process that recovered the log
//! meanwhile would not see such a write, take its sequence numbers for its
//! own records, and the late write would then land over or beside them
//! (recovery skips records below the expected sequence as duplicates: a
//! re-sharding's first records vanished so, found by a crash probe).
//!
//! Every descriptor rill opens on a segment holds a shared `flock`, and an
//! in-flight io_uring request holds a reference to its file, so the lock
//! lasts until the last write on it completed. A process taking over waits
//! for an exclusive lock on every segment before it reads any.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

/// Marks `file` (a segment this process opened) as in use while it or an
/// I/O submitted on it lives. Within one data dir only `wait_for_writers`,
/// before anything is opened, asks for the exclusive lock, so this never
/// waits; were the lock not to be had, nothing is lost but the guard.
pub fn hold_shared(file: &File) {
    // SAFETY: flock on a descriptor the caller owns; no memory involved.
    let _ = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_SH | libc::LOCK_NB) };
}

/// How long a dead predecessor's writes may take to complete.
const PATIENCE: Duration = Duration::from_secs(60);
/// After this long a line says what start-up waits for.
const SAY_AFTER: Duration = Duration::from_secs(1);

/// Waits until no other process's descriptor or in-flight I/O holds any
/// segment (`*.seg`, `*.seg.tmp`) in `dir`.
pub fn wait_for_writers(dir: &Path) -> io::Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(()); // not created yet: nothing was written there
    };
    for entry in entries {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.ends_with(".seg") || name.ends_with(".seg.tmp") {
            wait_for(&path)?;
        }
    }
    Ok(())
}

fn wait_for(path: &Path) -> io::Result<()> {
    let file = match File::open(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        opened => opened?,
    };
    let started = Instant::now();
    let mut said = false;
    loop {
        // SAFETY: flock on the descriptor opened above; no memory involved.
        let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(()); // released when `file` closes
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::WouldBlock {
            return Err(error);
        }
        if started.elapsed() >= PATIENCE {
            return Err(io::Error::other(format!(
                "{} is still held by another process after {PATIENCE:?}",
                path.display()
            )));
        }
        if !said && started.elapsed() >= SAY_AFTER {
            crate::info!(
                "waiting for a previous process's writes to {}",
                path.display()
            );
            said = true;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn a_takeover_waits_until_the_last_holder_lets_go() {
        let dir = std::env::temp_dir().join(format!("rill-handover-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let segment = dir.join("00000000000000000001.seg");
        std::fs::write(&segment, b"x").unwrap();
        std::fs::write(dir.join("notes.txt"), b"not a segment").unwrap();
        // Another open file description, as a dead process's in-flight
        // write keeps one.
        let held = File::options().write(true).open(&segment).unwrap();
        hold_shared(&held);
        let released = Arc::new(AtomicBool::new(false));
        let releaser = {
            let released = released.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                released.store(true, Ordering::SeqCst);
                drop(held);
            })
        };
        wait_for_writers(&dir).unwrap();
        assert!(released.load(Ordering::SeqCst), "returned while still held");
        releaser.join().unwrap();
        wait_for_writers(&dir.join("absent")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
