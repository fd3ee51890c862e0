//! Append batch (extensions §4): `POST /{bucket}/{stream}/append-batch`
//! carries uint32-big-endian length-prefixed frames, each an independent
//! append with its own acknowledgement, answered as a JSON array in frame
//! order. Request-level problems (framing, a missing or malformed
//! Content-Type, unsupported per-append headers, size) fail the whole
//! request with 400 or 413; a valid Content-Type that differs from the
//! stream's is the whole request's 409, as on a plain append (§5.2).

use bytes::Bytes;
use serde_json::Value;

use super::append::{canonical, check_same_content_type, check_valid_content_type, closed_reply};
use super::json::Normalized;
use super::records::messages_in;
use super::response::{Response, bad_request, not_found};
use super::{Request, headers, offset};
use crate::http::parse::Method;
use crate::stream::budget::append_index_bytes;
use crate::stream::{Command, Table};

/// extensions §4.1: "at most 512 frames per public append-batch request
/// and a 32 MiB total body".
pub const MAX_FRAMES: usize = 512;
pub const MAX_BODY_BYTES: usize = 32 << 20;

/// Headers that need per-frame meaning (§4.2): rejected on a batch.
/// `Stream-Closed` counts only when it says `true`: the base treats any
/// other value as absent (PROTOCOL.md §5.2).
const UNSUPPORTED: [&str; 5] = [
    "producer-id",
    "producer-epoch",
    "producer-seq",
    "stream-record-match",
    "stream-seq",
];

/// One frame's outcome.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ack {
    Appended {
        next: u64,
        /// The record range the frame created (JSON streams, §6.11).
        records: Option<(u64, u64)>,
    },
    Failed {
        status: u16,
        code: &'static str,
        message: String,
        next: Option<u64>,
        closed: bool,
    },
}

/// Request-level checks; `Ok` holds the frames.
pub fn check<'a>(req: &Request<'a>, table: &Table) -> Result<Vec<&'a [u8]>, Response> {
    if req.head.method != Method::Post {
        return Err(
            Response::error(405, "method_not_allowed", "append-batch takes POST")
                .header("allow", "POST, OPTIONS"),
        );
    }
    let closing = headers::wants_close(req.head).then_some(&"stream-closed");
    let unsupported = UNSUPPORTED.iter().find(|h| req.head.header(h).is_some());
    if let Some(header) = closing.or(unsupported) {
        return Err(bad_request(&format!(
            "{header} is not supported on append-batch; use a plain append"
        )));
    }
    let ct = req
        .head
        .header("content-type")
        .filter(|ct| !ct.trim().is_empty())
        .ok_or_else(|| bad_request("Content-Type is required on append-batch"))?;
    if req.body.len() > MAX_BODY_BYTES {
        return Err(Response::error(
            413,
            "batch_too_large",
            "append-batch bodies are at most 32 MiB",
        ));
    }
    let stream = table
        .get(req.key)
        .ok_or_else(|| not_found("stream not found"))?;
    if stream.soft_deleted {
        // PROTOCOL.md §4.2: a deleted source that forks still read is 410.
        return Err(super::fork::soft_deleted_reply(false));
    }
    // PROTOCOL.md §5.2: a closed stream's 409 outranks a content-type
    // problem, as on a plain append (with a good type, each frame answers
    // its own closed 409).
    let typed = check_valid_content_type(ct).and_then(|()| check_same_content_type(ct, stream));
    typed.map_err(|problem| match stream.closed {
        true => closed_reply(stream, None),
        false => problem,
    })?;
    let frames = frames(req.body)?;
    // A message a frame at least (a JSON frame of several records adds
    // more once decided).
    let adding = append_index_bytes(1).saturating_mul(frames.len() as u64);
    if table.index_refuses(adding) {
        return Err(super::response::index_full());
    }
    Ok(frames)
}

