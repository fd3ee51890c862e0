//! SSE reads (PROTOCOL.md §5.7, extensions §7): event framing, data/control
//! pairing, base64 for non-text streams, closure and the reconnect cycle.
//!
//! Wire shape: `event: data\ndata:<line>\n...\n\n` then
//! `event: control\ndata:{...}\n\n`. Every data event is followed by a
//! control event; only the last control of a batch says `upToDate`, and the
//! final one of a closed stream says `streamClosed` and `upToDate` without a
//! cursor. On the bucketed surface `stream-data-content-type` names every
//! data payload's type (NDJSON for JSON streams, else the stream's type).
//! Record-aware reads (extensions §6.9) send whole records, add
//! `streamFirstRecord`/`streamNextRecord` to every control event, and with
//! `record_view=envelope` one envelope object per data event.

use base64::Engine;

use super::read::{ReadPlan, render_body};
use super::records;
use super::response::Response;
use super::window::{self, Cut};
use super::{Surface, content_type, cursor, offset};
use crate::stream::Stream;

/// Largest data event; bigger backlogs go out as several events.
pub const MAX_EVENT_BYTES: u64 = 256 << 10;

/// Where an SSE response stands between steps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SseCursor {
    pub plan: ReadPlan,
    /// Next byte position to send.
    pub next: u64,
    /// Whether any control event went out yet.
    pub announced: bool,
    /// Where the last window ended (at the tail it was planned to) when
    /// its bytes from `next` on began a character an append left
    /// unfinished: nothing more is sent until the tail moves past it or the
    /// stream closes (§5.8: no invalid UTF-8 in text events).
    pub held_at: Option<u64>,
    /// Whether the client's cursor was at or after the current interval
    /// when the response began (`cursor::client_ahead`).
    pub client_ahead: bool,
}

/// Everything `SseCursor::emit` reads besides the fetched bytes (which the
/// stream's incarnation and window fix): responses whose keys are equal get
/// the same step, so the owning shard renders an event once for the whole
/// audience at one position. The cursor a control carries is a function of
/// the client's cursor and the interval (`cursor::sse_cursor`), both here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StepKey {
    id: u64,
    window: (u64, u64, Cut),
    tail: u64,
    closed: bool,
    retained: u64,
    first_record: u64,
    surface: Surface,
    records: Option<records::RecordView>,
    client_cursor: Option<String>,
    client_ahead: bool,
    interval: u64,
    announced: bool,
}

/// What to write next, and whether the response ends after it.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct SseStep {
    pub bytes: Vec<u8>,
    pub done: bool,
}

pub fn head(stream: &Stream, plan: &ReadPlan) -> Response {
    let envelope = plan.records.is_some_and(|v| v.envelope);
    // The bucketed dialect names every data payload's type (its base §5.8:
    // NDJSON for JSON streams, otherwise the configured content type).
    let data_type = match (envelope, plan.surface) {
        (true, _) => Some(records::ENVELOPE_EVENT),
        (false, Surface::Bucket) if stream.json => Some("application/x-ndjson"),
        (false, Surface::Bucket) => Some(stream.content_type.as_str()),
        (false, _) => None,
    };
    let reply = Response::new(200)
        .header("content-type", "text/event-stream")
        .header("cache-control", "no-cache")
        .header_if(
            !content_type::is_sse_text(&stream.content_type),
            "stream-sse-data-encoding",
            "base64",
        );
    // A stream closed at the offset asked for: the closure signal is in
    // the headers too (PROTOCOL.md §8 `now` on a closed stream: "regardless
    // of the live parameter").
    let reply = match closed_at_start(stream, plan) {
        true => reply
            .header("stream-closed", "true")
            .header("stream-up-to-date", "true")
            .header("stream-next-offset", offset::format(stream.tail())),
        false => reply,
    };
    match data_type {
        Some(ct) => reply.header("stream-data-content-type", ct),
        None => reply,
    }
}

/// Whether the stream is closed where the read starts: the response is
/// then its final control event alone, and the connection closes (§5.8).
pub fn closed_at_start(stream: &Stream, plan: &ReadPlan) -> bool {
    stream.is_closed() && plan.start >= stream.tail()
}

