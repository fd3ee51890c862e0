//! A spare descriptor per shard, so that the connection limit the process's
//! descriptors set is answered like `--max-connections` (503 with
//! Retry-After) rather than not at all. At the limit every accept fails with
//! EMFILE and the clients in the listen queue would wait unanswered; with
//! the spare closed, one of them can be accepted, refused and closed, which
//! frees the descriptor again.

use std::fs::File;
use std::io;
use std::os::fd::{FromRawFd, RawFd};

/// Clients refused per accept failure; the accept loop backs off between.
const REFUSALS_PER_PASS: usize = 64;

/// Whether an accept failed for want of a descriptor.
pub fn out_of_descriptors(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EMFILE | libc::ENFILE))
}

/// The spare descriptor (`/dev/null`, opened while descriptors are free).
pub struct Spare(Option<File>);

impl Default for Spare {
    fn default() -> Spare {
        Spare(File::open("/dev/null").ok())
    }
}

impl Spare {
    /// Accepts and `refuse`s the connections waiting on `listener`, one at a
    /// time through the spare; returns how many. The caller's own accept
    /// must not be in flight (only this thread accepts on `listener`).
    pub fn refuse_waiting(
        &mut self,
        listener: RawFd,
        refuse: impl Fn(std::net::TcpStream),
    ) -> usize {
        let mut refused = 0;
        while refused < REFUSALS_PER_PASS && waiting(listener) {
            self.0 = None;
            // SAFETY: accept4 on a listening socket this shard owns, with no
            // peer address asked for (null pointers are allowed).
            let fd = unsafe {
                libc::accept4(
                    listener,
                    std::ptr::null_mut(),
                    std::ptr::null_mut(),
                    libc::SOCK_CLOEXEC,
                )
            };
            if fd < 0 {
                break;
            }
            // SAFETY: `fd` was just returned by accept4: an open socket
            // nothing else owns; the TcpStream closes it when dropped.
            refuse(unsafe { std::net::TcpStream::from_raw_fd(fd) });
            refused += 1;
            self.0 = File::open("/dev/null").ok();
            if self.0.is_none() {
                break;
            }
        }
        if self.0.is_none() {
            self.0 = File::open("/dev/null").ok();
        }
        refused
    }
}

/// Whether a connection waits on `listener` (so accept4 will not block).
fn waiting(listener: RawFd) -> bool {
    let mut poll = libc::pollfd {
        fd: listener,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, a zero timeout.
    let ready = unsafe { libc::poll(&mut poll, 1, 0) };
    ready == 1 && poll.revents & libc::POLLIN != 0
}
