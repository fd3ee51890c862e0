//! Content types (PROTOCOL.md §7): normalization for comparison, JSON mode and
//! SSE compatibility.

/// The media type without parameters, lower-cased and trimmed.
pub fn essence(content_type: &str) -> String {
    content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// Two content types are the same stream type when their essences match.
pub fn same(a: &str, b: &str) -> bool {
    essence(a) == essence(b)
}

pub fn is_json(content_type: &str) -> bool {
    essence(content_type) == "application/json"
}

/// SSE carries text as UTF-8 and everything else as base64 (PROTOCOL.md §5.7).
pub fn is_sse_text(content_type: &str) -> bool {
    let e = essence(content_type);
    e.starts_with("text/") || e == "application/json"
}

/// `type/subtype` with RFC 9110 token characters on both sides.
pub fn is_valid(content_type: &str) -> bool {
    let e = essence(content_type);
    let token = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
    };
    matches!(e.split_once('/'), Some((t, s)) if token(t) && token(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_essence_case_insensitively() {
        assert!(same("Application/JSON; charset=utf-8", "application/json"));
        assert!(!same("text/plain", "text/html"));
        assert!(is_json("application/json;charset=UTF-8"));
        assert!(is_sse_text("text/plain") && !is_sse_text("application/octet-stream"));
        assert!(is_valid("application/vnd.x+json") && !is_valid("nonsense") && !is_valid("a/"));
    }
}