impl SseCursor {
    pub fn new(plan: ReadPlan, now_ms: u64) -> Self {
        let next = plan.start;
        let client_ahead = cursor::client_ahead(plan.cursor.as_deref(), now_ms);
        SseCursor {
            plan,
            next,
            announced: false,
            held_at: None,
            client_ahead,
        }
    }

    /// The next window to send, `[start, fetch_end)` with its cut, when
    /// the stream has data past the cursor.
    pub fn next_window(&self, stream: &Stream) -> Option<(u64, u64, Cut)> {
        let held = self.held_at == Some(stream.tail()) && !stream.is_closed();
        if self.next >= stream.tail() || held {
            return None;
        }
        let budget = self
            .plan
            .max_bytes
            .unwrap_or(MAX_EVENT_BYTES)
            .min(MAX_EVENT_BYTES);
        let cut = match self.plan.records {
            Some(view) => {
                // One envelope per event (§6.9); otherwise at most
                // `max_records` complete records per data event (§6.6).
                let max = if view.envelope {
                    Some(1)
                } else {
                    view.max_records
                };
                window::plan_records(stream, self.next, budget, max)
            }
            None => window::plan(stream, self.plan.surface, self.next, budget),
        };
        Some((self.next, window::fetch_end(cut, stream.tail()), cut))
    }

    /// The key of the step `emit` would produce for `window` now.
    pub fn step_key(&self, stream: &Stream, window: (u64, u64, Cut), now_ms: u64) -> StepKey {
        StepKey {
            id: stream.id,
            window,
            tail: stream.tail(),
            closed: stream.is_closed(),
            retained: stream.retained,
            first_record: stream.first_record,
            surface: self.plan.surface,
            records: self.plan.records,
            client_cursor: self.plan.cursor.clone(),
            client_ahead: self.client_ahead,
            interval: now_ms / cursor::INTERVAL_MS,
            announced: self.announced,
        }
    }

    /// Takes the position another response with an equal `StepKey`
    /// reached by emitting its step.
    pub fn follow(&mut self, after: &SseCursor) {
        debug_assert_eq!(self.plan.key, after.plan.key);
        self.next = after.next;
        self.announced = after.announced;
        self.held_at = after.held_at;
    }

    /// One data event for the fetched window (bytes from `self.next`), then
    /// its control event, or the final one when that reaches a closed tail.
    pub fn emit(&mut self, stream: &Stream, cut: Cut, fetched: &[u8], now_ms: u64) -> SseStep {
        let start = self.next;
        if self.plan.records.is_some() && !stream.messages.is_boundary(start) {
            // Retention passed the cursor: its ordinals are gone (§6.10).
            return SseStep {
                bytes: Vec::new(),
                done: true,
            };
        }
        let end = window::resolve(cut, start, fetched).min(start + fetched.len() as u64);
        let held = self.held_back(stream, cut, &fetched[..(end - start) as usize]);
        self.held_at = (held > 0).then_some(end);
        let end = end - held;
        if held > 0 && end == start {
            return SseStep::default();
        }
        let mut out = Vec::new();
        let bytes = &fetched[..(end - start) as usize];
        match self.plan.records {
            Some(view) if view.envelope => {
                let record = stream
                    .messages
                    .ordinal_at(start)
                    .expect("a record boundary");
                let mut object = Vec::with_capacity(bytes.len() + 32);
                records::envelope_one(
                    record,
                    bytes.strip_suffix(b"\n").unwrap_or(bytes),
                    &mut object,
                );
                write_event(&mut out, "data", &object);
            }
            _ => write_data_event(&mut out, stream, self.plan.surface, bytes),
        }
        self.next = end;
        let at_tail = end + held == stream.tail();
        if at_tail && stream.is_closed() {
            self.write_closed(&mut out, stream, end);
            return SseStep {
                bytes: out,
                done: true,
            };
        }
        self.write_control(&mut out, stream, end, at_tail, now_ms);
        SseStep {
            bytes: out,
            done: false,
        }
    }

