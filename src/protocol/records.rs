//! JSON record coordinates (extensions §6): the capability token, record
//! acknowledgements on writes (§6.3), `Stream-Record-Match` (§6.4), HEAD
//! metadata (§6.5), the record-aware read parameters and their 400/410
//! rules (§6.6), and the envelope view (§6.8). The record model is active
//! on every `application/json` stream, on both surfaces; ordinals come from
//! the stream's `RecordIndex`.

use super::response::{Response, bad_request};
use super::{Request, offset};
use crate::stream::Stream;

/// The extension token (§6).
pub const TOKEN: &str = "json-record-coordinates-v1";
/// §6.8 content type of an envelope read, and of one envelope SSE event.
pub const ENVELOPE_NDJSON: &str = "application/vnd.durable-stream-records+ndjson";
pub const ENVELOPE_EVENT: &str = "application/vnd.durable-stream-record+json";

/// Whether the record model applies to `stream` (§6: JSON streams only).
pub fn active(stream: &Stream) -> bool {
    stream.json
}

/// Adds `Stream-Extensions` when the extension is active for the target
/// stream (and the header is not there yet).
pub fn advertise(stream: &Stream, reply: Response) -> Response {
    match active(stream) && reply.get_header("stream-extensions").is_none() {
        true => reply.header("stream-extensions", TOKEN),
        false => reply,
    }
}

/// §6.3: the ordinal range a write created (both the record tail when it
/// created none), on JSON streams.
pub fn ack(stream: &Stream, reply: Response, start: u64, next: u64) -> Response {
    if !active(stream) {
        return reply;
    }
    debug_assert!(start <= next);
    advertise(stream, reply)
        .header("stream-record-start", start.to_string())
        .header("stream-record-next", next.to_string())
}

/// The number of records canonical JSON bytes hold (one per line).
pub fn count(canonical: &[u8]) -> u64 {
    memchr::memchr_iter(b'\n', canonical).count() as u64
}

/// Messages in `canonical` data: a record a line on a JSON stream, else
/// the one message an append (or initial body) is when not empty.
pub fn messages_in(json: bool, canonical: &[u8]) -> u64 {
    match json {
        true => count(canonical),
        false => u64::from(!canonical.is_empty()),
    }
}

/// §6.4 `Stream-Record-Match`: the append goes ahead only at this record
/// tail; otherwise 412 with the current tail.
pub fn check_match(req: &Request, stream: &Stream) -> Result<(), Response> {
    let Some(text) = req.head.header("stream-record-match") else {
        return Ok(());
    };
    if !active(stream) {
        return Err(bad_request(
            "Stream-Record-Match needs a stream with JSON record coordinates",
        ));
    }
    let text = text.trim();
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad_request(
            "Stream-Record-Match must be an unsigned integer",
        ));
    }
    // §6.4 "the supplied unsigned integer": one past u64 is well formed,
    // and never the record tail.
    let next = stream.messages.next();
    if text.parse::<u64>() == Ok(next) {
        return Ok(());
    }
    Err(advertise(
        stream,
        Response::error(
            412,
            "record_tail_mismatch",
            "Stream-Record-Match does not match the record tail",
        )
        .header("stream-record-next", next.to_string())
        .header("stream-next-offset", offset::format(stream.head_tail())),
    ))
}

/// §6.5 and §6.10: `Stream-Record-First` and `-Next` as readers see them.
pub fn bounds_headers(stream: &Stream, reply: Response) -> Response {
    with_bounds(stream, reply, || stream.record_next())
}

/// `bounds_headers` for a reply whose `Stream-Next-Offset` is `next`, a
/// record boundary before the tail (a snapshot read): `Stream-Record-Next`
/// names that boundary too (§6.7: the two name one boundary), so a client
/// resuming by record does not skip the records after it.
pub fn bounds_headers_at(stream: &Stream, reply: Response, next: u64) -> Response {
    with_bounds(stream, reply, || {
        stream
            .messages
            .ordinal_at(next)
            .unwrap_or_else(|| stream.record_next())
    })
}

/// The bounds headers with `Stream-Record-Next` = `next()`, on a stream
/// that implements record coordinates (else `reply` as it is).
fn with_bounds(stream: &Stream, reply: Response, next: impl FnOnce() -> u64) -> Response {
    if !active(stream) {
        return reply;
    }
    advertise(stream, reply)
        .header("stream-record-first", stream.first_record.to_string())
        .header("stream-record-next", next().to_string())
}

/// Where a record-aware read starts (§6.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordStart {
    At(u64),
    Now,
    Tail(u64),
}

/// A record-aware read's options: it returns whole records only.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordView {
    pub max_records: Option<u64>,
    /// §6.8 `record_view=envelope`.
    pub envelope: bool,
}

/// A non-negative decimal integer; one too big for u64 saturates (it is
/// past any tail, which the caller reports).
fn ordinal(name: &str, text: &str) -> Result<u64, Response> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad_request(&format!(
            "{name} must be a non-negative integer"
        )));
    }
    Ok(text.parse().unwrap_or(u64::MAX))
}

