//! Append and close (PROTOCOL.md §5.2, §5.2.1 idempotent producers, stream
//! closure). Checks run in a fixed order so that errors have one precedence:
//! header syntax, empty body / close-only, Content-Type presence, existence,
//! closure, content-type syntax and match, JSON validity, producer, record tail
//! (`Stream-Record-Match`, extensions §6.4), Stream-Seq. Replies on JSON
//! streams carry the record range the write created (§6.3).

use bytes::Bytes;

use super::headers::{producer, wants_close};
use super::producer::{ProducerDecision, decide as decide_producer};
use super::response::{Response, bad_request, conflict, not_found};
use super::{Action, Request, content_type, json, offset, records};
use crate::http::parse::RequestHead;
use crate::stream::budget::{PRODUCER_BYTES, ProducerLimits, append_index_bytes};
use crate::stream::{Command, ProducerWrite, Stream, Table};

pub fn decide(req: &Request, table: &Table) -> Action {
    match decide_inner(req, table) {
        Ok(action) => action,
        Err(reply) => Action::Reply(reply),
    }
}

fn decide_inner(req: &Request, table: &Table) -> Result<Action, Response> {
    let close = wants_close(req.head);
    if req.body.is_empty() {
        let producer = producer(req.head)?;
        if !close {
            return Err(bad_request("empty append body"));
        }
        let stream = table
            .get(req.key)
            .ok_or_else(|| not_found("stream not found"))?;
        return close_only(req, table, stream, producer);
    }
    let (stream, producer) = stream_taking_body(req.head, req.key, table)?;
    let data = canonical(stream, req.body, req.normalized.take())?;
    if let Some(p) = &producer {
        check_producer(table, stream, p)?;
    }
    records::check_match(req, stream)?;
    let messages = records::messages_in(stream.json, &data);
    let new_producer = producer
        .as_ref()
        .is_some_and(|p| !stream.producers.contains_key(&p.id));
    let producer_bytes = if new_producer { PRODUCER_BYTES } else { 0 };
    if table.index_refuses(append_index_bytes(messages) + producer_bytes) {
        return Err(super::response::index_full());
    }
    let stream_seq = check_stream_seq(req, stream)?;
    let tail = stream.head_tail() + data.len() as u64;
    let first = stream.messages.next();
    let reply = success(producer.as_ref(), tail, close);
    let reply = records::ack(stream, reply, first, first + messages);
    let command = Command::Append {
        key: req.key.to_string(),
        stream_id: stream.id,
        start: stream.head_tail(),
        data,
        producer,
        stream_seq,
        close,
        now_ms: req.now_ms,
    };
    Ok(Action::Commit {
        commands: vec![command],
        reply,
    })
}

/// The refusal an append of a non-empty body gets from its head alone (a
/// missing, closed or differently typed stream), so that a client that
/// sent `Expect: 100-continue` is answered before it sends the body (RFC
/// 9110 §10.1.1). The same checks, in the same order, as the shard and
/// `decide` make: a soft-deleted stream first (410, PROTOCOL.md §4.2).
pub fn refusal_before_body(head: &RequestHead, key: &str, table: &Table) -> Option<Response> {
    if let Some(gone) = super::fork::soft_deleted_refusal(table, key, false) {
        return Some(gone);
    }
    stream_taking_body(head, key, table).err()
}

/// The checks that precede the body's: header syntax, Content-Type
/// presence, existence, closure, content-type syntax and match.
fn stream_taking_body<'t>(
    head: &RequestHead,
    key: &str,
    table: &'t Table,
) -> Result<(&'t Stream, Option<ProducerWrite>), Response> {
    let producer = producer(head)?;
    let ct = head
        .header("content-type")
        .filter(|ct| !ct.trim().is_empty())
        .ok_or_else(|| bad_request("Content-Type is required on append"))?;
    let stream = table
        .get(key)
        .ok_or_else(|| not_found("stream not found"))?;
    // §5.2 error precedence: a closed stream says so first, so the client
    // gets `Stream-Closed: true` whatever else is wrong with the append.
    if stream.closed {
        return Err(closed_reply(stream, producer.as_ref()));
    }
    check_valid_content_type(ct)?;
    check_same_content_type(ct, stream)?;
    Ok((stream, producer))
}

/// Byte-stream bodies from this size on are stored shared with the
/// request, not copied. A smaller one is copied: sharing would add a
/// reference-count header to every cached chunk, and the copy is cheap.
pub const SHARED_FROM: usize = 16 << 10;

