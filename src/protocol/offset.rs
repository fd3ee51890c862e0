//! Offsets (PROTOCOL.md §6): opaque, fixed-width, lexicographically sortable,
//! URL-safe tokens. rill's token is `{16-digit generation}_{16-digit byte
//! position}`; the generation is 0 today and reserved for layouts that need a
//! second coordinate. Never `-1` or `now`.

pub const WIDTH: usize = 33;
/// The largest byte position a token can carry (16 decimal digits, 10 PB).
pub const MAX_POSITION: u64 = 9_999_999_999_999_999;

/// A parsed `offset` query parameter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OffsetParam {
    /// `-1` or omitted: the start of the stream.
    Start,
    /// `now`: the tail at the time of the request.
    Now,
    /// A byte position in the stream's canonical data.
    At(u64),
}

pub fn format(position: u64) -> String {
    assert!(
        position <= MAX_POSITION,
        "stream position beyond the offset width"
    );
    // Written digit by digit: `format!` took ~160 ns, and every response
    // carries an offset (perf/RESULTS.md, criterion hot paths).
    let mut token = *b"0000000000000000_0000000000000000";
    let mut rest = position;
    for digit in token[17..].iter_mut().rev() {
        *digit = b'0' + (rest % 10) as u8;
        rest /= 10;
    }
    debug_assert_eq!(rest, 0, "MAX_POSITION has 16 digits");
    std::str::from_utf8(&token)
        .expect("ASCII digits")
        .to_owned()
}

/// Parses a token produced by `format`. Anything else is malformed.
pub fn parse_token(text: &str) -> Option<u64> {
    let bytes = text.as_bytes();
    if bytes.len() != WIDTH || bytes[16] != b'_' {
        return None;
    }
    let (generation, position) = (&text[..16], &text[17..]);
    let all_digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if !all_digits(generation) || !all_digits(position) || generation != "0000000000000000" {
        return None;
    }
    position.parse().ok()
}

/// Parses the `offset` query parameter value.
pub fn parse_param(text: &str) -> Option<OffsetParam> {
    match text {
        "-1" => Some(OffsetParam::Start),
        "now" => Some(OffsetParam::Now),
        other => parse_token(other).map(OffsetParam::At),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_sort_like_positions() {
        let positions = [0u64, 1, 9, 10, 255, 1 << 40, MAX_POSITION];
        for pair in positions.windows(2) {
            assert!(format(pair[0]) < format(pair[1]));
        }
        for p in positions {
            assert_eq!(format(p).len(), WIDTH);
            assert_eq!(parse_token(&format(p)), Some(p));
        }
    }

    #[test]
    fn tokens_are_zero_padded_decimal() {
        assert_eq!(format(0), "0000000000000000_0000000000000000");
        assert_eq!(format(1234), "0000000000000000_0000000000001234");
        assert_eq!(format(MAX_POSITION), "0000000000000000_9999999999999999");
        for p in (0..64).map(|shift| (1u64 << shift) % (MAX_POSITION + 1)) {
            assert_eq!(format(p), std::format!("{:016}_{:016}", 0, p));
        }
    }

    #[test]
    fn sentinels_and_malformed() {
        assert_eq!(parse_param("-1"), Some(OffsetParam::Start));
        assert_eq!(parse_param("now"), Some(OffsetParam::Now));
        for bad in [
            "",
            "0",
            "-2",
            "abc",
            "0000000000000000-0000000000000000",
            "1_2",
            "NOW",
            " -1",
        ] {
            assert_eq!(parse_param(bad), None, "{bad:?}");
        }
        assert_eq!(parse_param("0000000000000001_0000000000000000"), None);
    }
}