/// Splits the body into frames.
pub fn frames(mut body: &[u8]) -> Result<Vec<&[u8]>, Response> {
    let mut frames = Vec::new();
    while !body.is_empty() {
        let Some((len, rest)) = body.split_first_chunk::<4>() else {
            return Err(bad_request("truncated frame length"));
        };
        let len = u32::from_be_bytes(*len) as usize;
        if len == 0 {
            return Err(bad_request("zero-length frames are invalid"));
        }
        if len > rest.len() {
            return Err(bad_request("frame runs past the end of the body"));
        }
        if frames.len() == MAX_FRAMES {
            return Err(Response::error(
                413,
                "too_many_frames",
                "append-batch carries at most 512 frames",
            ));
        }
        frames.push(&rest[..len]);
        body = &rest[len..];
    }
    if frames.is_empty() {
        return Err(bad_request("append-batch needs at least one frame"));
    }
    Ok(frames)
}

/// The human-readable message of an error reply (§4.3 `error`), not its
/// whole JSON body.
fn error_message(reply: &Response) -> String {
    let body: Option<serde_json::Value> = serde_json::from_slice(&reply.body).ok();
    let message = body.as_ref().and_then(|b| b["error"]["message"].as_str());
    match message {
        Some(message) => message.to_string(),
        None => String::from_utf8_lossy(&reply.body).into_owned(),
    }
}

/// One frame against the head state: the append to commit, or its failure.
/// A frame whose messages the index budget has no room for fails alone
/// (503, as a plain append would), after the request-level estimate of one
/// message a frame: a JSON frame may hold many records.
///
/// `incarnation` is the stream the request was checked against: a frame
/// after the stream was deleted (or deleted and created again) is a 404.
pub fn decide_frame(
    key: &str,
    incarnation: Option<u64>,
    table: &Table,
    (frame, normalized): (&Bytes, Option<Normalized>),
    now_ms: u64,
) -> Result<Command, Ack> {
    let same = table.get(key).filter(|s| Some(s.id) == incarnation);
    let Some(stream) = same.filter(|s| !s.soft_deleted) else {
        let (status, code) = match same {
            Some(_) => (410, "stream_deleted"),
            None => (404, "not_found"),
        };
        return Err(Ack::Failed {
            status,
            code,
            message: "the stream was deleted while the batch was applied".to_string(),
            next: None,
            closed: false,
        });
    };
    if stream.closed {
        let message = "stream is closed".to_string();
        let next = Some(stream.head_tail());
        return Err(Ack::Failed {
            status: 409,
            code: "stream_closed",
            message,
            next,
            closed: true,
        });
    }
    let data = canonical(stream, frame, normalized).map_err(|reply| Ack::Failed {
        status: reply.status,
        code: "invalid_json",
        message: error_message(&reply),
        // §4.3: present "when an error can report the stream tail".
        next: Some(stream.head_tail()),
        closed: false,
    })?;
    if table.index_refuses(append_index_bytes(messages_in(stream.json, &data))) {
        let full = super::response::index_full();
        return Err(Ack::Failed {
            status: full.status,
            code: "index_budget_full",
            message: error_message(&full),
            next: Some(stream.head_tail()),
            closed: false,
        });
    }
    Ok(Command::Append {
        key: key.to_string(),
        stream_id: stream.id,
        start: stream.head_tail(),
        data,
        producer: None,
        stream_seq: None,
        close: false,
        now_ms,
    })
}

/// The 200 answer: one acknowledgement per frame, in frame order.
pub fn render(acks: &[Ack]) -> Response {
    // Written directly: a 512-frame answer is on the hot path, and a JSON
    // tree per frame would cost more than the frames' appends.
    let mut out = String::with_capacity(acks.len() * 96 + 2);
    out.push('[');
    for (i, ack) in acks.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        render_ack(ack, &mut out);
    }
    out.push(']');
    Response::new(200)
        .header("content-type", "application/json")
        .header("cache-control", "no-store")
        .with_body(out.into_bytes())
}