/// The bytes `body` is stored as: a byte stream keeps the body as sent (a
/// large one shared, not copied); JSON streams store normalized messages,
/// and an empty array is a 400 (§7.1). `normalized` is the body's
/// normalization when the shard made it ahead.
pub fn canonical(
    stream: &Stream,
    body: &Bytes,
    normalized: Option<json::Normalized>,
) -> Result<Bytes, Response> {
    if !stream.json {
        return Ok(match body.len() >= SHARED_FROM {
            true => body.clone(),
            false => Bytes::copy_from_slice(body),
        });
    }
    let invalid = |e: &json::JsonError| bad_request(&e.message());
    let (data, count) = json::normalized(body, normalized).map_err(|e| invalid(&e))?;
    if count == 0 {
        return Err(invalid(&json::JsonError::EmptyArray));
    }
    Ok(Bytes::from(data))
}

/// 200 with producer headers (new data from a producer), else 204.
fn success(producer: Option<&ProducerWrite>, tail: u64, closed: bool) -> Response {
    let status = if producer.is_some() { 200 } else { 204 };
    with_producer(Response::new(status), producer, None)
        .header("stream-next-offset", offset::format(tail))
        .header_if(closed, "stream-closed", "true")
}

/// §5.2: a malformed Content-Type on a write is 400 (409 is for a valid
/// type that differs).
pub(super) fn check_valid_content_type(ct: &str) -> Result<(), Response> {
    if content_type::is_valid(ct.trim()) {
        Ok(())
    } else {
        Err(bad_request("invalid Content-Type"))
    }
}

/// §5.2: "409 Conflict when the content type is valid but does not match
/// the stream's configured type" (append-batch too, extensions §4.1).
pub(super) fn check_same_content_type(ct: &str, stream: &Stream) -> Result<(), Response> {
    if content_type::same(ct, &stream.content_type) {
        Ok(())
    } else {
        Err(conflict(
            "content_type_mismatch",
            "Content-Type does not match the stream",
        ))
    }
}

fn with_producer(reply: Response, producer: Option<&ProducerWrite>, seq: Option<u64>) -> Response {
    match producer {
        Some(p) => reply
            .header("producer-epoch", p.epoch.to_string())
            .header("producer-seq", seq.unwrap_or(p.seq).to_string()),
        None => reply,
    }
}

/// A write to a closed stream: the retry of the write that closed it is a
/// duplicate (204) answering that write's own ranges (§6.3: "the original
/// Stream-Record-Start and Stream-Record-Next"); anything else is 409 with
/// `Stream-Closed: true`.
pub(super) fn closed_reply(stream: &Stream, producer: Option<&ProducerWrite>) -> Response {
    if let Some(p) = producer
        && stream.closed_by.as_deref() == Some(p)
    {
        let reply =
            with_producer(Response::new(204), Some(p), None).header("stream-closed", "true");
        return duplicate_ack(stream, p, reply);
    }
    let tail = offset::format(stream.head_tail());
    conflict("stream_closed", "stream is closed")
        .header("stream-closed", "true")
        .header("stream-next-offset", tail)
}

/// §6.3: a write that created no records answers the record tail twice.
fn no_records(stream: &Stream, reply: Response) -> Response {
    let tail = stream.messages.next();
    records::ack(stream, reply, tail, tail)
}

/// Maps the producer decision table (§5.2.1) to its error responses, after
/// the bounds on producer state (`ProducerLimits`).
fn check_producer(table: &Table, stream: &Stream, p: &ProducerWrite) -> Result<(), Response> {
    let state = stream.producers.get(&p.id);
    // Known producers go on (a limit lowered since must not refuse their
    // retries); the bounds apply to the state a new one would add.
    if state.is_none() {
        check_new_producer(table.producer_limits(), stream, p)?;
    }
    match decide_producer(state, p.epoch, p.seq) {
        ProducerDecision::Accept => Ok(()),
        ProducerDecision::Duplicate { last_seq } => {
            let reply = with_producer(Response::new(204), Some(p), Some(last_seq));
            Err(duplicate_ack(stream, p, reply))
        }
        ProducerDecision::StaleEpoch { current } => Err(Response::error(
            403,
            "stale_producer_epoch",
            "producer epoch is older than the current epoch",
        )
        .header("producer-epoch", current.to_string())),
        ProducerDecision::NewEpochNeedsSeqZero => Err(bad_request(
            "a new producer epoch must start at Producer-Seq 0",
        )),
        ProducerDecision::Gap { expected, received } => {
            Err(conflict("producer_sequence_gap", "producer sequence gap")
                .header("producer-expected-seq", expected.to_string())
                .header("producer-received-seq", received.to_string()))
        }
    }
}