    /// How many bytes at the end of a text window that reached the tail (as
    /// it stood when the window was planned: an append may have landed
    /// during the fetch) begin a character an append left unfinished: they
    /// wait for its end rather than go out as U+FFFD (§5.8 "MUST NOT emit
    /// invalid UTF-8"; windows ending inside a code point are shortened).
    /// `held_at` is that end: where the tail has moved on, the next window
    /// starts at the character at once. The last bytes of a closed stream
    /// go out whatever they are. The control after a held window still says
    /// `upToDate`: all the client can read is sent.
    fn held_back(&self, stream: &Stream, cut: Cut, bytes: &[u8]) -> u64 {
        let text = self.plan.records.is_none()
            && !stream.json
            && content_type::is_sse_text(&stream.content_type);
        // A text window ends exactly only at the tail (`window::plan`).
        let Cut::At(end) = cut else { return 0 };
        if !text || (stream.is_closed() && end == stream.tail()) {
            return 0;
        }
        window::split_char_tail(bytes) as u64
    }

    /// With nothing to send: the final control of a closed (or deleted)
    /// stream, the first control of a response, or a keep-alive control.
    pub fn idle(&mut self, stream: Option<&Stream>, now_ms: u64, timed_out: bool) -> SseStep {
        // Gone, or past its `Stream-Expires-At` (`Table::get_waited_on`):
        // the response ends.
        let Some(stream) = stream else {
            return SseStep {
                bytes: Vec::new(),
                done: true,
            };
        };
        let mut out = Vec::new();
        if stream.is_closed() && self.next >= stream.tail() {
            self.write_closed(&mut out, stream, self.next);
            return SseStep {
                bytes: out,
                done: true,
            };
        }
        if !self.announced || timed_out {
            self.write_control(&mut out, stream, self.next, true, now_ms);
        }
        SseStep {
            bytes: out,
            done: false,
        }
    }

    /// Where the client resumes, when the response ends before the tail
    /// (its cycle is over, the shard stops, or the reply budget stayed
    /// spent) or waits for the budget (`again`: a keep-alive). Every data
    /// event went out with its control, so a response ending says it only
    /// when it sent none yet. Up to date only at the tail.
    pub fn position(&mut self, stream: Option<&Stream>, now_ms: u64, again: bool) -> SseStep {
        let mut out = Vec::new();
        if let Some(stream) = stream
            && (again || !self.announced)
        {
            let up_to_date = self.next >= stream.tail();
            self.write_control(&mut out, stream, self.next, up_to_date, now_ms);
        }
        SseStep {
            bytes: out,
            done: false,
        }
    }

    fn write_control(
        &mut self,
        out: &mut Vec<u8>,
        stream: &Stream,
        at: u64,
        up_to_date: bool,
        now_ms: u64,
    ) {
        self.announced = true;
        let cursor = cursor::sse_cursor(self.plan.cursor.as_deref(), self.client_ahead, now_ms);
        let up = if up_to_date { ",\"upToDate\":true" } else { "" };
        let json = format!(
            "{{\"streamNextOffset\":\"{}\"{},\"streamCursor\":\"{cursor}\"{up}}}",
            offset::format(at),
            self.record_fields(stream, at),
        );
        write_event(out, "control", json.as_bytes());
    }

    fn write_closed(&self, out: &mut Vec<u8>, stream: &Stream, at: u64) {
        let json = format!(
            "{{\"streamNextOffset\":\"{}\"{},\"upToDate\":true,\"streamClosed\":true}}",
            offset::format(at),
            self.record_fields(stream, at),
        );
        write_event(out, "control", json.as_bytes());
    }

    /// §6.9: the record coordinates of boundary `at`, on record-aware reads.
    fn record_fields(&self, stream: &Stream, at: u64) -> String {
        let next = stream.messages.ordinal_at(at);
        match (self.plan.records, next) {
            (Some(_), Some(next)) => format!(
                ",\"streamFirstRecord\":{},\"streamNextRecord\":{next}",
                stream.first_record
            ),
            _ => String::new(),
        }
    }
}

