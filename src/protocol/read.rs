//! Reads (PROTOCOL.md §5.4 HEAD, §5.5 catch-up, §5.6 long-poll, §6 offsets,
//! §8 caching): parameter validation, range selection on message boundaries,
//! rendering per surface dialect, ETag / If-None-Match, cursors; and the
//! record-aware reads of extensions §6.6-§6.9 (parameters in `records`).

use super::records::{self, RecordView};
use super::response::{Response, bad_request, not_found};
use super::window::{self, Cut};
use super::{Action, Request, Surface, cursor, json, offset, sse};
use crate::protocol::offset::OffsetParam;
use crate::stream::{Stream, Table};

/// Largest window a read fetches at once: the body of a bounded catch-up
/// (`max_bytes`, record views) or long-poll, whose clients page with
/// `Stream-Next-Offset` (PROTOCOL.md §5.5 "server-defined maximum chunk
/// size"), and each piece of a whole one (`super::whole`).
pub const MAX_READ_BYTES: u64 = 4 << 20;
/// PROTOCOL.md §10.1's recommended freshness for catch-up data: fresh for
/// `FRESH_SECS`, then served stale while revalidating for `STALE_SECS`.
const FRESH_SECS: u64 = 60;
const STALE_SECS: u64 = 300;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LiveMode {
    CatchUp,
    LongPoll,
    Sse,
}

/// A validated read that may have to wait (long-poll) or stream (SSE).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReadPlan {
    pub key: String,
    /// The incarnation of `key` planned against: a read waiting on it ends
    /// with it, and never goes on into a stream created at the same key
    /// after it expired or was deleted (PROTOCOL.md §4: offsets are a
    /// stream's own).
    pub stream_id: u64,
    pub surface: Surface,
    pub mode: LiveMode,
    /// Byte position to read from (`now` and `-1` already resolved).
    pub start: u64,
    pub cursor: Option<String>,
    /// `max_bytes` (bucketed surface): a smaller window than the default.
    pub max_bytes: Option<u64>,
    /// A record-aware read (extensions §6.6): whole records, record headers.
    pub records: Option<RecordView>,
    /// The offset asked for lies past the tail (`start` is the tail): a
    /// long-poll answers at once rather than wait there and then serve
    /// bytes before the offset asked for (§5.6 "bytes starting from").
    pub past_tail: bool,
    /// The start asked for moves with the tail (`offset=now`, `record=now`,
    /// `tail_records=K`): an answer is then no fixed range of the stream
    /// for that URL, so it is not cached (§10.1).
    pub from_now: bool,
}

impl ReadPlan {
    /// PROTOCOL.md §8.1: "Servers MUST generate ETag headers for GET
    /// responses, except for offset=now responses." A `tail_records` or
    /// `record=now` answer has one too: it revalidates (304) only while the
    /// tail, and so its range, is unchanged.
    fn has_etag(&self) -> bool {
        !(self.from_now && self.records.is_none())
    }
}

pub fn decide(req: &Request, table: &Table) -> Action {
    match decide_inner(req, table) {
        Ok(action) => action,
        Err(reply) => Action::Reply(reply),
    }
}

fn decide_inner(req: &Request, table: &Table) -> Result<Action, Response> {
    let record_start = records::parse(req)?;
    let (param, mode) = parse_params(req, record_start.is_some())?;
    check_consistency(req, mode)?;
    let stream = table
        .get_visible(req.key)
        .ok_or_else(|| not_found("stream not found"))?;
    let past_tail = matches!(param, OffsetParam::At(pos) if pos > stream.tail());
    let start = match (record_start, param) {
        (Some((at, _)), _) => records::resolve(stream, at)?,
        (None, OffsetParam::Start) => from_the_beginning(stream)?,
        (None, OffsetParam::Now) => stream.tail(),
        (None, OffsetParam::At(pos)) => validate_position(stream, req.surface, pos)?,
    };
    let plan = ReadPlan {
        key: req.key.to_string(),
        stream_id: stream.id,
        surface: req.surface,
        mode,
        start,
        cursor: req.head.query_param("cursor").map(str::to_string),
        max_bytes: max_bytes(req)?,
        records: record_start.map(|(_, view)| view),
        past_tail: past_tail && record_start.is_none(),
        from_now: match record_start {
            None => param == OffsetParam::Now,
            Some((at, _)) => !matches!(at, records::RecordStart::At(_)),
        },
    };
    match mode {
        LiveMode::CatchUp if param == OffsetParam::Now && plan.records.is_none() => {
            Ok(Action::Reply(now_reply(stream, req.surface)))
        }
        _ => Ok(Action::Read(plan)),
    }
}

