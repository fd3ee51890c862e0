//! JSON mode body handling for `application/json` streams (PROTOCOL.md §7.1).
//!
//! This file owns validation, one-level flattening of top-level arrays and
//! canonicalisation of JSON message bodies, plus rendering stored canonical
//! lines back out as a single JSON array.
//!
//! The canonical storage form is one message per line: each message minified
//! (insignificant whitespace removed outside strings) with number and string
//! lexemes kept byte-exact, followed by a single `\n`. Because JSON strings
//! cannot contain raw control characters, a minified message never contains
//! `\n`, so the line structure is unambiguous.
//!
//! The validator is a hand-written single pass over the input that keeps an
//! explicit stack instead of recursing, so hostile nesting cannot overflow
//! the thread stack; nesting beyond [`MAX_DEPTH`] is rejected.

use std::fmt;

/// Maximum nesting depth of arrays and objects (the top-level array counts).
pub const MAX_DEPTH: usize = 512;

/// Why a JSON body was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonError {
    /// The body is not a single valid RFC 8259 JSON value.
    Invalid {
        /// Byte offset in the body where the problem was detected.
        position: usize,
        /// Short human-readable description.
        reason: &'static str,
    },
    /// Arrays/objects are nested deeper than [`MAX_DEPTH`].
    TooDeep,
    /// The top-level value is `[]` where at least one message is required.
    EmptyArray,
}

impl JsonError {
    /// Human-readable description suitable for an HTTP 400 response body.
    pub fn message(&self) -> String {
        match self {
            Self::Invalid { position, reason } => {
                format!("invalid JSON at byte {position}: {reason}")
            }
            Self::TooDeep => format!("JSON nesting exceeds the maximum depth of {MAX_DEPTH}"),
            Self::EmptyArray => "empty JSON array is not allowed when appending".to_string(),
        }
    }
}

impl fmt::Display for JsonError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for JsonError {}

/// Validates `body` as exactly one RFC 8259 JSON value (optional surrounding
/// whitespace; a leading UTF-8 BOM is rejected), flattens one level of a
/// top-level array, minifies, and appends each message followed by `b'\n'`
/// to `out`.
///
/// Returns the number of messages appended. A top-level `[]` yields `Ok(0)`
/// when `allow_empty_array` is set and `Err(JsonError::EmptyArray)` otherwise.
/// On error `out` is left exactly as it was.
pub fn normalize_into(
    body: &[u8],
    allow_empty_array: bool,
    out: &mut Vec<u8>,
) -> Result<usize, JsonError> {
    let start = out.len();
    let result = match Normalizing::new(body, out).step(usize::MAX) {
        Some(Ok(0)) if !allow_empty_array => Err(JsonError::EmptyArray),
        Some(outcome) => outcome,
        None => unreachable!("a step without a bound reaches the end"),
    };
    if result.is_err() {
        out.truncate(start);
    }
    result
}

/// A body normalized ahead of its decision: the canonical lines and their
/// count, as `normalize_into` with empty arrays allowed gives them.
pub type Normalized = Result<(Vec<u8>, usize), JsonError>;

/// `body` normalized (empty arrays allowed) into a buffer of its own, or
/// `ahead`, its normalization when the shard made it already.
pub fn normalized(body: &[u8], ahead: Option<Normalized>) -> Normalized {
    ahead.unwrap_or_else(|| {
        let mut out = Vec::with_capacity(body.len() + 1);
        normalize_into(body, true, &mut out).map(|count| (out, count))
    })
}

/// `normalize_into` (empty arrays allowed) in steps, for a body too large
/// to normalize at once: the shard runs its other clients between them.
/// On an error `out` is left as it was.
pub struct Normalizing<'a> {
    parser: Parser<'a>,
    start: usize,
    begun: bool,
}

impl<'a> Normalizing<'a> {
    pub fn new(body: &'a [u8], out: &'a mut Vec<u8>) -> Self {
        let start = out.len();
        Normalizing {
            parser: Parser::new(body, out),
            start,
            begun: false,
        }
    }

    /// Parses on until about `bytes` more of the body are consumed (at a
    /// value's end): `None` while more remains, then the message count or
    /// the error. Not to be called again after that.
    pub fn step(&mut self, bytes: usize) -> Option<Result<usize, JsonError>> {
        let until = self.parser.pos.saturating_add(bytes);
        let outcome = match self.parser.step(until, &mut self.begun) {
            Ok(None) => return None,
            Ok(Some(count)) => Ok(count),
            Err(e) => Err(e),
        };
        if outcome.is_err() {
            self.parser.out.truncate(self.start);
        }
        Some(outcome)
    }
}