fn render_ack(ack: &Ack, out: &mut String) {
    use std::fmt::Write as _;
    match ack {
        Ack::Appended { next, records } => {
            let _ = write!(
                out,
                "{{\"status\":204,\"stream_next_offset\":\"{}\"",
                offset::format(*next)
            );
            if let Some((start, next)) = records {
                let _ = write!(
                    out,
                    ",\"stream_record_start\":{start},\"stream_record_next\":{next}"
                );
            }
        }
        Ack::Failed {
            status,
            code,
            message,
            next,
            closed,
        } => {
            let message = Value::String(message.clone());
            let _ = write!(
                out,
                "{{\"status\":{status},\"error_code\":\"{code}\",\"error\":{message}"
            );
            if let Some(next) = next {
                let _ = write!(out, ",\"stream_next_offset\":\"{}\"", offset::format(*next));
            }
            if *closed {
                out.push_str(",\"stream_closed\":true");
            }
        }
    }
    out.push('}');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn framed(payloads: &[&[u8]]) -> Vec<u8> {
        let mut body = Vec::new();
        for p in payloads {
            body.extend_from_slice(&(p.len() as u32).to_be_bytes());
            body.extend_from_slice(p);
        }
        body
    }

    #[test]
    fn splits_frames() {
        let body = framed(&[b"a", b"bc", &[0, 1, 2]]);
        assert_eq!(frames(&body).unwrap(), vec![&b"a"[..], b"bc", &[0, 1, 2]]);
    }

    #[test]
    fn rejects_bad_framing() {
        assert_eq!(frames(&[0, 0, 0]).unwrap_err().status, 400);
        assert_eq!(frames(&[0, 0, 0, 0]).unwrap_err().status, 400);
        assert_eq!(frames(&[0, 0, 0, 5, 1]).unwrap_err().status, 400);
        assert_eq!(frames(&[]).unwrap_err().status, 400);
        let many: Vec<&[u8]> = vec![b"x"; MAX_FRAMES + 1];
        assert_eq!(frames(&framed(&many)).unwrap_err().status, 413);
        let exactly: Vec<&[u8]> = vec![b"x"; MAX_FRAMES];
        assert_eq!(frames(&framed(&exactly)).unwrap().len(), MAX_FRAMES);
    }

    #[test]
    fn renders_acks_in_order() {
        let acks = [
            Ack::Appended {
                next: 3,
                records: Some((0, 2)),
            },
            Ack::Failed {
                status: 409,
                code: "stream_closed",
                message: "closed \"now\"\n".into(),
                next: Some(3),
                closed: true,
            },
        ];
        let body: Value = serde_json::from_slice(&render(&acks).body).unwrap();
        assert_eq!(body[0]["status"], 204);
        assert_eq!(body[0]["stream_next_offset"], offset::format(3));
        assert_eq!(
            (
                &body[0]["stream_record_start"],
                &body[0]["stream_record_next"]
            ),
            (&json!(0), &json!(2))
        );
        assert_eq!(body[1]["stream_closed"], true);
        assert_eq!(body[1]["error_code"], "stream_closed");
    }

    fn created(table: &mut Table, key: &str, now_ms: u64) -> u64 {
        table.apply(Command::plain_create(key, "application/json", b"", now_ms));
        table.get(key).unwrap().id
    }

    #[test]
    fn a_frame_after_its_stream_was_replaced_is_not_found() {
        let mut table = Table::default();
        let first = created(&mut table, "b/s", 1);
        let decide = |table: &Table, frame: &'static [u8], now_ms| {
            let frame = Bytes::from_static(frame);
            decide_frame("b/s", Some(first), table, (&frame, None), now_ms)
        };
        assert!(decide(&table, b"[1,2]", 1).is_ok());
        table.apply(Command::Delete {
            key: "b/s".to_string(),
            stream_id: first,
        });
        let gone = decide(&table, b"[1]", 2).unwrap_err();
        assert!(matches!(gone, Ack::Failed { status: 404, .. }), "{gone:?}");
        let second = created(&mut table, "b/s", 3);
        assert_ne!(first, second);
        let replaced = decide(&table, b"[1]", 4).unwrap_err();
        assert!(
            matches!(replaced, Ack::Failed { status: 404, .. }),
            "{replaced:?}"
        );
    }
}