/// `offset`: at most once, never empty, `-1`, `now` or a token; `live`: at
/// most once, `long-poll` or `sse`, which require an offset or a record
/// start (§5.6 and §5.7: invalid parameters are 400).
fn parse_params(req: &Request, record_start: bool) -> Result<(OffsetParam, LiveMode), Response> {
    let param = match req.query_once("offset")? {
        None => None,
        Some(one) => Some(offset::parse_param(one).ok_or_else(|| bad_request("malformed offset"))?),
    };
    let mode = match req.query_once("live")? {
        None => LiveMode::CatchUp,
        Some("long-poll") => LiveMode::LongPoll,
        Some("sse") => LiveMode::Sse,
        Some(_) => return Err(bad_request("live must be long-poll or sse")),
    };
    if mode != LiveMode::CatchUp && param.is_none() && !record_start {
        return Err(bad_request("live reads require an offset"));
    }
    Ok((param.unwrap_or(OffsetParam::Start), mode))
}

/// `consistency` on the bucketed surface (the extensions' base, §5.6):
/// `local` (the default) or `leader`, once; `leader` is for catch-up reads
/// only. One node serves both alike: its applied state is the leader's.
/// The v1 surface ignores it like any unknown parameter.
fn check_consistency(req: &Request, mode: LiveMode) -> Result<(), Response> {
    if req.surface != Surface::Bucket {
        return Ok(());
    }
    let Some(value) = req.query_once("consistency")? else {
        return Ok(());
    };
    match (value, mode) {
        ("local", _) | ("leader", LiveMode::CatchUp) => Ok(()),
        ("leader", _) => Err(bad_request(
            "consistency=leader cannot be combined with a live read",
        )),
        _ => Err(bad_request("consistency must be local or leader")),
    }
}

/// `max_bytes` on the bucketed surface (the extensions' base, §7.1): one
/// positive integer. The v1 surface ignores it like any unknown parameter.
fn max_bytes(req: &Request) -> Result<Option<u64>, Response> {
    if req.surface != Surface::Bucket {
        return Ok(None);
    }
    let positive = || bad_request("max_bytes must be a positive integer");
    match req.query_once("max_bytes")? {
        None => Ok(None),
        Some(one) if !one.starts_with('0') => one.parse::<u64>().map(Some).map_err(|_| positive()),
        Some(_) => Err(positive()),
    }
}

/// `-1` (or no offset): the beginning of the stream, which retention
/// makes one of the "offsets less than retained_offset" that extensions
/// §2.2 answers 410 (so a client reading from the start learns to
/// bootstrap, §3.4, instead of silently missing the trimmed prefix).
fn from_the_beginning(stream: &Stream) -> Result<u64, Response> {
    match stream.retained {
        0 => Ok(0),
        _ => Err(gone(stream)),
    }
}

/// 410 for a position before the retained one; `Stream-Next-Offset` says
/// where the retained data starts.
fn gone(stream: &Stream) -> Response {
    gone_before(stream.retained)
}

/// 410 for a position before `retained` (also when retention passed a read
/// while it was served).
pub fn gone_before(retained: u64) -> Response {
    Response::error(
        410,
        "offset_gone",
        "the offset is before the earliest retained offset; use /bootstrap",
    )
    .header("stream-next-offset", offset::format(retained))
}

