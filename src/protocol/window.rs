//! Read windows: where a response or an SSE event that starts at `start`
//! ends, given a byte budget. v1 JSON responses carry whole messages (they
//! render as a JSON array); bucketed JSON responses prefer record ends but
//! may end mid-record (the extensions' base, `max_bytes`); text never ends
//! inside a UTF-8 sequence; binary ends exactly at the budget.

use super::{Surface, content_type};
use crate::stream::Stream;

/// Where a window ends: exactly, or near a byte limit that the fetched
/// bytes must move back to a UTF-8 boundary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    At(u64),
    Utf8Near(u64),
}

/// Plans the window starting at `start` (before `stream.tail()`).
pub fn plan(stream: &Stream, surface: Surface, start: u64, budget: u64) -> Cut {
    let tail = stream.tail();
    let limit = start.saturating_add(budget.max(1));
    if tail <= limit {
        return Cut::At(tail);
    }
    if stream.json && surface == Surface::V1 {
        let end = whole_messages_end(stream, start, limit);
        return Cut::At(end.expect("a message ends at the tail, past start"));
    }
    if stream.json
        && let Some(end) = stream.messages.last_end_within(start, limit)
    {
        return Cut::At(end);
    }
    if content_type::is_sse_text(&stream.content_type) {
        return Cut::Utf8Near(limit);
    }
    Cut::At(limit)
}

/// A record-aware window (extensions §6.7): whole records only, at least
/// one, at most `max_records`, within `budget` unless one record is bigger.
pub fn plan_records(stream: &Stream, start: u64, budget: u64, max_records: Option<u64>) -> Cut {
    let tail = stream.tail();
    let mut limit = start.saturating_add(budget.max(1)).min(tail);
    if let Some(max) = max_records {
        let first = stream.messages.ordinal_at(start);
        let end = first.and_then(|r| stream.messages.offset_of(r.saturating_add(max)));
        limit = limit.min(end.unwrap_or(tail));
    }
    let end = whole_messages_end(stream, start, limit);
    Cut::At(end.map_or(tail, |end| end.min(tail)))
}

/// Where a window of whole messages from `start` ends: after the last one
/// that ends by `limit`, or after the first one when it alone is longer.
fn whole_messages_end(stream: &Stream, start: u64, limit: u64) -> Option<u64> {
    let messages = &stream.messages;
    messages
        .last_end_within(start, limit)
        .or_else(|| messages.first_end_after(start))
}

/// How far bytes must be fetched to resolve `cut`.
pub fn fetch_end(cut: Cut, tail: u64) -> u64 {
    match cut {
        Cut::At(end) => end,
        Cut::Utf8Near(limit) => (limit + 3).min(tail),
    }
}

/// The window's end, given the bytes fetched from `start`.
pub fn resolve(cut: Cut, start: u64, fetched: &[u8]) -> u64 {
    resolve_by(cut, start, |at| fetched.get(at as usize).copied())
}

/// `resolve` where `byte_at(i)` is the window's byte `i` (from `start`).
pub fn resolve_by(cut: Cut, start: u64, byte_at: impl Fn(u64) -> Option<u8>) -> u64 {
    match cut {
        Cut::At(end) => end,
        Cut::Utf8Near(limit) => start + utf8_end(byte_at, 0, limit - start),
    }
}

/// `limit` moved back (at most 3 bytes) to the start of a UTF-8 sequence;
/// forward instead when that would leave nothing, so readers progress.
fn utf8_end(byte_at: impl Fn(u64) -> Option<u8>, start: u64, limit: u64) -> u64 {
    let continuation = |at: u64| byte_at(at).is_some_and(|b| b & 0xC0 == 0x80);
    let mut end = limit;
    for _ in 0..3 {
        if end > start && continuation(end) {
            end -= 1;
        }
    }
    if end > start && !continuation(end) {
        return end;
    }
    let mut end = limit;
    // Only over bytes that are there: the window's length bounds it.
    for _ in 0..3 {
        if continuation(end) {
            end += 1;
        }
    }
    end
}

