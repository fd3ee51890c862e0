//! Chunked transfer decoding (RFC 9112 §7.1) for request bodies.
//!
//! Owns: an incremental, resumable state machine that turns
//! `Transfer-Encoding: chunked` bytes into body bytes. Input may be split at
//! any byte boundary; every framing line ends in CRLF (RFC 9112 allows a bare
//! LF only in the start line and header fields: accepting one here is the
//! "funky chunks" request-smuggling class); chunk extensions are skipped but
//! bounded per line and per body (64 KiB beyond its data); trailer fields
//! are skipped once they show a name and a colon, bounded; the decoded size
//! is capped.

use crate::http::parse::{HttpError, is_tchar};

/// Maximum hex digits in a chunk-size (16 digits always fit in a u64).
const MAX_SIZE_DIGITS: u8 = 16;
/// Maximum bytes of chunk extensions on one chunk-size line.
const MAX_EXT_BYTES: usize = 4096;
/// Chunk extension bytes a body may carry beyond its data's size: a long
/// upload may tag every chunk, a few bytes of data cannot come wrapped in
/// megabytes of extensions.
const MAX_BODY_EXT_BYTES: usize = 64 << 10;
/// Maximum bytes of the whole trailer section (including line endings)
/// unless the server sets its own (`--max-head-bytes`: trailers are fields).
const MAX_TRAILER_BYTES: usize = 8192;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Expecting the first hex digit of a chunk-size.
    SizeStart,
    /// Reading further hex digits of a chunk-size.
    Size,
    /// Whitespace after the chunk-size; only ';' or more whitespace may follow.
    SizeWs,
    /// Inside chunk extensions, skipping to the end of the line.
    Ext,
    /// Saw CR ending the chunk-size line; expecting LF.
    SizeLf,
    /// Copying chunk data; `remaining` bytes left in this chunk.
    Data,
    /// Expecting the CRLF (or LF) that ends chunk data.
    DataCr,
    /// Saw CR after chunk data; expecting LF.
    DataLf,
    /// At the start of a trailer line (or the final empty line).
    TrailerStart,
    /// Inside a trailer field line, skipping to its end.
    Trailer,
    /// Saw CR ending a trailer line; expecting LF.
    TrailerLf,
    /// Saw CR of the final empty line; expecting LF.
    FinalLf,
    /// The whole body, including trailers, has been consumed.
    Done,
}

/// Incremental decoder for a chunked request body.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    size: u64,
    digits: u8,
    remaining: u64,
    ext_bytes: usize,
    body_ext_bytes: usize,
    trailer_bytes: usize,
    /// Whether the current trailer line's name has ended in its colon.
    trailer_colon: bool,
    total: u64,
    max_body_bytes: u64,
    max_trailer_bytes: usize,
    error: Option<HttpError>,
}

impl ChunkedDecoder {
    /// Creates a decoder that rejects bodies decoding to more than `max_body_bytes`.
    pub fn new(max_body_bytes: u64) -> Self {
        ChunkedDecoder {
            state: State::SizeStart,
            size: 0,
            digits: 0,
            remaining: 0,
            ext_bytes: 0,
            body_ext_bytes: 0,
            trailer_bytes: 0,
            trailer_colon: false,
            total: 0,
            max_body_bytes,
            max_trailer_bytes: MAX_TRAILER_BYTES,
            error: None,
        }
    }

    /// Bounds the trailer section at `bytes` (431 past it, as a head).
    pub fn with_max_trailer_bytes(mut self, bytes: usize) -> Self {
        self.max_trailer_bytes = bytes;
        self
    }