/// A token past the tail reads as the tail: "for non-live reads without
/// data beyond the requested offset, servers SHOULD return 200 OK with an
/// empty body" (PROTOCOL.md §5.5), and the tail is the one position such a
/// client can resume from (a token of a deleted incarnation, say, or one
/// a crash under `--fsync interval` took back). A long-poll answers 204 at
/// once with the tail as `Stream-Next-Offset`; SSE's first control event
/// names the tail before any data. Before it: 410 once retention passed it. On v1 JSON
/// streams a token must also lie on a message boundary (they render whole
/// messages); bucketed reads may end, and so resume, inside a record.
fn validate_position(stream: &Stream, surface: Surface, pos: u64) -> Result<u64, Response> {
    let pos = pos.min(stream.tail());
    if pos < stream.retained {
        return Err(gone(stream));
    }
    if stream.json && surface == Surface::V1 && !stream.is_boundary(pos) {
        return Err(bad_request("offset is not on a message boundary"));
    }
    Ok(pos)
}

/// The content type of a read body on this surface (record-aware reads:
/// NDJSON or the envelope view, extensions §6.7, §6.8).
pub fn body_content_type(stream: &Stream, plan: &ReadPlan) -> String {
    if let Some(view) = plan.records {
        let ct = match view.envelope {
            true => records::ENVELOPE_NDJSON,
            false => "application/x-ndjson",
        };
        return ct.to_string();
    }
    surface_content_type(stream, plan.surface)
}

/// The content type of an ordinary read body on `surface`.
fn surface_content_type(stream: &Stream, surface: Surface) -> String {
    if stream.json && surface == Surface::Bucket {
        "application/x-ndjson".to_string()
    } else {
        stream.content_type.clone()
    }
}

/// The bytes of `[start, end)` as the plan's view renders them.
fn plan_body(stream: &Stream, plan: &ReadPlan, start: u64, fetched: &[u8]) -> Vec<u8> {
    match plan.records {
        Some(view) if view.envelope => {
            let first = stream
                .messages
                .ordinal_at(start)
                .expect("a record boundary");
            let mut out = Vec::with_capacity(fetched.len() * 2);
            records::envelope(first, fetched, &mut out);
            out
        }
        // One test of stored bytes for this and the cached long-poll body
        // that sends them uncopied (`shard::live`).
        _ if sends_stored_bytes(stream, plan) => fetched.to_vec(),
        _ => render_body(stream, plan.surface, fetched),
    }
}

/// `fetched` (the bytes of `[start, end)`) in the surface's dialect.
pub fn render_body(stream: &Stream, surface: Surface, fetched: &[u8]) -> Vec<u8> {
    if stream.json && surface == Surface::V1 {
        let mut out = Vec::with_capacity(fetched.len() + 2);
        json::render_array(fetched, &mut out);
        out
    } else {
        fetched.to_vec()
    }
}

/// The entity tag of the stream as HEAD describes it: what is retained,
/// to the tail, and whether it is closed (the tag write preconditions
/// compare, `conditions`).
pub fn stream_etag(stream: &Stream) -> String {
    etag(stream, stream.retained, stream.tail(), stream.is_closed())
}

fn etag(stream: &Stream, start: u64, end: u64, closed_at_end: bool) -> String {
    let suffix = if closed_at_end { ":c" } else { "" };
    format!("\"{}:{}:{}{}\"", stream.id, start, end, suffix)
}

/// A record view renders other bytes than the canonical read of the same
/// range, so its ETag differs (extensions §6.8). Its headers also carry the
/// first retained record, which retention moves without touching the bytes
/// (§6.10): the tag names it, so a revalidation after retention is a 200
/// with the new `Stream-Record-First`, not a 304 keeping the old one.
fn view_etag(stream: &Stream, plan: &ReadPlan, end: u64, closed_at_end: bool) -> String {
    let tag = etag(stream, plan.start, end, closed_at_end);
    let kind = match plan.records {
        Some(view) if view.envelope => "e",
        Some(_) => "r",
        None => return tag,
    };
    tag.replacen('"', &format!("\"{kind}{}:", stream.first_record), 1)
}

