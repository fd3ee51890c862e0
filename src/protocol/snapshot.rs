//! Snapshots (extensions §2): publish at a committed message boundary,
//! idempotent by digest, `Stream-Snapshot-Match`, latest redirect, read,
//! delete rules and HEAD metadata. One snapshot is visible per stream;
//! publishing replaces it. The blob I/O is the shard's.

use xxhash_rust::xxh3::xxh3_128;

use super::response::{Response, bad_request, conflict, not_found};
use super::{Request, content_type, offset, records};
use crate::stream::{Snapshot, Stream};

/// What a publish must do.
#[derive(Debug, PartialEq, Eq)]
pub enum Publish {
    /// Write this blob, then commit the snapshot.
    Write(Snapshot),
    /// Already published with the same content: the same digest again.
    Same(Response),
}

/// "A digest of the snapshot's content type and body."
pub fn digest(content_type: &str, body: &[u8]) -> String {
    let mut bytes = Vec::with_capacity(content_type.len() + 1 + body.len());
    bytes.extend_from_slice(content_type.as_bytes());
    bytes.push(0);
    bytes.extend_from_slice(body);
    format!("xxh3-128:{:032x}", xxh3_128(&bytes))
}

fn parse_offset(text: &str) -> Result<u64, Response> {
    offset::parse_token(text)
        .ok_or_else(|| bad_request("invalid offset: use a Stream-Next-Offset the server returned"))
}

/// The offset an operation names: its path segment, or on record-aware
/// streams `?record=R` resolved to where record R starts (§2.2, §6.10).
fn target(req: &Request, stream: &Stream, offset_text: Option<&str>) -> Result<u64, Response> {
    match offset_text {
        Some(_) if req.head.has_query_param("record") => Err(bad_request(
            "name the position once: an offset in the path or ?record=, not both",
        )),
        Some(text) => parse_offset(text),
        None => records::operation_offset(req, stream),
    }
}

/// PUT `{stream}/snapshot/{offset}` or `{stream}/snapshot?record=R` (§2.2).
pub fn decide_publish(
    req: &Request,
    stream: &Stream,
    offset_text: Option<&str>,
    limit: usize,
) -> Result<Publish, Response> {
    let at = target(req, stream, offset_text)?;
    if at > stream.tail() {
        return Err(conflict(
            "snapshot_beyond_tail",
            "snapshot offset is beyond the committed tail",
        ));
    }
    // Before the boundary check: offsets retention removed are no longer
    // known boundaries, and §2.2 answers every one of them 410.
    if at < stream.retained {
        return Err(Response::error(
            410,
            "offset_gone",
            "the snapshot offset is before the earliest retained offset",
        ));
    }
    if !stream.is_boundary(at) {
        return Err(bad_request(
            "snapshot offset is not on a committed message boundary",
        ));
    }
    if req.body.len() > limit {
        return Err(Response::error(
            413,
            "snapshot_too_large",
            "the snapshot exceeds the size limit",
        ));
    }
    let content_type = match req.head.header("content-type").map(str::trim) {
        None | Some("") => "application/octet-stream".to_string(),
        Some(ct) => ct.to_string(),
    };
    let digest = digest(&content_type, req.body);
    // A repeat of the visible snapshot succeeds (§2.2 "MUST succeed") even
    // with the Stream-Snapshot-Match its first send carried, now stale.
    if let Some(current) = stream.snapshot.as_ref().filter(|s| s.offset == at) {
        // "the same content type": the same media type however its
        // case-insensitive parts are spelled; the digest stays the first's.
        let same = content_type::identical(&current.content_type, &content_type)
            && self::digest(&current.content_type, req.body) == current.digest;
        if !same {
            return Err(conflict(
                "snapshot_exists",
                "a different snapshot is published at this offset",
            ));
        }
        return Ok(Publish::Same(published(current)));
    }
    if let Some(expected) = req.head.header("stream-snapshot-match")
        && stream
            .snapshot
            .as_ref()
            .is_none_or(|s| s.digest != expected)
    {
        return Err(conflict(
            "snapshot_mismatch",
            "Stream-Snapshot-Match does not match the visible snapshot",
        ));
    }
    Ok(Publish::Write(Snapshot {
        offset: at,
        content_type,
        digest,
        len: req.body.len() as u64,
    }))
}