    /// Consumes bytes from `input`, appends decoded data to `out`. Returns how many input bytes were consumed.
    /// After `is_done()`, no more input is consumed (bytes after the body belong to the next pipelined request).
    /// Once an error has been returned, every later call returns the same error.
    pub fn decode(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, HttpError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        let mut pos = 0;
        while self.state != State::Done {
            let rest = input.get(pos..).unwrap_or_default();
            if rest.is_empty() {
                break;
            }
            match self.step(rest, out) {
                Ok(n) => pos += n,
                Err(e) => {
                    self.error = Some(e.clone());
                    return Err(e);
                }
            }
        }
        Ok(pos)
    }

    /// Whether the terminating last-chunk and trailer section have been consumed.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Advances over a non-empty `rest`; returns bytes consumed (at least 1).
    fn step(&mut self, rest: &[u8], out: &mut Vec<u8>) -> Result<usize, HttpError> {
        match self.state {
            State::Data => Ok(self.copy_data(rest, out)),
            State::Ext | State::Trailer => self.skip_line(rest),
            _ => match rest.first() {
                Some(&b) => self.byte(b).map(|()| 1),
                None => Ok(0),
            },
        }
    }

    fn copy_data(&mut self, rest: &[u8], out: &mut Vec<u8>) -> usize {
        let n = usize::try_from(self.remaining)
            .unwrap_or(usize::MAX)
            .min(rest.len());
        out.extend_from_slice(rest.get(..n).unwrap_or(rest));
        self.remaining -= n as u64;
        if self.remaining == 0 {
            self.state = State::DataCr;
        }
        n
    }

    /// Skips extension or trailer bytes up to and including the CR that
    /// ends the line.
    fn skip_line(&mut self, rest: &[u8]) -> Result<usize, HttpError> {
        let end = memchr::memchr2(b'\r', b'\n', rest);
        let consumed = end.map_or(rest.len(), |i| i + 1);
        self.count_line_bytes(consumed)?;
        if self.state == State::Trailer {
            self.check_trailer_name(&rest[..end.unwrap_or(rest.len())])?;
        }
        match end.and_then(|i| rest.get(i)) {
            Some(b'\r') if self.state == State::Trailer && !self.trailer_colon => {
                Err(HttpError::Malformed("trailer field without a colon"))
            }
            Some(b'\r') => {
                self.state = self.line_cr_state();
                Ok(consumed)
            }
            Some(_) => Err(bare_lf()),
            None => Ok(consumed),
        }
    }

    /// A trailer field's name, up to its colon, is a token (RFC 9110 §5.1).
    fn check_trailer_name(&mut self, bytes: &[u8]) -> Result<(), HttpError> {
        if self.trailer_colon {
            return Ok(());
        }
        let name_end = memchr::memchr(b':', bytes);
        let name = &bytes[..name_end.unwrap_or(bytes.len())];
        if !name.iter().all(|&b| is_tchar(b)) {
            return Err(HttpError::Malformed("invalid trailer field name"));
        }
        self.trailer_colon = name_end.is_some();
        Ok(())
    }

    fn count_line_bytes(&mut self, n: usize) -> Result<(), HttpError> {
        if self.state == State::Ext {
            self.ext_bytes = self.ext_bytes.saturating_add(n);
            self.body_ext_bytes = self.body_ext_bytes.saturating_add(n);
            let body_allows = (MAX_BODY_EXT_BYTES as u64).saturating_add(self.total);
            if self.ext_bytes > MAX_EXT_BYTES || self.body_ext_bytes as u64 > body_allows {
                return Err(HttpError::Malformed("chunk extensions too long"));
            }
            return Ok(());
        }
        self.count_trailer_bytes(n)
    }

    fn count_trailer_bytes(&mut self, n: usize) -> Result<(), HttpError> {
        self.trailer_bytes = self.trailer_bytes.saturating_add(n);
        if self.trailer_bytes > self.max_trailer_bytes {
            return Err(HttpError::TrailersTooLarge);
        }
        Ok(())
    }

    /// State after a CR ends the current extension or trailer line.
    fn line_cr_state(&self) -> State {
        if self.state == State::Ext {
            State::SizeLf
        } else {
            State::TrailerLf
        }
    }