/// Record headers on a record-aware reply spanning `[start, end)`, else
/// just the capability token on a JSON stream.
fn with_record_headers(
    stream: &Stream,
    plan: &ReadPlan,
    reply: Response,
    start: u64,
    end: u64,
) -> Response {
    match plan.records {
        Some(_) => records::read_headers(stream, reply, start, end),
        None => records::advertise(stream, reply),
    }
}

/// The bytes a read must fetch before it can be answered: `[start, end)`
/// with the window's cut; empty when the plan is at the tail.
pub fn fetch_span(stream: &Stream, plan: &ReadPlan) -> (u64, u64, Cut) {
    if plan.start >= stream.tail() {
        return (plan.start, plan.start, Cut::At(plan.start));
    }
    let budget = plan.max_bytes.unwrap_or(MAX_READ_BYTES).min(MAX_READ_BYTES);
    let cut = match plan.records {
        Some(view) => window::plan_records(stream, plan.start, budget, view.max_records),
        None => window::plan(stream, plan.surface, plan.start, budget),
    };
    (plan.start, window::fetch_end(cut, stream.tail()), cut)
}

/// A 200 carrying the fetched window with the headers every read shares.
/// `fetched` holds at least the bytes of the window (from `fetch_span`).
fn data_reply(stream: &Stream, plan: &ReadPlan, cut: Cut, fetched: &[u8]) -> Response {
    let (end, body) = window_body(stream, plan, cut, fetched);
    data_head(stream, plan, end).with_body(body)
}

/// Where the fetched window ends once `cut` is resolved, and its bytes
/// rendered for the plan's surface and view.
fn window_body(stream: &Stream, plan: &ReadPlan, cut: Cut, fetched: &[u8]) -> (u64, Vec<u8>) {
    let start = plan.start;
    let end = window::resolve(cut, start, fetched).min(start + fetched.len() as u64);
    let body = plan_body(stream, plan, start, &fetched[..(end - start) as usize]);
    (end, body)
}

/// The head of a 200 answering `[plan.start, end)`, with its ETag.
pub(super) fn data_head(stream: &Stream, plan: &ReadPlan, end: u64) -> Response {
    let at_tail = end == stream.tail();
    let closed_here = at_tail && stream.is_closed();
    let tag = view_etag(stream, plan, end, closed_here);
    let reply = Response::new(200)
        .header("content-type", body_content_type(stream, plan))
        .header("stream-next-offset", offset::format(end))
        .header_if(at_tail, "stream-up-to-date", "true")
        .header_if(closed_here, "stream-closed", "true")
        .header_if(plan.has_etag(), "etag", &tag);
    with_record_headers(stream, plan, reply, plan.start, end)
}

/// 410 when retention moved past a record-aware read's start while its
/// bytes were being fetched (its ordinal is no longer retained).
fn overtaken(stream: &Stream, plan: &ReadPlan) -> Option<Response> {
    let gone = plan.records.is_some() && !stream.messages.is_boundary(plan.start);
    gone.then(|| {
        let reply = Response::error(410, "record_gone", "retention passed the read's start");
        records::bounds_headers(stream, reply)
    })
}

/// A catch-up read's answer (§5.5, §8.1 ETag / If-None-Match).
pub fn catch_up(
    if_none_match: Option<&str>,
    stream: &Stream,
    plan: &ReadPlan,
    cut: Cut,
    fetched: &[u8],
    now_ms: u64,
) -> Response {
    if let Some(gone) = overtaken(stream, plan) {
        return gone;
    }
    let reply = data_reply(stream, plan, cut, fetched);
    // §10.1 (the extensions' base): "Catch-up chunks remain fully
    // cacheable, including chunks at the tail"; only the empty answer at
    // the tail, which new data would change, must not be cached (a closed
    // stream's end of stream never changes: it is cacheable too).
    let at_tail_empty = fetched.is_empty()
        && reply.get_header("stream-up-to-date").is_some()
        && !stream.is_closed();
    let cache = match at_tail_empty {
        true => "no-store".to_string(),
        false => data_cache_control(stream, plan, now_ms),
    };
    validated(if_none_match, reply, cache)
}

