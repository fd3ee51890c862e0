//! A minimal `multipart/mixed` reader (RFC 2046) for the `bootstrap`
//! scenario: the boundary from a Content-Type, and a walk over a body that
//! counts its parts and measures the first one. It checks structure only
//! (delimiters, part headers, the closing delimiter), not part contents.

use memchr::memmem;

/// What a well-formed body held.
#[derive(Debug, PartialEq, Eq)]
pub struct Summary {
    /// Body parts between the first delimiter and the closing one.
    pub parts: usize,
    /// Length of the first part's body (the snapshot in a bootstrap).
    pub first_len: usize,
}

/// The `boundary` parameter of a `multipart/mixed` Content-Type.
pub fn boundary(content_type: &str) -> Option<&str> {
    let mut params = content_type.split(';');
    let mime = params.next()?.trim();
    if !mime.eq_ignore_ascii_case("multipart/mixed") {
        return None;
    }
    params.find_map(|p| {
        let (name, value) = p.trim().split_once('=')?;
        if !name.trim().eq_ignore_ascii_case("boundary") {
            return None;
        }
        let value = value.trim().trim_matches('"');
        (!value.is_empty()).then_some(value)
    })
}

/// Walks `body`: an optional preamble, then parts each introduced by
/// `--{boundary}` and its header block, then `--{boundary}--`.
pub fn parse(body: &[u8], boundary: &str) -> Result<Summary, String> {
    let delimiter = format!("--{boundary}");
    let next_delimiter = format!("\r\n--{boundary}");
    let finder = memmem::Finder::new(next_delimiter.as_bytes());
    let mut at = if body.starts_with(delimiter.as_bytes()) {
        delimiter.len()
    } else {
        finder.find(body).ok_or("no opening delimiter")? + next_delimiter.len()
    };
    let mut summary = Summary {
        parts: 0,
        first_len: 0,
    };
    loop {
        let rest = &body[at..];
        if rest.starts_with(b"--") {
            return if summary.parts == 0 {
                Err("no parts before the closing delimiter".into())
            } else {
                Ok(summary)
            };
        }
        let headers_end = memmem::find(rest, b"\r\n\r\n")
            .ok_or_else(|| format!("part {} has no header block end", summary.parts))?;
        let content = at + headers_end + 4;
        let len = finder
            .find(&body[content..])
            .ok_or_else(|| format!("part {} is not closed (truncated body?)", summary.parts))?;
        if summary.parts == 0 {
            summary.first_len = len;
        }
        summary.parts += 1;
        at = content + len + next_delimiter.len();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(b: &str, parts: &[&str]) -> Vec<u8> {
        let mut out = String::new();
        for p in parts {
            out += &format!("--{b}\r\nContent-Type: text/plain\r\n\r\n{p}\r\n");
        }
        out += &format!("--{b}--\r\n");
        out.into_bytes()
    }

    #[test]
    fn boundary_from_content_type() {
        assert_eq!(boundary("multipart/mixed; boundary=abc"), Some("abc"));
        assert_eq!(
            boundary("Multipart/Mixed;charset=x; Boundary=\"a b\""),
            Some("a b")
        );
        assert_eq!(boundary("multipart/mixed"), None);
        assert_eq!(boundary("text/plain; boundary=abc"), None);
    }

    #[test]
    fn counts_parts_and_first_length() {
        let body = entity("bb", &["snapshot!", "", "{\"i\":1}"]);
        assert_eq!(
            parse(&body, "bb"),
            Ok(Summary {
                parts: 3,
                first_len: 9
            })
        );
    }

    #[test]
    fn preamble_and_headerless_parts() {
        let body = b"preamble\r\n--q\r\n\r\nx\r\n--q\r\n\r\n\r\n--q--";
        assert_eq!(
            parse(body, "q"),
            Ok(Summary {
                parts: 2,
                first_len: 1
            })
        );
    }

    #[test]
    fn truncated_or_empty_bodies_fail() {
        let body = entity("bb", &["a", "b"]);
        let cut = &body[..body.len() - 8];
        assert!(parse(cut, "bb").is_err());
        assert!(parse(b"", "bb").is_err());
        assert!(parse(b"--bb--\r\n", "bb").is_err());
    }
}