    fn byte(&mut self, b: u8) -> Result<(), HttpError> {
        match self.state {
            State::SizeStart => self.size_start(b),
            State::Size => self.size_digit(b),
            State::SizeWs => self.size_ws(b),
            State::SizeLf => {
                expect_lf(b, "expected LF after chunk size").and_then(|()| self.end_size_line())
            }
            State::DataCr => self.data_end(b),
            State::DataLf => {
                expect_lf(b, "expected LF after chunk data").map(|()| self.state = State::SizeStart)
            }
            State::TrailerStart => self.trailer_start(b),
            State::TrailerLf => expect_lf(b, "expected LF after trailer field")
                .map(|()| self.state = State::TrailerStart),
            State::FinalLf => {
                expect_lf(b, "expected LF after trailers").map(|()| self.state = State::Done)
            }
            State::Data | State::Ext | State::Trailer | State::Done => Ok(()),
        }
    }

    fn size_start(&mut self, b: u8) -> Result<(), HttpError> {
        let digit = hex_digit(b).ok_or(HttpError::Malformed("invalid chunk size"))?;
        self.size = u64::from(digit);
        self.digits = 1;
        self.ext_bytes = 0;
        self.state = State::Size;
        Ok(())
    }

    fn size_digit(&mut self, b: u8) -> Result<(), HttpError> {
        if let Some(digit) = hex_digit(b) {
            if self.digits >= MAX_SIZE_DIGITS {
                return Err(HttpError::Malformed("chunk size too long"));
            }
            self.digits += 1;
            self.size = (self.size << 4) | u64::from(digit);
            return Ok(());
        }
        self.state = match b {
            b';' => State::Ext,
            b' ' | b'\t' => State::SizeWs,
            b'\r' => State::SizeLf,
            b'\n' => return Err(bare_lf()),
            _ => return Err(HttpError::Malformed("invalid chunk size")),
        };
        Ok(())
    }

    fn size_ws(&mut self, b: u8) -> Result<(), HttpError> {
        match b {
            b' ' | b'\t' => Ok(()),
            b';' => {
                self.state = State::Ext;
                Ok(())
            }
            _ => Err(HttpError::Malformed("invalid chunk extension")),
        }
    }

    /// The chunk-size line is complete: start data or the trailer section.
    fn end_size_line(&mut self) -> Result<(), HttpError> {
        if self.size == 0 {
            self.state = State::TrailerStart;
            return Ok(());
        }
        let total = self
            .total
            .checked_add(self.size)
            .filter(|&t| t <= self.max_body_bytes)
            .ok_or(HttpError::BodyTooLarge)?;
        self.total = total;
        self.remaining = self.size;
        self.state = State::Data;
        Ok(())
    }

    fn data_end(&mut self, b: u8) -> Result<(), HttpError> {
        self.state = match b {
            b'\r' => State::DataLf,
            b'\n' => return Err(bare_lf()),
            _ => return Err(HttpError::Malformed("missing CRLF after chunk data")),
        };
        Ok(())
    }

    fn trailer_start(&mut self, b: u8) -> Result<(), HttpError> {
        self.state = match b {
            b'\r' => State::FinalLf,
            b'\n' => return Err(bare_lf()),
            // A name's first byte; obs-fold (a leading space) is refused.
            _ if is_tchar(b) => {
                self.count_trailer_bytes(1)?;
                self.trailer_colon = false;
                State::Trailer
            }
            _ => return Err(HttpError::Malformed("invalid trailer field name")),
        };
        Ok(())
    }
}

fn bare_lf() -> HttpError {
    HttpError::Malformed("chunked framing lines end in CRLF")
}

fn expect_lf(b: u8, what: &'static str) -> Result<(), HttpError> {
    if b == b'\n' {
        Ok(())
    } else {
        Err(HttpError::Malformed(what))
    }
}

fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: u64 = 1 << 20;

    /// Decodes `input` in one call; returns (consumed, output, done).
    fn whole(input: &[u8]) -> Result<(usize, Vec<u8>, bool), HttpError> {
        let mut d = ChunkedDecoder::new(MAX);
        let mut out = Vec::new();
        let n = d.decode(input, &mut out)?;
        Ok((n, out, d.is_done()))
    }

    /// Decodes `input` fed in pieces of the given lengths (last piece takes the rest).
    fn pieces(input: &[u8], splits: &[usize]) -> Result<(usize, Vec<u8>, bool), HttpError> {
        let mut d = ChunkedDecoder::new(MAX);
        let mut out = Vec::new();
        let mut consumed = 0;
        let mut start: usize = 0;
        for &len in splits.iter().chain(std::iter::once(&usize::MAX)) {
            let end = start.saturating_add(len).min(input.len());
            let piece = &input[start..end];
            let n = d.decode(piece, &mut out)?;
            assert!(n <= piece.len());
            consumed += n;
            start = end;
            if n < piece.len() {
                assert!(d.is_done(), "stopped early without being done");
                break;
            }
        }
        Ok((consumed, out, d.is_done()))
    }

    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1);
            self.0 >> 33
        }
    }

    const SAMPLES: &[&[u8]] = &[
        b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        b"5;ext=1;q=\"x\"\r\nhello\r\n0;last\r\nTrailer: a\r\nOther: b\r\n\r\n",
        b"A\r\nabcdefghij\r\n0\r\n\r\n",
        b"0000000000000003\r\nabc\r\n0\r\n\r\n",
        b"3 ;x\r\nabc\r\n0\r\n\r\n",
        b"1a\r\nabcdefghijklmnopqrstuvwxyz\r\n0\r\nX: y\r\nZ:\r\n\r\n",
        b"0\r\n\r\n",
    ];

    #[test]
    fn decodes_whole_buffers() {
        let (n, out, done) = whole(SAMPLES[0]).unwrap();
        assert_eq!(
            (n, out.as_slice(), done),
            (SAMPLES[0].len(), &b"hello world"[..], true)
        );
        assert_eq!(whole(SAMPLES[1]).unwrap().1, b"hello");
        assert_eq!(whole(SAMPLES[2]).unwrap().1, b"abcdefghij");
        assert_eq!(whole(SAMPLES[3]).unwrap().1, b"abc");
        assert_eq!(whole(SAMPLES[4]).unwrap().1, b"abc");
        assert_eq!(whole(SAMPLES[5]).unwrap().1, b"abcdefghijklmnopqrstuvwxyz");
        assert_eq!(whole(SAMPLES[6]).unwrap(), (5, Vec::new(), true));
    }

    #[test]
    fn byte_at_a_time_matches_whole() {
        for sample in SAMPLES {
            let expected = whole(sample).unwrap();
            let ones = vec![1; sample.len()];
            assert_eq!(pieces(sample, &ones).unwrap(), expected, "{sample:?}");
        }
    }

    #[test]
    fn random_splits_match_whole() {
        let mut rng = Lcg(7);
        for sample in SAMPLES {
            let expected = whole(sample).unwrap();
            for _ in 0..200 {
                let splits: Vec<usize> = (0..sample.len())
                    .map(|_| (rng.next() % 6) as usize)
                    .collect();
                assert_eq!(pieces(sample, &splits).unwrap(), expected);
            }
        }
    }

    #[test]
    fn every_two_way_split_matches_whole() {
        for sample in SAMPLES {
            let expected = whole(sample).unwrap();
            for i in 0..=sample.len() {
                assert_eq!(pieces(sample, &[i]).unwrap(), expected);
            }
        }
    }

    #[test]
    fn stops_at_end_of_body_for_pipelining() {
        let mut input = b"3\r\nabc\r\n0\r\n\r\n".to_vec();
        let body_len = input.len();
        input.extend_from_slice(b"GET / HTTP/1.1\r\n\r\n");
        let (n, out, done) = whole(&input).unwrap();
        assert_eq!((n, out.as_slice(), done), (body_len, &b"abc"[..], true));
        let mut d = ChunkedDecoder::new(MAX);
        let mut out = Vec::new();
        assert_eq!(d.decode(&input, &mut out), Ok(body_len));
        assert_eq!(d.decode(b"more", &mut out), Ok(0));
        assert_eq!(out, b"abc");
    }

    #[test]
    fn truncated_input_is_not_done() {
        let full = SAMPLES[1];
        for i in 0..full.len() {
            let (n, _, done) = whole(&full[..i]).unwrap();
            assert_eq!(n, i);
            assert!(!done, "prefix {i} reported done");
        }
        assert!(whole(&[]).map(|r| !r.2).unwrap());
    }

    #[test]
    fn malformed_inputs() {
        for bad in [
            &b"g\r\n"[..],
            b"\r\n",
            b";ext\r\n",
            b"-1\r\n",
            b"+1\r\n",
            b"0x5\r\n",
            b"5\rX",
            b"5 x\r\n",
            b"3\r\nabcX\r\n",
            b"3\r\nabc\rX",
            b"3\r\nabc\r\n0\r\nX: y\rZ",
            b"0\r\n\rX",
            b"3;a\rb\r\n",
            b"11111111111111111\r\n",
            // Bare LFs: after the size, the data, an extension, the last
            // chunk and a trailer (RFC 9112 §7.1 frames with CRLF).
            b"3\nabc\r\n",
            b"3\r\nabc\n0\r\n\r\n",
            b"3;x\nabc\r\n",
            b"0\r\n\n",
            b"0\r\nX: y\n\r\n",
            // Trailer lines: a name and a colon, no obs-fold.
            b"0\r\nnocolon\r\n\r\n",
            b"0\r\n: v\r\n\r\n",
            b"0\r\nX: y\r\n folded\r\n\r\n",
            b"0\r\nX y: v\r\n\r\n",
        ] {
            assert!(
                matches!(whole(bad), Err(HttpError::Malformed(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn size_digit_limit_and_overflow() {
        let mut d = ChunkedDecoder::new(u64::MAX);
        let mut out = Vec::new();
        assert!(d.decode(b"ffffffffffffffff\r\nab", &mut out).is_ok());
        assert_eq!(out, b"ab");
        let mut d = ChunkedDecoder::new(u64::MAX);
        let err = d.decode(b"1ffffffffffffffff\r\n", &mut Vec::new());
        assert_eq!(err, Err(HttpError::Malformed("chunk size too long")));
        let mut d = ChunkedDecoder::new(u64::MAX);
        let mut out = Vec::new();
        let first = b"ffffffffffffffff\r\n";
        assert!(d.decode(first, &mut out).is_ok());
        assert!(out.is_empty());
    }

    #[test]
    fn body_too_large() {
        let mut d = ChunkedDecoder::new(5);
        let mut out = Vec::new();
        assert_eq!(d.decode(b"5\r\nhello\r\n", &mut out), Ok(10));
        assert_eq!(d.decode(b"1\r\n", &mut out), Err(HttpError::BodyTooLarge));
        assert_eq!(out, b"hello");
        // errors are sticky
        assert_eq!(
            d.decode(b"0\r\n\r\n", &mut out),
            Err(HttpError::BodyTooLarge)
        );
        let mut d = ChunkedDecoder::new(5);
        assert_eq!(
            d.decode(b"6\r\n", &mut Vec::new()),
            Err(HttpError::BodyTooLarge)
        );
        let mut d = ChunkedDecoder::new(5);
        assert!(
            d.decode(b"5\r\nhello\r\n0\r\n\r\n", &mut Vec::new())
                .is_ok()
        );
        assert!(d.is_done());
    }

    #[test]
    fn trailers_are_bounded() {
        let mut input = b"0\r\n".to_vec();
        for _ in 0..1000 {
            input.extend_from_slice(b"X-Trailer: value\r\n");
        }
        input.extend_from_slice(b"\r\n");
        assert_eq!(whole(&input), Err(HttpError::TrailersTooLarge));
        let mut short_lines = b"0\r\n".to_vec();
        for _ in 0..5000 {
            short_lines.extend_from_slice(b"x:\r\n");
        }
        assert_eq!(whole(&short_lines), Err(HttpError::TrailersTooLarge));
        let mut ok = b"0\r\na:".to_vec();
        ok.extend_from_slice(&[b'a'; 7998]);
        ok.extend_from_slice(b"\r\n\r\n");
        assert!(whole(&ok).map(|r| r.2).unwrap());
        let mut tight = ChunkedDecoder::new(MAX).with_max_trailer_bytes(64);
        let mut out = Vec::new();
        let long = format!("0\r\na:{}\r\n\r\n", "a".repeat(64));
        assert_eq!(
            tight.decode(long.as_bytes(), &mut out),
            Err(HttpError::TrailersTooLarge)
        );
        assert_eq!(HttpError::TrailersTooLarge.status(), 431);
    }

    #[test]
    fn extensions_are_bounded() {
        let mut input = b"1;".to_vec();
        input.extend_from_slice(&[b'e'; MAX_EXT_BYTES + 1]);
        input.extend_from_slice(b"\r\nx\r\n0\r\n\r\n");
        assert_eq!(
            whole(&input),
            Err(HttpError::Malformed("chunk extensions too long"))
        );
        // the limit is per line
        let ok = tagged(3, &[b'e'; 3000], b"x");
        assert_eq!(whole(&ok).unwrap().1, b"xxx");
        // and per body, beyond what data the chunks carry: a long upload may
        // tag every chunk, many short lines around little data add up
        let long = tagged(5000, b"tag=0123456789", &[b'd'; 0x400]);
        let mut d = ChunkedDecoder::new(u64::MAX);
        assert!(
            d.decode(&long, &mut Vec::new()).is_ok() && d.is_done(),
            "tags on a long body"
        );
        let many = tagged(MAX_BODY_EXT_BYTES / 1000 + 1, &[b'e'; 1000], b"x");
        assert_eq!(
            whole(&many),
            Err(HttpError::Malformed("chunk extensions too long"))
        );
    }

    /// `n` chunks of `data`, each with the extension `;{ext}`, then the end.
    fn tagged(n: usize, ext: &[u8], data: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        for _ in 0..n {
            body.extend_from_slice(format!("{:x};", data.len()).as_bytes());
            body.extend_from_slice(ext);
            body.extend_from_slice(b"\r\n");
            body.extend_from_slice(data);
            body.extend_from_slice(b"\r\n");
        }
        body.extend_from_slice(b"0\r\n\r\n");
        body
    }

    #[test]
    fn random_garbage_never_panics() {
        let mut rng = Lcg(99);
        let alphabet = b"0123456789abcdefABCDEFxyz;= \t\r\n\x00\xff";
        for _ in 0..3000 {
            let len = (rng.next() % 64) as usize;
            let buf: Vec<u8> = (0..len)
                .map(|_| alphabet[(rng.next() as usize) % alphabet.len()])
                .collect();
            let mut d = ChunkedDecoder::new(32);
            let mut out = Vec::new();
            let mut start = 0;
            while start < buf.len() {
                let end = (start + 1 + (rng.next() % 5) as usize).min(buf.len());
                match d.decode(&buf[start..end], &mut out) {
                    Ok(n) if n == end - start => start = end,
                    _ => break,
                }
            }
            assert!(out.len() <= 32);
        }
    }
}