/// The 304 that `If-None-Match` asks for instead of the 200 `head` (its
/// ETag, Cache-Control, cursor and extension token: RFC 9110 §15.4.5, a
/// 304 carries the 200's Cache-Control too), when it names the head's ETag.
pub fn not_modified(if_none_match: Option<&str>, head: &Response) -> Option<Response> {
    let tag = head.get_header("etag")?;
    if !if_none_match.is_some_and(|header| etag_matches(header, tag)) {
        return None;
    }
    let mut reply = Response::new(304);
    for name in [
        "etag",
        "cache-control",
        "stream-cursor",
        "stream-extensions",
    ] {
        if let Some(value) = head.get_header(name) {
            reply = reply.header(name, value.to_string());
        }
    }
    Some(reply)
}

/// `reply` (a `data_head`) with its Cache-Control, or the 304 that
/// `If-None-Match` naming its ETag asks for instead.
pub(super) fn validated(if_none_match: Option<&str>, reply: Response, cache: String) -> Response {
    let reply = reply.header("cache-control", cache);
    not_modified(if_none_match, &reply).unwrap_or(reply)
}

/// Whether an `If-None-Match` value matches `tag` (RFC 9110 §13.1.2): `*`,
/// or any entity tag of the list by weak comparison (`W/` ignored).
fn etag_matches(header: &str, tag: &str) -> bool {
    fn opaque(tag: &str) -> &str {
        tag.trim().trim_start_matches("W/")
    }
    header.trim() == "*" || header.split(',').any(|t| opaque(t) == opaque(tag))
}

/// The answer to a read whose stream is not (or no longer) visible: 410
/// once it is soft-deleted (PROTOCOL.md §4.2: "410 Gone for all
/// client-facing operations"), else 404.
pub fn vanished(table: &Table, key: &str) -> Response {
    super::fork::soft_deleted_refusal(table, key, false)
        .unwrap_or_else(|| not_found("stream not found"))
}

/// Cache-Control of a 200 with data for `plan`: none when its start moves
/// with the tail (`ReadPlan::from_now`).
pub(super) fn data_cache_control(stream: &Stream, plan: &ReadPlan, now_ms: u64) -> String {
    match plan.from_now {
        true => "no-store".to_string(),
        false => cache_control(stream, now_ms),
    }
}

/// PROTOCOL.md §10.1, bounded by the stream's remaining lifetime: a shared
/// cache may neither keep it fresh nor serve it stale past its expiry.
pub(super) fn cache_control(stream: &Stream, now_ms: u64) -> String {
    let remaining = stream
        .expires_at_ms
        .map(|at| at.saturating_sub(now_ms) / 1000)
        .into_iter()
        .chain(stream.ttl_secs)
        .min();
    freshness(remaining.unwrap_or(u64::MAX))
}

/// `Cache-Control` for data that stays valid `lifetime` more seconds.
fn freshness(lifetime: u64) -> String {
    let fresh = lifetime.min(FRESH_SECS);
    match lifetime.saturating_sub(fresh).min(STALE_SECS) {
        0 => format!("public, max-age={fresh}"),
        stale => format!("public, max-age={fresh}, stale-while-revalidate={stale}"),
    }
}

/// `offset=now` without `live`: no data, the tail, up to date (§6).
fn now_reply(stream: &Stream, surface: Surface) -> Response {
    let body = if stream.json && surface == Surface::V1 {
        b"[]".to_vec()
    } else {
        Vec::new()
    };
    let reply = Response::new(200)
        .header("content-type", surface_content_type(stream, surface))
        .header("stream-next-offset", offset::format(stream.tail()))
        .header("stream-up-to-date", "true")
        .header("cache-control", "no-store")
        .header_if(stream.is_closed(), "stream-closed", "true")
        .with_body(body);
    records::advertise(stream, reply)
}

