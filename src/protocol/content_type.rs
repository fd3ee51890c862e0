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

/// Two content types are the same stream type (PROTOCOL.md §5.2 "MUST
/// match") when their essences match and they do not name different
/// charsets: bytes of one would be misread as the other. A charset only one
/// of them gives is no difference (`application/json` and
/// `application/json; charset=utf-8` are one type); other parameters are
/// not compared.
pub fn same(a: &str, b: &str) -> bool {
    essence(a) == essence(b)
        && match (charset(a), charset(b)) {
            (Some(x), Some(y)) => x.eq_ignore_ascii_case(y),
            _ => true,
        }
}

/// Whether two content types are one media type with the same parameters
/// (RFC 9110 §8.3.1: type, subtype, parameter names and the charset's value
/// are case-insensitive; space around the separators is not significant).
pub fn identical(a: &str, b: &str) -> bool {
    canonical(a) == canonical(b)
}

/// `content_type` with the case-insensitive parts lowercased and the space
/// around separators removed.
fn canonical(content_type: &str) -> Vec<String> {
    let mut parts = content_type.split(';').map(str::trim);
    let mut out = vec![parts.next().unwrap_or("").to_ascii_lowercase()];
    for parameter in parts.filter(|p| !p.is_empty()) {
        let (name, value) = parameter.split_once('=').unwrap_or((parameter, ""));
        let name = name.trim().to_ascii_lowercase();
        let value = match name == "charset" {
            true => unquoted(value.trim()).to_ascii_lowercase(),
            false => value.trim().to_string(),
        };
        out.push(format!("{name}={value}"));
    }
    out
}

/// The value of a `charset` parameter, unquoted.
fn charset(content_type: &str) -> Option<&str> {
    content_type.split(';').skip(1).find_map(|parameter| {
        let (name, value) = parameter.split_once('=')?;
        let value = unquoted(value.trim());
        name.trim().eq_ignore_ascii_case("charset").then_some(value)
    })
}

/// A parameter value without the quotes of a quoted-string.
fn unquoted(value: &str) -> &str {
    value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(value)
}

pub fn is_json(content_type: &str) -> bool {
    essence(content_type) == "application/json"
}

/// SSE carries text as UTF-8 and everything else as base64 (PROTOCOL.md
/// §5.8). A text type that names another charset is base64 too: its bytes
/// are not UTF-8, and as text they would arrive replaced (U+FFFD) or held
/// back as the start of a character that never completes.
pub fn is_sse_text(content_type: &str) -> bool {
    let e = essence(content_type);
    let utf8 = charset(content_type).is_none_or(|c| {
        ["utf-8", "utf8", "us-ascii"]
            .iter()
            .any(|u| c.eq_ignore_ascii_case(u))
    });
    e == "application/json" || e.starts_with("text/") && utf8
}

/// `type/subtype` with RFC 9110 token characters on both sides, and
/// parameters of RFC 9110 §8.3.1's grammar: `; name=value`, the name a
/// token, the value a token or a quoted-string.
pub fn is_valid(content_type: &str) -> bool {
    let e = essence(content_type);
    let parameters = content_type.find(';').map_or("", |at| &content_type[at..]);
    matches!(e.split_once('/'), Some((t, s)) if is_token(t) && is_token(s))
        && parameters_valid(parameters)
}

fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(is_tchar)
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// `*( OWS ";" OWS [ parameter ] )` (RFC 9110 §5.6.6).
fn parameters_valid(mut rest: &str) -> bool {
    let ows = [' ', '\t'];
    loop {
        rest = rest.trim_start_matches(ows);
        let Some(after) = rest.strip_prefix(';') else {
            return rest.is_empty();
        };
        rest = after.trim_start_matches(ows);
        if rest.is_empty() || rest.starts_with(';') {
            continue;
        }
        let Some((name, value)) = rest.split_once('=') else {
            return false;
        };
        match (is_token(name), value_len(value)) {
            (true, Some(len)) => rest = &value[len..],
            _ => return false,
        }
    }
}

/// The length of the token or quoted-string that starts `value`.
fn value_len(value: &str) -> Option<usize> {
    let bytes = value.as_bytes();
    if bytes.first() != Some(&b'"') {
        let len = bytes.iter().take_while(|&&b| is_tchar(b)).count();
        return (len > 0).then_some(len);
    }
    let mut i = 1;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => return Some(i + 1),
            b'\\' => i += 2,
            b if b == b'\t' || b >= 0x20 && b != 0x7f => i += 1,
            _ => return None,
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compares_essence_case_insensitively() {
        assert!(same("Application/JSON; charset=utf-8", "application/json"));
        assert!(!same("text/plain", "text/html"));
        assert!(same(
            "text/plain; charset=UTF-8",
            "text/plain;charset=\"utf-8\""
        ));
        assert!(same("text/plain; charset=latin1", "text/plain"));
        assert!(!same(
            "text/plain; charset=utf-8",
            "text/plain; Charset=latin1"
        ));
        assert!(same(
            "text/plain; format=flowed",
            "text/plain; format=fixed"
        ));
        assert!(identical(
            "APPLICATION/Octet-Stream",
            "application/octet-stream"
        ));
        assert!(identical(
            "text/plain;Charset=UTF-8",
            "text/plain; charset=utf-8"
        ));
        assert!(!identical(
            "text/plain; format=Flowed",
            "text/plain; format=flowed"
        ));
        assert!(!identical("text/plain", "text/plain; charset=utf-8"));
        assert!(identical(
            "text/plain; charset=\"utf-8\"",
            "text/plain; charset=UTF-8"
        ));
        assert!(is_json("application/json;charset=UTF-8"));
        assert!(is_sse_text("text/plain") && !is_sse_text("application/octet-stream"));
        assert!(is_valid("application/vnd.x+json") && !is_valid("nonsense") && !is_valid("a/"));
    }

    #[test]
    fn parameters_follow_rfc_9110() {
        let good = [
            "text/plain;charset=utf-8",
            "text/plain ; charset=utf-8 ;",
            "text/plain;;a=b",
            r#"text/plain; title="a; \"quoted\" b"; x=y"#,
        ];
        for ct in good {
            assert!(is_valid(ct), "{ct}");
        }
        let bad = [
            "text/plain; charset",
            "text/plain; =x",
            "text/plain; a=",
            "text/plain; a=b c",
            "text/plain; a b=c",
            r#"text/plain; a="unterminated"#,
            "text/plain; a=\"\u{1}\"",
        ];
        for ct in bad {
            assert!(!is_valid(ct), "{ct}");
        }
    }

    #[test]
    fn sse_carries_as_text_only_what_is_utf_8() {
        assert!(is_sse_text("text/plain"));
        assert!(is_sse_text("Text/Plain; Charset=\"UTF-8\""));
        assert!(is_sse_text("text/csv; charset=us-ascii"));
        assert!(is_sse_text("application/json"));
        assert!(!is_sse_text("text/plain; charset=iso-8859-1"));
        assert!(!is_sse_text("application/octet-stream"));
        assert!(!is_sse_text("application/x-ndjson"));
    }
}