/// How many bytes at the end of `data` are a UTF-8 sequence's valid start
/// that its last byte leaves unfinished (0 when it ends a character, or
/// with bytes no character could begin with).
pub fn split_char_tail(data: &[u8]) -> usize {
    let from = data.len().saturating_sub(3);
    let Some(lead) = data[from..].iter().rposition(|&b| b & 0xC0 != 0x80) else {
        return 0;
    };
    let last = &data[from + lead..];
    // The standard validator knows RFC 3629's ranges: an input that ends
    // inside a sequence still valid so far has no error length.
    match std::str::from_utf8(last) {
        Err(e) if e.error_len().is_none() => last.len() - e.valid_up_to(),
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stream::{Command, Table};

    #[test]
    fn a_split_character_is_counted_at_the_end_only() {
        let euro = "€".as_bytes();
        assert_eq!(split_char_tail(b"x"), 0);
        assert_eq!(split_char_tail(b""), 0);
        assert_eq!(split_char_tail(&[b'x', euro[0]]), 1);
        assert_eq!(split_char_tail(&[b'x', euro[0], euro[1]]), 2);
        assert_eq!(split_char_tail(euro), 0, "whole");
        let four = "𝄞".as_bytes();
        assert_eq!(split_char_tail(&four[..3]), 3);
        assert_eq!(split_char_tail(&[0x80, 0x80]), 0, "no lead byte");
        assert_eq!(split_char_tail(&[0xFF]), 0, "no character starts so");
        assert_eq!(split_char_tail(&[0xC3, b'a']), 0, "broken, not unfinished");
        assert_eq!(split_char_tail(&[0xE0, 0x80]), 0, "overlong");
        assert_eq!(split_char_tail(&[0xED, 0xA0]), 0, "a surrogate");
        assert_eq!(split_char_tail(&[0xF4, 0x90]), 0, "past U+10FFFF");
        assert_eq!(split_char_tail(&[0xF0, 0x9F, 0x98]), 3);
    }

    /// The window end as a reader of the whole stream would compute it.
    fn window_end(s: &Stream, surface: Surface, start: u64, budget: u64) -> u64 {
        let cut = plan(s, surface, start, budget);
        let mut fetched = Vec::new();
        s.data
            .copy_cached(start, fetch_end(cut, s.tail()), &mut fetched);
        resolve(cut, start, &fetched)
    }

    fn stream(content_type: &str, data: &[u8]) -> Stream {
        let mut table = Table::default();
        let (applied, _) = table.apply(Command::plain_create("k", content_type, data, 0));
        table.publish(&applied, None);
        table.get("k").unwrap().clone()
    }

    #[test]
    fn v1_json_keeps_whole_messages() {
        let s = stream("application/json", b"11111\n22\n3\n");
        assert_eq!(window_end(&s, Surface::V1, 0, 7), 6);
        assert_eq!(window_end(&s, Surface::V1, 0, 2), 6);
        assert_eq!(window_end(&s, Surface::V1, 6, 4), 9);
        assert_eq!(window_end(&s, Surface::V1, 6, 5), 11);
    }

    #[test]
    fn bucket_json_prefers_records_then_cuts() {
        let s = stream("application/json", b"11111\n22\n3\n");
        assert_eq!(window_end(&s, Surface::Bucket, 0, 8), 6);
        assert_eq!(window_end(&s, Surface::Bucket, 0, 2), 2);
        assert_eq!(window_end(&s, Surface::Bucket, 2, 5), 6);
    }

    #[test]
    fn text_never_splits_a_character() {
        let s = stream("text/plain", "aé€x".as_bytes());
        assert_eq!(window_end(&s, Surface::Bucket, 0, 2), 1);
        assert_eq!(window_end(&s, Surface::Bucket, 1, 1), 3);
        assert_eq!(window_end(&s, Surface::V1, 3, 2), 6);
        let bin = stream("application/octet-stream", "aé€x".as_bytes());
        assert_eq!(window_end(&bin, Surface::V1, 0, 2), 2);
    }
}