/// A long-poll with nothing to read yet: 204 when the stream is closed at
/// the tail or the wait timed out; `None` means keep waiting.
pub fn poll_empty(
    plan: &ReadPlan,
    stream: &Stream,
    now_ms: u64,
    timed_out: bool,
) -> Option<Response> {
    debug_assert!(plan.start >= stream.tail());
    debug_assert!(!stream.past_expires_at(now_ms), "`Table::get_waited_on`");
    if !stream.is_closed() && !timed_out {
        return None;
    }
    let cursor = cursor::next_cursor(plan.cursor.as_deref(), now_ms);
    let reply = Response::new(204)
        .header("stream-next-offset", offset::format(stream.tail()))
        .header("stream-up-to-date", "true")
        .header("stream-cursor", cursor)
        .header("cache-control", "no-store")
        .header_if(stream.is_closed(), "stream-closed", "true");
    let tail = stream.tail();
    Some(with_record_headers(stream, plan, reply, tail, tail))
}

/// The body of a long-poll answer with data and where its window ends:
/// the same for every waiter at `plan.start` with the same view, so the
/// shard renders it once for all of them (`shard::audience`).
pub fn poll_body(
    plan: &ReadPlan,
    stream: &Stream,
    cut: Cut,
    fetched: &[u8],
) -> Result<(u64, Vec<u8>), Response> {
    poll_check(plan, stream)?;
    Ok(window_body(stream, plan, cut, fetched))
}

/// What `poll_body` checks before it renders: the 410 once retention
/// passed a record-aware read's start.
pub fn poll_check(plan: &ReadPlan, stream: &Stream) -> Result<(), Response> {
    overtaken(stream, plan).map_or(Ok(()), Err)
}

/// Whether `plan`'s body is the stored bytes as they are (no JSON array,
/// no record envelope), so cached chunks can be sent uncopied.
pub fn sends_stored_bytes(stream: &Stream, plan: &ReadPlan) -> bool {
    match plan.records {
        Some(view) => !view.envelope,
        None => !(stream.json && plan.surface == Surface::V1),
    }
}

/// The head of a long-poll answer whose body ends at `end` (§5.6: its own
/// cursor), or the 410 when retention passed a record-aware read's start.
pub fn poll_head(
    plan: &ReadPlan,
    stream: &Stream,
    end: u64,
    now_ms: u64,
) -> Result<Response, Response> {
    if let Some(gone) = overtaken(stream, plan) {
        return Err(gone);
    }
    let cursor = cursor::next_cursor(plan.cursor.as_deref(), now_ms);
    let reply = data_head(stream, plan, end);
    Ok(reply
        .header("stream-cursor", cursor)
        .header("cache-control", data_cache_control(stream, plan, now_ms)))
}

/// HEAD: metadata, never cached. `Stream-TTL` is, upstream (PROTOCOL.md
/// §5.5), "the stream's time-to-live window" (what a create compares); in
/// the extensions' base (§5.4) the "remaining time-to-live" of the window
/// (a HEAD does not slide it).
pub fn head(req: &Request, table: &Table) -> Response {
    let Some(stream) = table.get_visible(req.key) else {
        return not_found("stream not found");
    };
    let tail = stream.tail();
    let mut reply = Response::new(200)
        .header("content-type", stream.content_type.clone())
        .header("stream-next-offset", offset::format(tail))
        .header("cache-control", "no-store")
        .header("etag", stream_etag(stream))
        .header_if(stream.is_closed(), "stream-closed", "true");
    let ttl = match req.surface {
        Surface::V1 => stream.ttl_secs,
        Surface::Bucket => stream.ttl_remaining_secs(req.now_ms),
    };
    if let Some(ttl) = ttl {
        reply = reply.header("stream-ttl", ttl.to_string());
    }
    if let Some(at) = &stream.expires_at {
        reply = reply.header("stream-expires-at", at.clone());
    }
    let reply = records::bounds_headers(stream, reply);
    let reply = super::snapshot::head_headers(stream, reply);
    // RFC 9110 §13.1.2: a HEAD naming its current ETag gets 304, as a GET.
    not_modified(req.head.list_header("if-none-match").as_deref(), &reply).unwrap_or(reply)
}

/// Response head of an SSE read (§5.7).
pub fn sse_head(stream: &Stream, plan: &ReadPlan) -> Response {
    records::advertise(stream, sse::head(stream, plan))
}