fn write_data_event(out: &mut Vec<u8>, stream: &Stream, surface: Surface, fetched: &[u8]) {
    if !content_type::is_sse_text(&stream.content_type) {
        let encoded = base64::engine::general_purpose::STANDARD.encode(fetched);
        write_event(out, "data", encoded.as_bytes());
        return;
    }
    // NDJSON keeps its final newline (an empty last `data:` line), so that
    // concatenated event payloads are exactly the stored bytes. Data events
    // carry UTF-8 text (PROTOCOL.md §5.8): bytes of a text stream that are
    // not UTF-8 go out as U+FFFD, as an SSE client would decode them. Text
    // windows cut by size end on character boundaries
    // (`window::Cut::Utf8Near`); one that ends at the live tail inside a
    // character an append split stops before it (`held_back`).
    let body = render_body(stream, surface, fetched);
    write_event(out, "data", String::from_utf8_lossy(&body).as_bytes());
}

/// One event; the payload is split on CR, LF and CRLF so that no payload
/// byte can end the event or forge another one.
pub fn write_event(out: &mut Vec<u8>, name: &str, payload: &[u8]) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.push(b'\n');
    let mut rest = payload;
    loop {
        let cut = memchr::memchr2(b'\r', b'\n', rest);
        let line = &rest[..cut.unwrap_or(rest.len())];
        // `data:` with no space, except before a line that starts with one:
        // SSE parsers strip one leading space, so it is doubled there.
        out.extend_from_slice(if line.first() == Some(&b' ') {
            b"data: "
        } else {
            b"data:"
        });
        out.extend_from_slice(line);
        out.push(b'\n');
        let Some(at) = cut else { break };
        let skip = if rest[at] == b'\r' && rest.get(at + 1) == Some(&b'\n') {
            2
        } else {
            1
        };
        rest = &rest[at + skip..];
    }
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::read::LiveMode;
    use crate::stream::{Command, Table};

    fn text_table(data: &[u8]) -> Table {
        let mut table = Table::default();
        let (applied, _) = table.apply(Command::plain_create("k", "text/plain", data, 0));
        table.publish(&applied, None);
        table
    }

    fn append(table: &mut Table, data: &[u8]) {
        let s = table.get("k").unwrap();
        let (stream_id, start) = (s.id, s.tail());
        let (applied, _) = table.apply(Command::Append {
            key: "k".into(),
            stream_id,
            start,
            data: data.to_vec().into(),
            producer: None,
            stream_seq: None,
            close: false,
            now_ms: 0,
        });
        table.publish(&applied, None);
    }

    /// A window planned at a tail inside a character, fetched while an
    /// append finished it, stops before the character and the next window
    /// takes it whole (no U+FFFD halves); at an unmoved tail it waits.
    #[test]
    fn a_character_split_at_the_tail_is_held_until_it_is_whole() {
        let mut table = text_table(b"a\xE2");
        let plan = ReadPlan {
            key: "k".into(),
            stream_id: 0,
            surface: Surface::V1,
            mode: LiveMode::Sse,
            start: 0,
            cursor: None,
            max_bytes: None,
            records: None,
            past_tail: false,
            from_now: false,
        };
        let mut cursor = SseCursor::new(plan, 0);
        let (start, end, cut) = cursor.next_window(table.get("k").unwrap()).unwrap();
        assert_eq!((start, end, cut), (0, 2, Cut::At(2)));
        let step = cursor.emit(table.get("k").unwrap(), cut, b"a\xE2", 0);
        assert!(String::from_utf8(step.bytes).unwrap().contains("data:a\n"));
        assert_eq!((cursor.next, cursor.held_at), (1, Some(2)));
        assert_eq!(cursor.next_window(table.get("k").unwrap()), None, "waits");

        append(&mut table, b"\x82");
        let (_, _, cut) = cursor.next_window(table.get("k").unwrap()).unwrap();
        append(&mut table, b"\xACb");
        let stream = table.get("k").unwrap();
        let step = cursor.emit(stream, cut, b"\xE2\x82", 0);
        assert!(
            step.bytes.is_empty(),
            "still unfinished where it was planned"
        );
        let (start, end, cut) = cursor.next_window(stream).unwrap();
        assert_eq!((start, end), (1, 5), "the tail moved: on at once");
        let step = cursor.emit(stream, cut, "€b".as_bytes(), 0);
        assert!(String::from_utf8(step.bytes).unwrap().contains("data:€b\n"));
    }

    /// §8.1: with the client's cursor at the current interval, one
    /// response's cursors stay past it and never go back, also once the
    /// interval itself moves on.
    #[test]
    fn one_responses_cursors_never_go_back() {
        let mut table = text_table(b"abc");
        let now_ms = cursor::EPOCH_MS + 1_000 * cursor::INTERVAL_MS;
        let plan = ReadPlan {
            key: "k".into(),
            stream_id: 0,
            surface: Surface::V1,
            mode: LiveMode::Sse,
            start: 0,
            cursor: Some("1000".into()),
            max_bytes: None,
            records: None,
            past_tail: false,
            from_now: false,
        };
        let mut sse = SseCursor::new(plan, now_ms);
        let sent = |step: SseStep| -> u64 {
            let text = String::from_utf8(step.bytes).unwrap();
            let at = text.find("\"streamCursor\":\"").expect("a cursor") + 16;
            text[at..].split('"').next().unwrap().parse().unwrap()
        };
        let mut last = 1000;
        for minutes in [0u64, 1, 7, 30, 59, 61, 90, 200] {
            let later = now_ms + minutes * 60_000;
            append(&mut table, b"x");
            let (_, _, cut) = sse.next_window(table.get("k").unwrap()).unwrap();
            let stream = table.get("k").unwrap();
            let bytes = vec![b'x'; (stream.tail() - sse.next) as usize];
            let cursor = sent(sse.emit(stream, cut, &bytes, later));
            assert!(cursor > 1000 && cursor >= last, "{cursor} after {last}");
            last = cursor;
        }
    }

    /// A response that ends before the tail says where to resume (not
    /// up to date) once: after a data event, its control said it already.
    #[test]
    fn a_pause_announces_the_resume_offset_once_a_keepalive_again() {
        let table = text_table(b"abcdef");
        let plan = ReadPlan {
            key: "k".into(),
            stream_id: 0,
            surface: Surface::V1,
            mode: LiveMode::Sse,
            start: 2,
            cursor: None,
            max_bytes: None,
            records: None,
            past_tail: false,
            from_now: false,
        };
        let stream = table.get("k");
        let mut sse = SseCursor::new(plan, 0);
        let text = String::from_utf8(sse.position(stream, 0, false).bytes).unwrap();
        assert!(text.starts_with("event: control\n"), "{text}");
        assert!(text.contains("\"streamNextOffset\":\"0000000000000000_0000000000000002\""));
        assert!(!text.contains("upToDate"), "{text}");
        assert_eq!(
            sse.position(stream, 0, false),
            SseStep::default(),
            "said once"
        );
        let again = String::from_utf8(sse.position(stream, 0, true).bytes).unwrap();
        assert_eq!(again, text, "a keep-alive says it again");
        assert_eq!(sse.position(None, 0, true), SseStep::default(), "gone");
    }

    #[test]
    fn payload_lines_cannot_forge_events() {
        let mut out = Vec::new();
        write_event(&mut out, "data", b"a\r\n\r\nevent: control\rb\nc");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "event: data\ndata:a\ndata:\ndata:event: control\ndata:b\ndata:c\n\n"
        );
    }

    #[test]
    fn leading_space_survives_sse_parsing() {
        let mut out = Vec::new();
        write_event(&mut out, "data", b" a\nb");
        assert_eq!(out, b"event: data\ndata:  a\ndata:b\n\n");
    }

    #[test]
    fn empty_payload_is_one_empty_line() {
        let mut out = Vec::new();
        write_event(&mut out, "control", b"{}");
        assert_eq!(out, b"event: control\ndata:{}\n\n");
    }
}
