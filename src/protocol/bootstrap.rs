//! Bootstrap (extensions §3): `GET {stream}/bootstrap` answers one
//! `multipart/mixed` entity: the snapshot (or an empty octet-stream part
//! and `Stream-Snapshot-Offset: -1`) then one part per retained message
//! after it, each with its content type, byte-exact. The boundary is
//! unguessable (128 bits from the kernel, `entropy.rs`) and every part is
//! checked not to contain it, so payload bytes cannot forge parts nor, by
//! planting the next boundary, cut a bootstrap short. The shard streams
//! the parts; this file frames them.
//! A HEAD gets the GET's head without the parts (RFC 9110 §9.3.2).

use super::response::{Response, bad_request};
use super::{Request, offset, records};
use crate::stream::Stream;

/// Rejects what bootstrap does not take (§3.1: live parameters).
pub fn check(req: &Request) -> Result<(), Response> {
    if req.head.has_query_param("live") {
        return Err(bad_request(
            "bootstrap is one-shot: live parameters are not allowed",
        ));
    }
    Ok(())
}

/// A boundary from 128 unguessable bits (`crate::entropy`).
pub fn boundary(random: (u64, u64)) -> String {
    format!("rill-bootstrap-{:016x}{:016x}", random.0, random.1)
}

/// The response head: where the parts start and end.
pub fn head(stream: &Stream, boundary: &str, end: u64) -> Response {
    let snapshot_offset = stream
        .snapshot
        .as_ref()
        .map_or_else(|| "-1".to_string(), |s| offset::format(s.offset));
    let at_tail = end == stream.tail();
    let reply = Response::new(200)
        .header(
            "content-type",
            format!("multipart/mixed; boundary={boundary}"),
        )
        .header("stream-snapshot-offset", snapshot_offset)
        .header("stream-next-offset", offset::format(end))
        .header("stream-up-to-date", if at_tail { "true" } else { "false" })
        // Where §3 is silent the base governs: Stream-Closed once the
        // client has everything of a closed stream (PROTOCOL.md §5.6).
        .header_if(at_tail && stream.is_closed(), "stream-closed", "true")
        .header("cache-control", "no-store");
    // extensions §6.10: the record bounds of a record-aware stream.
    records::bounds_headers(stream, reply)
}

/// Appends one part; `false` (nothing appended) when its body contains
/// the boundary.
#[must_use]
pub fn part(out: &mut Vec<u8>, boundary: &str, content_type: &str, body: &[u8]) -> bool {
    let delimiter = format!("--{boundary}");
    if memchr::memmem::find(body, delimiter.as_bytes()).is_some() {
        return false;
    }
    out.extend_from_slice(delimiter.as_bytes());
    out.extend_from_slice(b"\r\nContent-Type: ");
    out.extend_from_slice(content_type.as_bytes());
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(body);
    out.extend_from_slice(b"\r\n");
    true
}

/// The closing delimiter.
pub fn close(out: &mut Vec<u8>, boundary: &str) {
    out.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_and_forgery() {
        let b = boundary((1, 2));
        let mut out = Vec::new();
        assert!(part(&mut out, &b, "text/plain", b"hi"));
        close(&mut out, &b);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            format!("--{b}\r\nContent-Type: text/plain\r\n\r\nhi\r\n--{b}--\r\n")
        );
        let forged = format!("x\r\n--{b}\r\nContent-Type: evil\r\n\r\n");
        assert!(!part(&mut Vec::new(), &b, "text/plain", forged.as_bytes()));
    }
}
