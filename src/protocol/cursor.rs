//! Stream cursors for CDN collapsing (PROTOCOL.md §8.1): the 20-second interval
//! number since 2024-10-09T00:00:00Z, and strictly past the client's cursor
//! when the client already holds the current interval or a later one.

pub const EPOCH_MS: u64 = 1_728_432_000_000;
pub const INTERVAL_MS: u64 = 20_000;
const MAX_JITTER_SECS: u64 = 3600;

/// `jitter_seed` is any random number; the caller supplies it so this stays pure.
/// Cursors are decimal numbers of any length: a client's cursor past
/// `u64::MAX` must still be passed, not replaced by a smaller one.
pub fn next_cursor(client_cursor: Option<&str>, now_ms: u64, jitter_seed: u64) -> String {
    let current = (now_ms.saturating_sub(EPOCH_MS) / INTERVAL_MS).to_string();
    let client = client_cursor
        .filter(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()))
        .map(|c| match c.trim_start_matches('0') {
            "" => "0",
            digits => digits,
        });
    match client {
        Some(client) if decimal_cmp(client, &current).is_ge() => {
            let jitter_secs = 1 + jitter_seed % MAX_JITTER_SECS;
            let intervals = jitter_secs.div_ceil(INTERVAL_MS / 1000).max(1);
            decimal_add(client, intervals)
        }
        _ => current,
    }
}

/// `cursor`, or `floor` (a cursor sent earlier on the same response) when
/// that is later: an SSE response's cursors never go back (§8.1), though
/// each control event may draw new jitter.
pub fn at_least(cursor: String, floor: Option<&str>) -> String {
    match floor {
        Some(floor) if decimal_cmp(floor, &cursor).is_gt() => floor.to_string(),
        _ => cursor,
    }
}

/// Compares two decimal numbers without leading zeros.
fn decimal_cmp(a: &str, b: &str) -> std::cmp::Ordering {
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

/// `digits + add` in decimal, for numbers of any length.
fn decimal_add(digits: &str, add: u64) -> String {
    let mut out = Vec::with_capacity(digits.len() + 20);
    let mut carry = u128::from(add);
    for &d in digits.as_bytes().iter().rev() {
        let sum = u128::from(d - b'0') + carry;
        out.push(b'0' + (sum % 10) as u8);
        carry = sum / 10;
    }
    while carry > 0 {
        out.push(b'0' + (carry % 10) as u8);
        carry /= 10;
    }
    out.reverse();
    String::from_utf8(out).expect("decimal digits")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_number_from_epoch() {
        assert_eq!(next_cursor(None, EPOCH_MS + 45_000, 7), "2");
        assert_eq!(next_cursor(Some("junk"), EPOCH_MS + 45_000, 7), "2");
        assert_eq!(next_cursor(Some("1"), EPOCH_MS + 45_000, 7), "2");
    }

    #[test]
    fn never_goes_back_or_repeats_client_cursor() {
        for seed in [0, 1, 19, 20, 3599, u64::MAX] {
            let next: u64 = next_cursor(Some("1000"), EPOCH_MS, seed).parse().unwrap();
            assert!(next > 1000 && next <= 1000 + 180, "{next}");
        }
    }

    #[test]
    fn a_later_floor_wins() {
        assert_eq!(at_least("150".into(), Some("170")), "170");
        assert_eq!(at_least("150".into(), Some("99")), "150");
        assert_eq!(at_least("150".into(), None), "150");
        assert_eq!(at_least("1000".into(), Some("999")), "1000");
    }

    #[test]
    fn cursors_past_u64_are_passed_too() {
        let max = u64::MAX.to_string();
        assert_eq!(next_cursor(Some(&max), EPOCH_MS, 0), "18446744073709551616");
        let huge = next_cursor(Some("99999999999999999999"), EPOCH_MS, 0);
        assert_eq!(huge, "100000000000000000000");
        assert_eq!(next_cursor(Some("0009"), EPOCH_MS + 45_000, 0), "10");
        assert_eq!(next_cursor(Some("000"), EPOCH_MS, 0), "1");
    }
}
