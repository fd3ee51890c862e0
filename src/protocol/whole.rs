//! Whole catch-up reads (PROTOCOL.md §5.5): an unbounded catch-up that
//! spans more than one read window is answered up to the tail as it is when
//! the request arrives, in one response streamed window by window.
//!
//! §5.5 lets a server end a response at a "server-defined maximum chunk
//! size" without `Stream-Up-To-Date`, and a client that follows
//! `Stream-Next-Offset` gets the rest. The official clients do not when
//! they read without `live`: they take one response as the whole stream, so
//! a window-sized answer loses the rest without an error. A whole answer
//! serves both, and memory stays at one window (the shard fetches, renders
//! and writes one window at a time, under a Content-Length known ahead).
//!
//! Bounded reads keep their windows: `max_bytes` (the extensions' base) and
//! record views (extensions §6.7) ask for a page, not the stream.

use super::read::{self, LiveMode, MAX_READ_BYTES, ReadPlan};
use super::response::Response;
use super::window::{self, Cut};
use super::{Surface, json};
use crate::stream::Stream;

/// Where a whole answer to `plan` ends (the tail now), or `None` when the
/// read is bounded or one window holds it.
pub fn end(stream: &Stream, plan: &ReadPlan) -> Option<u64> {
    let unbounded =
        plan.mode == LiveMode::CatchUp && plan.records.is_none() && plan.max_bytes.is_none();
    let tail = stream.tail();
    (unbounded && tail.saturating_sub(plan.start) > MAX_READ_BYTES).then_some(tail)
}

/// The head of the whole answer to `[plan.start, end)`: up to date, as any
/// answer that reaches the tail, and cacheable; or its 304.
pub fn head(
    if_none_match: Option<&str>,
    stream: &Stream,
    plan: &ReadPlan,
    end: u64,
    now_ms: u64,
) -> Response {
    debug_assert!(
        end > plan.start && end <= stream.tail(),
        "a whole read has data"
    );
    let reply = read::data_head(stream, plan, end);
    let cache = read::data_cache_control(stream, plan, now_ms);
    read::validated(if_none_match, reply, cache)
}

/// Renders the body of a whole answer one fetched window at a time, in the
/// surface's dialect: bytes as stored, or (v1 JSON) one JSON array over all
/// windows.
#[derive(Debug)]
pub struct Body {
    array: bool,
    /// No array element written yet.
    first: bool,
}

impl Body {
    pub fn new(stream: &Stream, plan: &ReadPlan) -> Body {
        Body {
            array: stream.json && plan.surface == Surface::V1,
            first: true,
        }
    }

    /// Where the window that starts at `pos` ends, at most `end`; `None`
    /// when the stream no longer holds `pos` (retention passed it).
    pub fn window_end(&self, stream: &Stream, pos: u64, end: u64) -> Option<u64> {
        debug_assert!(pos < end && end <= stream.tail());
        if pos < stream.retained {
            return None;
        }
        if !self.array {
            return Some(pos.saturating_add(MAX_READ_BYTES).min(end));
        }
        // Whole messages, so each window renders as array elements; `end`
        // (a tail once) is a message boundary too.
        match window::plan(stream, Surface::V1, pos, MAX_READ_BYTES) {
            Cut::At(at) => Some(at.min(end)),
            Cut::Utf8Near(_) => unreachable!("JSON windows end on messages"),
        }
    }

    /// Whether the body is the stored bytes as they are (no JSON array).
    pub fn sends_stored_bytes(&self) -> bool {
        !self.array
    }

    /// Where each window of `[start, end)` ends, decided before the body
    /// goes out: retention meanwhile drops the message ends a window cut
    /// needs, but not the bytes a pinned response reads (`stream::pins`).
    pub fn window_ends(&self, stream: &Stream, start: u64, end: u64) -> Vec<u64> {
        let mut ends = Vec::new();
        let mut pos = start;
        while pos < end {
            let Some(to) = self.window_end(stream, pos, end) else {
                break;
            };
            assert!(to > pos, "a window makes progress");
            ends.push(to);
            pos = to;
        }
        ends
    }

    /// The body's length, known before it is written: the stored bytes,
    /// or (v1 JSON) the array they render as. Stored JSON is minified
    /// messages each ending in one `\n` (`json::normalize_into`), so the
    /// array replaces the newlines with n - 1 commas and adds two brackets.
    pub fn len(&self, start: u64, end: u64) -> u64 {
        debug_assert!(start < end, "a whole read has data");
        (end - start) + u64::from(self.array)
    }

