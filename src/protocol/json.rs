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
    let result = match Parser::new(body, out).run() {
        Ok(0) if !allow_empty_array => Err(JsonError::EmptyArray),
        other => other,
    };
    if result.is_err() {
        out.truncate(start);
    }
    result
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

    fn run(mut self) -> Result<usize, JsonError> {
        if self.src.starts_with(&[0xEF, 0xBB, 0xBF]) {
            return Err(self.err("byte order mark is not allowed"));
        }
        if self.open_root()? {
            return self.finish();
        }
        loop {
            if self.value()? && self.after_value()? {
                return self.finish();
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

    fn finish(mut self) -> Result<usize, JsonError> {
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
mod tests {
    use super::*;

    fn norm(body: &[u8], allow_empty: bool) -> Result<(usize, Vec<u8>), JsonError> {
        let mut out = Vec::new();
        normalize_into(body, allow_empty, &mut out).map(|n| (n, out))
    }

    fn ok(body: &str) -> (usize, String) {
        let (n, out) = norm(body.as_bytes(), false).expect("valid JSON");
        (n, String::from_utf8(out).expect("utf-8"))
    }

    fn is_invalid(body: &[u8]) -> bool {
        matches!(norm(body, true), Err(JsonError::Invalid { .. }))
    }

    #[test]
    fn flattening_examples() {
        assert_eq!(ok(r#"{"a":1}"#), (1, "{\"a\":1}\n".to_string()));
        assert_eq!(
            ok(r#"[{"a":1},{"b":2}]"#),
            (2, "{\"a\":1}\n{\"b\":2}\n".to_string())
        );
        assert_eq!(ok("[[1,2],[3,4]]"), (2, "[1,2]\n[3,4]\n".to_string()));
        assert_eq!(ok("[[[1,2,3]]]"), (1, "[[1,2,3]]\n".to_string()));
    }

    #[test]
    fn minifies_outside_strings_only() {
        let body = " \r\n\t{ \"a b\" : [ 1 , \" x  y \\t \" , { } , [ ] ] , \"c\":null }\n";
        assert_eq!(
            ok(body),
            (
                1,
                "{\"a b\":[1,\" x  y \\t \",{},[]],\"c\":null}\n".to_string()
            )
        );
        assert_eq!(ok(" [ 1 ,\n 2 ] "), (2, "1\n2\n".to_string()));
    }

    #[test]
    fn lexemes_are_byte_exact() {
        assert_eq!(ok("1.0e+10"), (1, "1.0e+10\n".to_string()));
        assert_eq!(ok("-0"), (1, "-0\n".to_string()));
        assert_eq!(
            ok("[1E-5, 0.000, -12.50e3]"),
            (3, "1E-5\n0.000\n-12.50e3\n".to_string())
        );
        let (_, out) = ok(r#""\u00e9""#);
        assert_eq!(out, "\"\\u00e9\"\n");
        assert_eq!(out.len(), 9);
        assert_eq!(
            ok(r#"["\"\\\/\b\f\n\r\t", "é😀"]"#),
            (2, "\"\\\"\\\\\\/\\b\\f\\n\\r\\t\"\n\"é😀\"\n".to_string())
        );
    }

    #[test]
    fn top_level_scalars_are_one_message() {
        assert_eq!(ok(r#""x""#), (1, "\"x\"\n".to_string()));
        assert_eq!(ok("1"), (1, "1\n".to_string()));
        assert_eq!(ok("null"), (1, "null\n".to_string()));
        assert_eq!(ok(" true "), (1, "true\n".to_string()));
        assert_eq!(ok("[false]"), (1, "false\n".to_string()));
    }

    #[test]
    fn empty_array_depends_on_flag() {
        for body in ["[]", "[ ]", " [\n\t] "] {
            assert_eq!(norm(body.as_bytes(), true), Ok((0, Vec::new())));
            assert_eq!(norm(body.as_bytes(), false), Err(JsonError::EmptyArray));
        }
        assert!(is_invalid(b"[] x"));
        assert_eq!(ok("[[]]"), (1, "[]\n".to_string()));
    }

    #[test]
    fn rejects_invalid_inputs() {
        let cases: &[&[u8]] = &[
            b"",
            b" \n\t\r ",
            b"[1,2,]",
            b"[1,]",
            b"[,1]",
            b"{\"a\":1,}",
            b"{'a':1}",
            b"'x'",
            b"NaN",
            b"-Infinity",
            b"01",
            b"-01",
            b"1.",
            b"1.e5",
            b".5",
            b"1e",
            b"1e+",
            b"+1",
            b"-",
            b"\"abc",
            b"\"abc\\",
            b"\"\\x\"",
            b"\"\\u12G4\"",
            b"\"\\u12\"",
            b"\"a\x01b\"",
            b"\"a\nb\"",
            b"\"\xff\"",
            b"\"\xc3\"",
            b"\"\xed\xa0\x80\"",
            b"{} {}",
            b"1 2",
            b"[1] [2]",
            b"\xEF\xBB\xBF{}",
            b"tru",
            b"truex",
            b"nul",
            b"{\"a\"}",
            b"{\"a\" 1}",
            b"{1:2}",
            b"[1 2]",
            b"[",
            b"{",
            b"]",
            b"}",
            b"[1}",
            b"{\"a\":1]",
        ];
        for case in cases {
            assert!(
                is_invalid(case),
                "accepted {:?}",
                String::from_utf8_lossy(case)
            );
        }
    }

    #[test]
    fn lone_surrogate_escapes_are_accepted() {
        assert_eq!(ok(r#""\ud800""#), (1, "\"\\ud800\"\n".to_string()));
    }

    #[test]
    fn error_positions_and_messages() {
        assert_eq!(
            norm(b"[1,]", true),
            Err(JsonError::Invalid {
                position: 3,
                reason: "expected a JSON value"
            })
        );
        let message = norm(b"01", true).unwrap_err().message();
        assert!(message.contains("byte 1"), "{message}");
        assert!(!JsonError::TooDeep.message().is_empty());
        assert!(!JsonError::EmptyArray.to_string().is_empty());
    }

    #[test]
    fn deep_nesting_is_rejected_without_crashing() {
        let deep = "[".repeat(10_000);
        assert_eq!(norm(deep.as_bytes(), true), Err(JsonError::TooDeep));
        let closed = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert_eq!(norm(closed.as_bytes(), true), Err(JsonError::TooDeep));
        let objects = "{\"a\":".repeat(10_000);
        assert_eq!(norm(objects.as_bytes(), true), Err(JsonError::TooDeep));
    }

    #[test]
    fn depth_limit_is_exact() {
        let at_limit = format!("{}{}", "[".repeat(MAX_DEPTH), "]".repeat(MAX_DEPTH));
        assert!(norm(at_limit.as_bytes(), true).is_ok());
        let over = format!("{}{}", "[".repeat(MAX_DEPTH + 1), "]".repeat(MAX_DEPTH + 1));
        assert_eq!(norm(over.as_bytes(), true), Err(JsonError::TooDeep));
    }

    #[test]
    fn errors_leave_out_untouched() {
        let mut out = b"prefix\n".to_vec();
        assert!(normalize_into(b"[1, 2, {\"a\": tru}]", true, &mut out).is_err());
        assert_eq!(out, b"prefix\n");
        assert_eq!(
            normalize_into(b"[]", false, &mut out),
            Err(JsonError::EmptyArray)
        );
        assert_eq!(out, b"prefix\n");
        assert_eq!(normalize_into(b"[1, 2]", false, &mut out), Ok(2));
        assert_eq!(out, b"prefix\n1\n2\n");
    }

    #[test]
    fn render_array_and_messages() {
        let mut out = Vec::new();
        render_array(b"", &mut out);
        assert_eq!(out, b"[]");
        out.clear();
        render_array(b"{\"a\":1}\n[1,2]\n", &mut out);
        assert_eq!(out, b"[{\"a\":1},[1,2]]");
        let all: Vec<&[u8]> = messages(b"1\n\"x\"\n").collect();
        assert_eq!(all, vec![&b"1"[..], &b"\"x\""[..]]);
        assert_eq!(messages(b"").count(), 0);
    }

    /// Tiny deterministic PRNG (xorshift64*) for the property-style tests.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn below(&mut self, n: u64) -> usize {
            usize::try_from(self.next() % n).unwrap_or(0)
        }

        fn pick<'b>(&mut self, items: &[&'b str]) -> &'b str {
            items[self.below(items.len() as u64)]
        }
    }

    fn ws(rng: &mut Rng, s: &mut String) {
        let w = rng.pick(&["", "", " ", "\n", "\t ", "\r\n  "]);
        s.push_str(w);
    }

    fn gen_value(rng: &mut Rng, depth: usize, s: &mut String) {
        let kind = if depth > 4 {
            rng.below(3)
        } else {
            rng.below(5)
        };
        match kind {
            0 => s.push_str(rng.pick(&["0", "-0", "1.0e+10", "12", "-3.25E-2", "7e0"])),
            1 => s.push_str(rng.pick(&[
                "\"\"",
                "\" a  b \"",
                "\"\\u00e9\\n\"",
                "\"é😀\"",
                "\"\\ud800\"",
            ])),
            2 => s.push_str(rng.pick(&["true", "false", "null"])),
            3 => gen_container(rng, depth, s, false),
            _ => gen_container(rng, depth, s, true),
        }
    }

    fn gen_container(rng: &mut Rng, depth: usize, s: &mut String, object: bool) {
        s.push(if object { '{' } else { '[' });
        for i in 0..rng.below(4) {
            if i > 0 {
                ws(rng, s);
                s.push(',');
            }
            ws(rng, s);
            if object {
                s.push_str(rng.pick(&["\"k\"", "\"a b\"", "\"\\\"\""]));
                ws(rng, s);
                s.push(':');
                ws(rng, s);
            }
            gen_value(rng, depth + 1, s);
        }
        ws(rng, s);
        s.push(if object { '}' } else { ']' });
    }

    fn gen_document(rng: &mut Rng) -> String {
        let mut s = String::new();
        ws(rng, &mut s);
        gen_value(rng, 0, &mut s);
        ws(rng, &mut s);
        s
    }

    #[test]
    fn normalizing_normalized_output_is_identity() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for _ in 0..2_000 {
            let doc = gen_document(&mut rng);
            let (count, lines) = norm(doc.as_bytes(), true).expect("generated JSON is valid");
            assert_eq!(messages(&lines).count(), count);
            let mut array = Vec::new();
            render_array(&lines, &mut array);
            let (again_count, again) = norm(&array, true).expect("rendered array is valid");
            assert_eq!((again_count, &again), (count, &lines), "doc {doc:?}");
            for message in messages(&lines) {
                if message.first() != Some(&b'[') {
                    let mut line = message.to_vec();
                    line.push(b'\n');
                    assert_eq!(norm(message, true), Ok((1, line)));
                }
            }
        }
    }

    #[test]
    fn mutated_inputs_never_panic_and_keep_out_intact() {
        let mut rng = Rng(0x0123_4567_89AB_CDEF);
        let alphabet = b"[]{}\",:\\u0123456789eE+-. \ntrufalsn\xff\xc3\x01";
        for _ in 0..5_000 {
            let mut bytes = gen_document(&mut rng).into_bytes();
            for _ in 0..=rng.below(3) {
                let at = rng.below(bytes.len() as u64 + 1);
                match rng.below(3) {
                    0 if at < bytes.len() => {
                        bytes.remove(at);
                    }
                    1 if at < bytes.len() => bytes[at] = alphabet[rng.below(alphabet.len() as u64)],
                    _ => bytes.insert(at, alphabet[rng.below(alphabet.len() as u64)]),
                }
            }
            let mut out = b"keep".to_vec();
            if normalize_into(&bytes, rng.below(2) == 0, &mut out).is_err() {
                assert_eq!(out, b"keep");
            }
        }
    }
}
