//! Stream cursors for CDN collapsing (PROTOCOL.md §8.1): the 20-second interval
//! number since 2024-10-09T00:00:00Z, and strictly past the client's cursor
//! when the client already holds the current interval or a later one.

pub const EPOCH_MS: u64 = 1_728_432_000_000;
pub const INTERVAL_MS: u64 = 20_000;
const MAX_JITTER_SECS: u64 = 3600;

/// The cursor a response sends: the current interval, or, when the
/// client's cursor is at or after it, the client's cursor plus a jitter of
/// 1 to 180 intervals (up to an hour) drawn from a hash of that cursor, so
/// every response to the same cursor names the same next one. Cursors are
/// decimal numbers of any length: a client's cursor past `u64::MAX` must
/// still be passed, not replaced by a smaller one.
pub fn next_cursor(client_cursor: Option<&str>, now_ms: u64) -> String {
    // A response that begins and ends at once: the SSE rule at its start.
    let ahead = client_ahead(client_cursor, now_ms);
    sse_cursor(client_cursor, ahead, now_ms)
}

/// Whether the client's cursor is at or after the current interval: then
/// the cursors sent must go past it (§8.1).
pub fn client_ahead(client_cursor: Option<&str>, now_ms: u64) -> bool {
    let current = current_interval(now_ms);
    normalized(client_cursor).is_some_and(|client| decimal_cmp(client, &current).is_ge())
}

/// The cursor of an SSE control event of a response whose client was
/// `ahead` when it began (`client_ahead`): the current interval, or, when
/// ahead, never below the client's jittered cursor, so one response's
/// cursors never go back as the current interval catches up with it
/// (§8.1). A function of the client's cursor, the flag and the time alone:
/// responses sharing a render share its cursor.
pub fn sse_cursor(client_cursor: Option<&str>, ahead: bool, now_ms: u64) -> String {
    let current = current_interval(now_ms);
    match normalized(client_cursor).filter(|_| ahead).map(jittered) {
        Some(later) if decimal_cmp(&later, &current).is_gt() => later,
        _ => current,
    }
}

fn current_interval(now_ms: u64) -> String {
    (now_ms.saturating_sub(EPOCH_MS) / INTERVAL_MS).to_string()
}

/// The client's cursor without leading zeros, if it is a number.
fn normalized(client_cursor: Option<&str>) -> Option<&str> {
    client_cursor
        .filter(|c| !c.is_empty() && c.bytes().all(|b| b.is_ascii_digit()))
        .map(|c| match c.trim_start_matches('0') {
            "" => "0",
            digits => digits,
        })
}

/// `client` plus its jitter: 1 to 180 intervals from a hash of it.
fn jittered(client: &str) -> String {
    let jitter_secs = 1 + xxhash_rust::xxh3::xxh3_64(client.as_bytes()) % MAX_JITTER_SECS;
    decimal_add(client, jitter_secs.div_ceil(INTERVAL_MS / 1000).max(1))
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
        assert_eq!(next_cursor(None, EPOCH_MS + 45_000), "2");
        assert_eq!(next_cursor(Some("junk"), EPOCH_MS + 45_000), "2");
        assert_eq!(next_cursor(Some("1"), EPOCH_MS + 45_000), "2");
    }

    #[test]
    fn never_goes_back_or_repeats_client_cursor() {
        for client in ["1000", "1001", "77777", "0"] {
            let c: u64 = client.parse().unwrap();
            let now = EPOCH_MS + c * INTERVAL_MS;
            let next: u64 = next_cursor(Some(client), now).parse().unwrap();
            assert!(next > c && next <= c + 180, "{next}");
            assert_eq!(
                next_cursor(Some(client), now + 999),
                next.to_string(),
                "same cursor"
            );
        }
    }

    /// One SSE response's cursors, as time passes, never go back: the
    /// jittered cursor holds until the current interval passes it.
    #[test]
    fn sse_cursors_never_go_back_as_time_passes() {
        let client = "1000";
        let start = EPOCH_MS + 1000 * INTERVAL_MS;
        let mut last = 1000;
        for step in 0..400 {
            let now = start + step * INTERVAL_MS;
            let sent: u64 = sse_cursor(Some(client), true, now).parse().unwrap();
            assert!(sent > 1000 && sent >= last, "{sent} after {last}");
            last = sent;
        }
        assert_eq!(
            last,
            1000 + 399,
            "the current interval once past the jitter"
        );
        assert_eq!(sse_cursor(None, false, start), "1000");
        // A client behind the current interval gets the current interval.
        assert!(!client_ahead(Some("999"), start) && client_ahead(Some(client), start));
        assert_eq!(sse_cursor(Some("999"), false, start), "1000");
    }

    #[test]
    fn cursors_past_u64_are_passed_too() {
        let max = u64::MAX.to_string();
        let past: u128 = next_cursor(Some(&max), EPOCH_MS).parse().unwrap();
        assert!(past > u128::from(u64::MAX));
        let huge = next_cursor(Some("99999999999999999999"), EPOCH_MS);
        assert!(huge.len() == 21 && huge.starts_with("1000000000000000000"));
        let nine: u64 = next_cursor(Some("0009"), EPOCH_MS).parse().unwrap();
        assert!(nine > 9 && nine <= 9 + 180);
        assert_ne!(next_cursor(Some("000"), EPOCH_MS), "0");
    }
}