/// The 204 of a successful publish.
pub fn published(snapshot: &Snapshot) -> Response {
    Response::new(204).header("stream-snapshot-digest", snapshot.digest.clone())
}

/// GET `{stream}/snapshot` (§2.3): 307 to the latest snapshot, or 404.
pub fn latest(req: &Request, stream: &Stream) -> Response {
    match &stream.snapshot {
        Some(s) => {
            let location = format!(
                "{}/{}",
                req.head.raw_path.trim_end_matches('/'),
                offset::format(s.offset)
            );
            Response::new(307)
                .header("location", location)
                .header("cache-control", "no-store")
        }
        None => not_found("the stream has no snapshot"),
    }
}

/// The visible snapshot at `offset_text`, if that is the one published.
pub fn find<'a>(stream: &'a Stream, offset_text: &str) -> Result<&'a Snapshot, Response> {
    let at = parse_offset(offset_text)?;
    stream
        .snapshot
        .as_deref()
        .filter(|s| s.offset == at)
        .ok_or_else(|| not_found("no snapshot at this offset"))
}

/// GET `{stream}/snapshot/{offset}` (§2.5) with the blob read.
pub fn read_reply(stream: &Stream, snapshot: &Snapshot, blob: Vec<u8>) -> Response {
    let up_to_date = snapshot.offset == stream.tail();
    let reply = Response::new(200)
        .header("content-type", snapshot.content_type.clone())
        .header("stream-snapshot-offset", offset::format(snapshot.offset))
        .header("stream-snapshot-digest", snapshot.digest.clone())
        .header("stream-next-offset", offset::format(snapshot.offset))
        .header(
            "stream-up-to-date",
            if up_to_date { "true" } else { "false" },
        )
        .header("cache-control", "no-store")
        .with_body(blob);
    records::bounds_headers_at(stream, reply, snapshot.offset)
}

/// DELETE `{stream}/snapshot/{offset}` (§2.6): the latest visible snapshot
/// keeps /bootstrap complete (409); superseded ones are gone (404).
pub fn delete(stream: &Stream, offset_text: &str) -> Response {
    match find(stream, offset_text) {
        Ok(_) => conflict(
            "snapshot_in_use",
            "the latest visible snapshot cannot be deleted",
        ),
        Err(reply) => reply,
    }
}

/// PUT `{stream}/retention/{offset}` or `?record=R` (§2.2): aligned,
/// monotonic, not past the latest snapshot. `Ok(Some((offset, F)))` with
/// the record ordinal there; `Ok(None)`: already there (204, no commit).
pub fn decide_retention(
    req: &Request,
    stream: &Stream,
    offset_text: Option<&str>,
) -> Result<Option<(u64, u64)>, Response> {
    let at = target(req, stream, offset_text)?;
    if at > stream.tail() {
        return Err(conflict(
            "retention_beyond_tail",
            "the retention offset is beyond the committed tail",
        ));
    }
    if at < stream.retained {
        return Err(conflict(
            "retention_backward",
            "retention cannot move backward",
        ));
    }
    if !stream.is_boundary(at) {
        return Err(bad_request(
            "the retention offset is not on a committed message boundary",
        ));
    }
    if stream.snapshot.as_ref().is_none_or(|s| at > s.offset) {
        return Err(conflict(
            "retention_past_snapshot",
            "retention cannot pass the latest published snapshot",
        ));
    }
    let first_record = stream
        .messages
        .ordinal_at(at)
        .expect("an accepted retention offset is a message boundary");
    Ok((at != stream.retained).then_some((at, first_record)))
}

/// HEAD metadata (§2.4).
pub fn head_headers(stream: &Stream, reply: Response) -> Response {
    match &stream.snapshot {
        Some(s) => reply
            .header("stream-snapshot-offset", offset::format(s.offset))
            .header("stream-snapshot-digest", s.digest.clone()),
        None => reply,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_covers_type_and_body() {
        assert_eq!(digest("a", b"x"), digest("a", b"x"));
        assert_ne!(digest("a", b"x"), digest("b", b"x"));
        assert_ne!(digest("a", b"x"), digest("a", b"y"));
        assert!(digest("a", b"").starts_with("xxh3-128:"));
    }
}