/// Renders stored canonical lines (`"m1\nm2\n"`, possibly empty) as one JSON
/// array `"[m1,m2]"` (`"[]"` when empty), appended to `out`.
pub fn render_array(lines: &[u8], out: &mut Vec<u8>) {
    out.reserve(lines.len() + 2);
    out.push(b'[');
    for (i, message) in messages(lines).enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(message);
    }
    out.push(b']');
}

/// Iterates over the messages (without their trailing `\n`) in canonical lines.
pub fn messages(lines: &[u8]) -> impl Iterator<Item = &[u8]> {
    lines
        .split(|&b| b == b'\n')
        .filter(|message| !message.is_empty())
}

/// One open container on the explicit parse stack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Frame {
    Object,
    Array,
    /// The flattened top-level array: its elements are separate messages.
    Root,
}

/// Single-pass validating minifier. Every `Result<bool, _>` step returns
/// `true` when a complete value was just finished and `false` when another
/// value must be parsed next.
struct Parser<'a> {
    src: &'a [u8],
    pos: usize,
    out: &'a mut Vec<u8>,
    stack: Vec<Frame>,
    root_array: bool,
    count: usize,
}

impl<'a> Parser<'a> {
    fn new(src: &'a [u8], out: &'a mut Vec<u8>) -> Self {
        Self {
            src,
            pos: 0,
            out,
            stack: Vec::new(),
            root_array: false,
            count: 0,
        }
    }

    /// Parses until the first value's end at or past `until`, or the
    /// document's end: `Some(count)` once the document is done.
    fn step(&mut self, until: usize, begun: &mut bool) -> Result<Option<usize>, JsonError> {
        if !*begun {
            *begun = true;
            if self.src.starts_with(&[0xEF, 0xBB, 0xBF]) {
                return Err(self.err("byte order mark is not allowed"));
            }
            if self.open_root()? {
                return self.finish().map(Some);
            }
        }
        loop {
            if self.value()? && self.after_value()? {
                return self.finish().map(Some);
            }
            if self.pos >= until {
                return Ok(None);
            }
        }
    }