    /// The body bytes of one fetched window.
    pub fn piece(&mut self, fetched: Vec<u8>) -> Vec<u8> {
        if !self.array {
            return fetched;
        }
        let mut out = Vec::with_capacity(fetched.len() + 1);
        for message in json::messages(&fetched) {
            out.push(if self.first { b'[' } else { b',' });
            self.first = false;
            out.extend_from_slice(message);
        }
        out
    }

    /// The bytes that end the body.
    pub fn finish(&self) -> &'static [u8] {
        match (self.array, self.first) {
            (false, _) => b"",
            (true, true) => b"[]",
            (true, false) => b"]",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::read::LiveMode;
    use crate::stream::{Command, Table};

    fn stream(content_type: &str, data: &[u8]) -> Stream {
        let mut table = Table::default();
        let (applied, _) = table.apply(Command::plain_create("k", content_type, data, 0));
        table.publish(&applied, None);
        table.get("k").unwrap().clone()
    }

    fn plan(surface: Surface, start: u64) -> ReadPlan {
        ReadPlan {
            key: "k".into(),
            stream_id: 0,
            surface,
            mode: LiveMode::CatchUp,
            start,
            cursor: None,
            max_bytes: None,
            records: None,
            past_tail: false,
            from_now: false,
        }
    }

    /// The whole body as the shard builds it, window by window.
    fn whole_body(s: &Stream, p: &ReadPlan, end: u64) -> Vec<u8> {
        let mut body = Body::new(s, p);
        let (mut out, mut pos) = (Vec::new(), p.start);
        while pos < end {
            let to = body.window_end(s, pos, end).unwrap();
            assert!(to > pos, "windows progress");
            let mut fetched = Vec::new();
            s.data.copy_cached(pos, to, &mut fetched);
            out.extend(body.piece(fetched));
            pos = to;
        }
        out.extend_from_slice(body.finish());
        out
    }

    #[test]
    fn only_unbounded_catch_ups_past_one_window_are_whole() {
        let big = vec![b'x'; MAX_READ_BYTES as usize + 1];
        let s = stream("application/octet-stream", &big);
        assert_eq!(end(&s, &plan(Surface::V1, 0)), Some(s.tail()));
        assert_eq!(end(&s, &plan(Surface::V1, 1)), None, "one window holds it");
        let bounded = ReadPlan {
            max_bytes: Some(10),
            ..plan(Surface::Bucket, 0)
        };
        assert_eq!(end(&s, &bounded), None);
        let live = ReadPlan {
            mode: LiveMode::LongPoll,
            ..plan(Surface::V1, 0)
        };
        assert_eq!(end(&s, &live), None);
    }

    #[test]
    fn bytes_stream_as_stored_and_v1_json_as_one_array() {
        let message = format!("{{\"k\":\"{}\"}}\n", "v".repeat(1 << 20));
        let lines = message.repeat(6);
        let s = stream("application/json", lines.as_bytes());
        let body = whole_body(&s, &plan(Surface::Bucket, 0), s.tail());
        assert_eq!(body, lines.as_bytes());
        let array = whole_body(&s, &plan(Surface::V1, 0), s.tail());
        let parsed: serde_json::Value = serde_json::from_slice(&array).unwrap();
        assert_eq!(parsed.as_array().unwrap().len(), 6);
        let mut rendered = Vec::new();
        json::render_array(lines.as_bytes(), &mut rendered);
        assert_eq!(array, rendered, "the same array one window renders");
        let (bytes, v1) = (
            Body::new(&s, &plan(Surface::Bucket, 0)),
            Body::new(&s, &plan(Surface::V1, 0)),
        );
        assert_eq!(bytes.len(0, s.tail()), body.len() as u64);
        assert_eq!(
            v1.len(0, s.tail()),
            array.len() as u64,
            "the array's length ahead"
        );
    }

    #[test]
    fn a_retained_start_ends_the_windows() {
        let s = stream("text/plain", b"abcdef");
        let body = Body::new(&s, &plan(Surface::V1, 0));
        let mut trimmed = s.clone();
        trimmed.retained = 3;
        assert_eq!(body.window_end(&s, 0, 6), Some(6));
        assert_eq!(body.window_end(&trimmed, 0, 6), None);
    }
}
