//! Operating-system limits that many open connections run into: this
//! process's open-file limit (raised to the hard limit), the server's, and
//! the local port range a client's connections to one address draw from.

use crate::client::Error;

/// File descriptors kept beside the connections (stdio, the runtime's
/// epoll and wakers, the writer's connection, JSON output).
pub const SPARE_FDS: u64 = 64;

/// Raises RLIMIT_NOFILE's soft limit to the hard limit and checks that
/// `connections` sockets fit under it; returns the new soft limit.
pub fn raise_nofile(connections: usize, flag: &str) -> Result<u64, Error> {
    // SAFETY: getrlimit/setrlimit only read and write the struct we pass.
    let mut lim: libc::rlimit = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(format!("getrlimit: {}", std::io::Error::last_os_error()).into());
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            lim = raised;
        }
    }
    let soft = lim.rlim_cur as u64;
    let needed = connections as u64 + SPARE_FDS;
    if needed > soft {
        return Err(format!(
            "{flag} {connections} needs about {needed} open files, but this process may \
             open only {soft} (RLIMIT_NOFILE soft limit, raised to the hard limit {}); \
             lower {flag} or raise the hard limit (`ulimit -Hn` as root, \
             /etc/security/limits.conf, or systemd's LimitNOFILE)",
            lim.rlim_max as u64
        )
        .into());
    }
    Ok(soft)
}

/// Warnings (printed to stderr) about limits outside this process that
/// `connections` to one server address would exceed.
pub fn warn_outside(connections: usize, server_pid: Option<u32>) {
    let needed = connections as u64 + SPARE_FDS;
    if let Some(pid) = server_pid
        && let Some(soft) = server_nofile(pid)
        && soft < needed
    {
        eprintln!(
            "rill-bench: warning: the server (pid {pid}) may open only {soft} files, \
             fewer than the {connections} connections asked for"
        );
    }
    if let Some((lo, hi)) = local_port_range()
        && hi.saturating_sub(lo) + 1 < connections as u64
    {
        eprintln!(
            "rill-bench: warning: net.ipv4.ip_local_port_range {lo}-{hi} has fewer ports \
             than the {connections} connections asked for"
        );
    }
}

/// The soft "Max open files" of another process, from `/proc/PID/limits`.
fn server_nofile(pid: u32) -> Option<u64> {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).ok()?;
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    let soft = line["Max open files".len()..].split_whitespace().next()?;
    soft.parse().ok()
}

fn local_port_range() -> Option<(u64, u64)> {
    let text = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").ok()?;
    let mut it = text.split_whitespace().map(|s| s.parse::<u64>().ok());
    Some((it.next()??, it.next()??))
}