    /// Consumes a top-level `[` if present. Returns `true` for `[]`.
    fn open_root(&mut self) -> Result<bool, JsonError> {
        self.skip_ws();
        if self.peek() != Some(b'[') {
            return Ok(false);
        }
        self.pos += 1;
        self.root_array = true;
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(true);
        }
        self.push(Frame::Root)?;
        Ok(false)
    }

    fn finish(&mut self) -> Result<usize, JsonError> {
        self.skip_ws();
        if self.pos != self.src.len() {
            return Err(self.err("unexpected data after the JSON value"));
        }
        if !self.root_array {
            self.out.push(b'\n');
            self.count = 1;
        }
        Ok(self.count)
    }

    fn value(&mut self) -> Result<bool, JsonError> {
        self.skip_ws();
        match self.peek() {
            Some(b'{') => self.open(Frame::Object, b'{', b'}'),
            Some(b'[') => self.open(Frame::Array, b'[', b']'),
            Some(b'"') => self.string().map(|()| true),
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            Some(b'-' | b'0'..=b'9') => self.number(),
            Some(_) => Err(self.err("expected a JSON value")),
            None => Err(self.err("unexpected end of input")),
        }
    }

    /// Handles separators and closers after a complete value. Returns `true`
    /// once the whole document is closed, `false` when a value must follow.
    fn after_value(&mut self) -> Result<bool, JsonError> {
        loop {
            self.skip_ws();
            let Some(&frame) = self.stack.last() else {
                return Ok(true);
            };
            let byte = self.peek();
            if frame == Frame::Root {
                self.out.push(b'\n');
                self.count += 1;
            }
            match (frame, byte) {
                (Frame::Object, Some(b',')) => {
                    self.emit(b',');
                    self.skip_ws();
                    self.key()?;
                    return Ok(false);
                }
                (Frame::Array, Some(b',')) => {
                    self.emit(b',');
                    return Ok(false);
                }
                (Frame::Root, Some(b',')) => {
                    self.pos += 1;
                    return Ok(false);
                }
                (Frame::Object, Some(b'}')) | (Frame::Array, Some(b']')) => {
                    self.emit(byte.unwrap_or_default());
                    self.stack.pop();
                }
                (Frame::Root, Some(b']')) => {
                    self.pos += 1;
                    self.stack.pop();
                }
                (Frame::Object, _) => return Err(self.err("expected ',' or '}'")),
                (Frame::Array | Frame::Root, _) => return Err(self.err("expected ',' or ']'")),
            }
        }
    }

    fn open(&mut self, frame: Frame, open: u8, close: u8) -> Result<bool, JsonError> {
        self.push(frame)?;
        self.emit(open);
        self.skip_ws();
        if self.peek() == Some(close) {
            self.emit(close);
            self.stack.pop();
            return Ok(true);
        }
        if frame == Frame::Object {
            self.key()?;
        }
        Ok(false)
    }

    fn push(&mut self, frame: Frame) -> Result<(), JsonError> {
        if self.stack.len() >= MAX_DEPTH {
            return Err(JsonError::TooDeep);
        }
        self.stack.push(frame);
        Ok(())
    }

    /// Parses an object key and the following `:`.
    fn key(&mut self) -> Result<(), JsonError> {
        if self.peek() != Some(b'"') {
            return Err(self.err("expected a string object key"));
        }
        self.string()?;
        self.skip_ws();
        if self.peek() != Some(b':') {
            return Err(self.err("expected ':' after object key"));
        }
        self.emit(b':');
        Ok(())
    }

    /// Validates a string starting at `"` and copies it verbatim.
    fn string(&mut self) -> Result<(), JsonError> {
        let start = self.pos;
        self.pos += 1;
        loop {
            match self.peek() {
                Some(b'"') => break,
                Some(b'\\') => self.escape(start)?,
                Some(0x00..=0x1F) => return Err(self.err("control character in string")),
                Some(_) => self.pos += 1,
                None => return Err(invalid(start, "unterminated string")),
            }
        }
        if let Err(e) = std::str::from_utf8(&self.src[start + 1..self.pos]) {
            return Err(invalid(
                start + 1 + e.valid_up_to(),
                "invalid UTF-8 in string",
            ));
        }
        self.pos += 1;
        self.out.extend_from_slice(&self.src[start..self.pos]);
        Ok(())
    }

    /// Validates one escape sequence starting at `\`.
    fn escape(&mut self, string_start: usize) -> Result<(), JsonError> {
        match self.src.get(self.pos + 1) {
            Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {
                self.pos += 2;
                Ok(())
            }
            Some(b'u') => {
                let hex = self.src.get(self.pos + 2..self.pos + 6);
                if !hex.is_some_and(|h| h.iter().all(u8::is_ascii_hexdigit)) {
                    return Err(self.err("invalid \\u escape"));
                }
                self.pos += 6;
                Ok(())
            }
            Some(_) => Err(self.err("invalid escape sequence")),
            None => Err(invalid(string_start, "unterminated string")),
        }
    }

    /// Validates `-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?` and copies it.
    fn number(&mut self) -> Result<bool, JsonError> {
        let start = self.pos;
        self.eat(b'-');
        match self.peek() {
            Some(b'0') => {
                self.pos += 1;
                if self.peek().is_some_and(|b| b.is_ascii_digit()) {
                    return Err(self.err("leading zeros are not allowed"));
                }
            }
            Some(b'1'..=b'9') => self.digits(),
            _ => return Err(self.err("expected a digit")),
        }
        if self.eat(b'.') {
            self.required_digits("expected a digit after the decimal point")?;
        }
        if self.eat(b'e') || self.eat(b'E') {
            let _ = self.eat(b'+') || self.eat(b'-');
            self.required_digits("expected a digit in the exponent")?;
        }
        self.out.extend_from_slice(&self.src[start..self.pos]);
        Ok(true)
    }

    fn required_digits(&mut self, reason: &'static str) -> Result<(), JsonError> {
        if !self.peek().is_some_and(|b| b.is_ascii_digit()) {
            return Err(self.err(reason));
        }
        self.digits();
        Ok(())
    }

    fn digits(&mut self) {
        while self.peek().is_some_and(|b| b.is_ascii_digit()) {
            self.pos += 1;
        }
    }

    fn literal(&mut self, word: &'static [u8]) -> Result<bool, JsonError> {
        if !self.src[self.pos..].starts_with(word) {
            return Err(self.err("invalid literal"));
        }
        self.pos += word.len();
        self.out.extend_from_slice(word);
        Ok(true)
    }

    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.src.get(self.pos).copied()
    }

    /// Consumes `byte` if it is next.
    fn eat(&mut self, byte: u8) -> bool {
        let found = self.peek() == Some(byte);
        if found {
            self.pos += 1;
        }
        found
    }

    /// Consumes the current byte (known to be `byte`) and writes it out.
    fn emit(&mut self, byte: u8) {
        self.pos += 1;
        self.out.push(byte);
    }

    fn err(&self, reason: &'static str) -> JsonError {
        invalid(self.pos, reason)
    }
}

fn invalid(position: usize, reason: &'static str) -> JsonError {
    JsonError::Invalid { position, reason }
}

#[cfg(test)]
#[path = "json_tests.rs"]
mod tests;
