//! systemd service notifications (`sd_notify(3)` protocol) without libsystemd.
//!
//! Under `Type=notify` systemd passes the address of a datagram socket in
//! `NOTIFY_SOCKET`; the service sends newline-separated `KEY=VALUE` lines
//! to it: `READY=1` once it serves (rill: after every shard recovered its
//! log), `STOPPING=1` when it begins to shut down, `STATUS=...` as free
//! text for `systemctl status`. The address is a filesystem path
//! (`/run/systemd/notify`) or, with a leading `@`, a name in the Linux
//! abstract namespace. Without `NOTIFY_SOCKET` (not run by systemd) every
//! call does nothing. Only `AF_UNIX` addresses are supported (`vsock:`
//! addresses, used by VMs, are reported as unsupported).

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// The environment variable systemd sets for `Type=notify` services.
pub const NOTIFY_SOCKET: &str = "NOTIFY_SOCKET";

/// Parses a `NOTIFY_SOCKET` value: `/path` or `@abstract-name`.
pub fn parse_address(value: &str) -> io::Result<SocketAddr> {
    match value.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes()),
        None if value.starts_with('/') => SocketAddr::from_pathname(value),
        None => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!("unsupported {NOTIFY_SOCKET} address {value:?}"),
        )),
    }
}

/// Sends `state` (e.g. `"READY=1\nSTATUS=serving"`) as one datagram to
/// `address`.
pub fn send_to(address: &SocketAddr, state: &str) -> io::Result<()> {
    let socket = UnixDatagram::unbound()?;
    let sent = socket.send_to_addr(state.as_bytes(), address)?;
    if sent != state.len() {
        return Err(io::Error::new(
            io::ErrorKind::WriteZero,
            "notification datagram truncated",
        ));
    }
    Ok(())
}

/// Sends `state` to the socket named by `NOTIFY_SOCKET`. `Ok(false)` when
/// the variable is unset or empty (not started by systemd).
pub fn notify(state: &str) -> io::Result<bool> {
    let Some(value) = std::env::var_os(NOTIFY_SOCKET).filter(|v| !v.is_empty()) else {
        return Ok(false);
    };
    let value = value
        .to_str()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "NOTIFY_SOCKET is not UTF-8"))?;
    send_to(&parse_address(value)?, state)?;
    Ok(true)
}

/// Like [`notify`], logging a failure instead of returning it: a lost
/// notification must not stop the server (systemd will time it out).
pub fn notify_or_log(state: &str) {
    if let Err(e) = notify(state) {
        crate::warn!("cannot notify systemd ({state:?}): {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_path(name: &str) -> std::path::PathBuf {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        std::env::temp_dir().join(format!("rill-{name}-{}-{nanos}", std::process::id()))
    }

    fn receive(socket: &UnixDatagram) -> String {
        socket
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let mut buf = [0u8; 512];
        let n = socket.recv(&mut buf).expect("a datagram");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[test]
    fn sends_to_a_path() {
        let path = temp_path("notify");
        let socket = UnixDatagram::bind(&path).unwrap();
        let address = parse_address(path.to_str().unwrap()).unwrap();
        send_to(&address, "READY=1\nSTATUS=ok").unwrap();
        assert_eq!(receive(&socket), "READY=1\nSTATUS=ok");
        let _ = std::fs::remove_file(&path);
    }

    #[test]
    fn sends_to_an_abstract_name() {
        let name = temp_path("abstract").display().to_string();
        let bound = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let socket = UnixDatagram::bind_addr(&bound).unwrap();
        let address = parse_address(&format!("@{name}")).unwrap();
        assert_eq!(address.as_abstract_name(), Some(name.as_bytes()));
        send_to(&address, "STOPPING=1").unwrap();
        assert_eq!(receive(&socket), "STOPPING=1");
    }

    #[test]
    fn rejects_other_addresses() {
        assert!(parse_address("vsock:2:1234").is_err());
        assert!(parse_address("relative/path").is_err());
        assert!(parse_address("/no/such/dir/notify").is_ok());
        let missing = parse_address("/no/such/dir/notify").unwrap();
        assert!(send_to(&missing, "READY=1").is_err());
    }
}