/// Parses §6.6/§6.8 parameters: `None` for an ordinary read. Every rule
/// that does not need the stream is checked here.
pub fn parse(req: &Request) -> Result<Option<(RecordStart, RecordView)>, Response> {
    let record = req.query_once("record")?;
    let tail = req.query_once("tail_records")?;
    let max = req.query_once("max_records")?;
    let view = req.query_once("record_view")?;
    let start = match (record, tail) {
        (Some(_), Some(_)) => {
            return Err(bad_request("record and tail_records are exclusive"));
        }
        (Some("now"), None) => Some(RecordStart::Now),
        (Some(r), None) => Some(RecordStart::At(ordinal("record", r)?)),
        (None, Some("0")) => Some(RecordStart::Now),
        (None, Some(k)) => Some(RecordStart::Tail(ordinal("tail_records", k)?)),
        (None, None) => None,
    };
    let Some(start) = start else {
        if max.is_some() || view.is_some() {
            return Err(bad_request(
                "max_records and record_view need record or tail_records",
            ));
        }
        return Ok(None);
    };
    if req.head.has_query_param("offset") {
        return Err(bad_request("record parameters are exclusive with offset"));
    }
    if req.head.has_query_param("max_bytes") {
        return Err(bad_request(
            "max_bytes is not allowed on record-aware reads",
        ));
    }
    let max_records = match max {
        None => None,
        Some(m) => Some(
            ordinal("max_records", m)
                .ok()
                .filter(|&m| m > 0)
                .ok_or_else(|| bad_request("max_records must be a positive integer"))?,
        ),
    };
    let envelope = match view {
        None => false,
        Some("envelope") => true,
        Some(_) => return Err(bad_request("record_view must be envelope")),
    };
    Ok(Some((
        start,
        RecordView {
            max_records,
            envelope,
        },
    )))
}

/// Resolves a record start against what readers see: the byte offset of
/// the starting boundary (§6.6 410/400 rules).
pub fn resolve(stream: &Stream, start: RecordStart) -> Result<u64, Response> {
    if !active(stream) {
        return Err(bad_request(
            "record-aware reads need a stream with JSON record coordinates",
        ));
    }
    let (first, next) = (stream.first_record, stream.record_next());
    let ordinal = match start {
        RecordStart::Now => next,
        RecordStart::Tail(k) => first.max(next.saturating_sub(k)),
        RecordStart::At(r) if r < first => {
            return Err(bounds_headers(
                stream,
                Response::error(
                    410,
                    "record_gone",
                    "the record is before the first retained one",
                ),
            ));
        }
        RecordStart::At(r) if r > next => {
            return Err(advertise(
                stream,
                bad_request("the record is beyond the record tail")
                    .header("stream-record-next", next.to_string()),
            ));
        }
        RecordStart::At(r) => r,
    };
    Ok(stream
        .messages
        .offset_of(ordinal)
        .expect("retained ordinals have offsets"))
}

/// `?record=R` of snapshot publish and retention (§2.2): the boundary where
/// record `R` starts, with the same 410/400 rules as reads.
pub fn operation_offset(req: &Request, stream: &Stream) -> Result<u64, Response> {
    match req.query_once("record")? {
        Some(text) => resolve(stream, RecordStart::At(ordinal("record", text)?)),
        None => Err(bad_request(
            "an offset path segment or ?record= is required",
        )),
    }
}

/// §6.7 and §6.10 headers of a record-aware response that spans
/// `[start, end)` (both record boundaries).
pub fn read_headers(stream: &Stream, reply: Response, start: u64, end: u64) -> Response {
    let ordinal = |at: u64| stream.messages.ordinal_at(at).expect("a record boundary");
    advertise(stream, reply)
        .header("stream-record-first", stream.first_record.to_string())
        .header("stream-record-start", ordinal(start).to_string())
        .header("stream-record-next", ordinal(end).to_string())
}

/// §6.8: each canonical line as `{"record":r,"value":...}`, one per line.
pub fn envelope(first: u64, canonical: &[u8], out: &mut Vec<u8>) {
    let lines = canonical.split(|&b| b == b'\n').filter(|l| !l.is_empty());
    for (record, line) in (first..).zip(lines) {
        envelope_one(record, line, out);
        out.push(b'\n');
    }
}

/// One envelope object, without a line end.
pub fn envelope_one(record: u64, value: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"record\":");
    out.extend_from_slice(record.to_string().as_bytes());
    out.extend_from_slice(b",\"value\":");
    out.extend_from_slice(value);
    out.push(b'}');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn envelope_wraps_each_line() {
        let mut out = Vec::new();
        envelope(42, b"{\"a\":1}\n2\n", &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"record\":42,\"value\":{\"a\":1}}\n{\"record\":43,\"value\":2}\n"
        );
        assert_eq!(count(b"1\n2\n3\n"), 3);
    }
}