/// 431 for an id past `--max-producer-id-bytes`, 429 for one producer more
/// than `--max-producers-per-stream`.
fn check_new_producer(
    limits: ProducerLimits,
    stream: &Stream,
    p: &ProducerWrite,
) -> Result<(), Response> {
    if p.id.len() > limits.max_id_bytes {
        return Err(Response::error(
            431,
            "producer_id_too_long",
            &format!("Producer-Id is longer than {} bytes", limits.max_id_bytes),
        ));
    }
    if stream.producers.len() >= limits.max_per_stream {
        return Err(Response::error(
            429,
            "too_many_producers",
            &format!(
                "the stream already remembers {} producers (the limit)",
                limits.max_per_stream
            ),
        ));
    }
    Ok(())
}

/// A deduplicated retry answers the original append's ranges while the
/// producer's recent writes still hold it (PROTOCOL.md §5.2.1 as the
/// extensions' base words it: "the exact original byte and record
/// ranges"): `Stream-Next-Offset` where the original ended, and (§6.3) its
/// record range, also after retention passed it. Beyond that window "return
/// no byte or record ranges": no record range, and `Stream-Next-Offset` is
/// the current tail, as on any successful write (the base protocol's 204
/// carries it). After a restart, a write that retention passed wholly (its
/// ordinals no longer known) gets its own `Stream-Next-Offset` and no
/// record range.
fn duplicate_ack(stream: &Stream, p: &ProducerWrite, reply: Response) -> Response {
    let original = stream
        .producers
        .get(&p.id)
        .filter(|s| s.epoch == p.epoch)
        .and_then(|s| s.recent.range_of(p.seq));
    let next_offset = original.map_or(stream.head_tail(), |w| w.end);
    let reply = reply.header("stream-next-offset", offset::format(next_offset));
    match original.and_then(|w| w.ordinals()) {
        Some((start, next)) => records::ack(stream, reply, start, next),
        None => records::advertise(stream, reply),
    }
}

/// `Stream-Seq` is scoped per stream and compared byte-wise: it must strictly
/// increase (§5.2).
fn check_stream_seq(req: &Request, stream: &Stream) -> Result<Option<String>, Response> {
    let Some(seq) = req.head.header("stream-seq") else {
        return Ok(None);
    };
    if stream
        .stream_seq
        .as_deref()
        .is_some_and(|last| seq.as_bytes() <= last.as_bytes())
    {
        return Err(conflict(
            "stream_seq_regression",
            "Stream-Seq must strictly increase",
        ));
    }
    Ok(Some(seq.to_string()))
}

/// POST `Stream-Closed: true` with an empty body: close, idempotently.
fn close_only(
    req: &Request,
    table: &Table,
    stream: &Stream,
    producer: Option<ProducerWrite>,
) -> Result<Action, Response> {
    let tail = offset::format(stream.head_tail());
    if stream.closed {
        if producer.is_some() {
            return Err(closed_reply(stream, producer.as_ref()));
        }
        // §6.4 holds for a repeated close too: only the tail it names.
        records::check_match(req, stream)?;
        let reply = Response::new(204)
            .header("stream-next-offset", tail)
            .header("stream-closed", "true");
        return Ok(Action::Reply(no_records(stream, reply)));
    }
    if let Some(p) = &producer {
        check_producer(table, stream, p)?;
    }
    // §6.4: the writer's expected record tail holds for a close too; so
    // does §5.2's Stream-Seq order (a regression is 409 and the stream
    // stays open). A close appends nothing, so it records no sequence.
    records::check_match(req, stream)?;
    check_stream_seq(req, stream)?;
    let reply = with_producer(Response::new(204), producer.as_ref(), None)
        .header("stream-next-offset", tail)
        .header("stream-closed", "true");
    let reply = no_records(stream, reply);
    let command = Command::Close {
        key: req.key.to_string(),
        stream_id: stream.id,
        producer,
        now_ms: req.now_ms,
    };
    Ok(Action::Commit {
        commands: vec![command],
        reply,
    })
}
