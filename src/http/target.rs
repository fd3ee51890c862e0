//! The request target (RFC 9112 §3.2): origin-, absolute- and
//! asterisk-form (an absolute form's authority kept: it stands for the
//! Host, §3.2.2), no fragment, the path and the query pairs percent-decoded
//! (RFC 3986 §2.1) into UTF-8.

use super::parse::{HttpError, Method, valid_host};

/// A request target's parts, raw (still percent-encoded).
pub(super) struct Target<'a> {
    pub path: &'a str,
    pub query: &'a str,
    /// An absolute form's `host[:port]`.
    pub authority: Option<&'a str>,
    /// An absolute form named the `https` scheme.
    pub https: bool,
}

/// Splits the request target into its raw parts.
pub(super) fn split_target(target: &str, method: Method) -> Result<Target<'_>, HttpError> {
    if target == "*" {
        return match method {
            Method::Options => Ok(Target {
                path: "*",
                query: "",
                authority: None,
                https: false,
            }),
            _ => Err(HttpError::Malformed(
                "asterisk-form target is only valid for OPTIONS",
            )),
        };
    }
    let (authority, origin) = origin_form(target)?;
    let https = authority.is_some() && strip_prefix_ci(target, "https://").is_some();
    // RFC 9112 §3.2: no form of request-target has a fragment.
    if origin.contains('#') {
        return Err(HttpError::Malformed("a request target has no fragment"));
    }
    let (path, query) = origin.split_once('?').unwrap_or((origin, ""));
    let path = if path.is_empty() { "/" } else { path };
    Ok(Target {
        path,
        query,
        authority,
        https,
    })
}

/// The authority (absolute form only) and the origin-form part (path and
/// query) of an origin- or absolute-form target.
fn origin_form(target: &str) -> Result<(Option<&str>, &str), HttpError> {
    if target.starts_with('/') {
        return Ok((None, target));
    }
    let rest = strip_prefix_ci(target, "http://")
        .or_else(|| strip_prefix_ci(target, "https://"))
        .ok_or(HttpError::Malformed("request target must be origin-form"))?;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    // RFC 9110 §4.2.1: an http URI with an empty host is invalid; §4.2.4:
    // userinfo in one is an error (`valid_host` has no `@`), and a port
    // needs a host.
    if authority.is_empty() {
        return Err(HttpError::Malformed("absolute-form target without a host"));
    }
    if !valid_host(authority) {
        return Err(HttpError::Malformed(
            "invalid authority in the request target",
        ));
    }
    Ok((Some(authority), &rest[end..]))
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    if head.eq_ignore_ascii_case(prefix) {
        s.get(prefix.len()..)
    } else {
        None
    }
}

/// Splits `a=1&b&c=x%20y` into decoded pairs; empty segments are skipped.
pub(super) fn parse_query(raw: &str) -> Result<Vec<(String, String)>, HttpError> {
    raw.split('&')
        .filter(|seg| !seg.is_empty())
        .map(|seg| {
            let (k, v) = seg.split_once('=').unwrap_or((seg, ""));
            Ok((percent_decode(k)?, percent_decode(v)?))
        })
        .collect()
}

/// Decodes `%XX` escapes; the result must be valid UTF-8. '+' is left as is.
pub fn percent_decode(s: &str) -> Result<String, HttpError> {
    if !s.contains('%') {
        return Ok(s.to_owned());
    }
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b != b'%' {
            out.push(b);
            i += 1;
            continue;
        }
        let hi = bytes.get(i + 1).and_then(|&c| hex_value(c));
        let lo = bytes.get(i + 2).and_then(|&c| hex_value(c));
        match (hi, lo) {
            (Some(hi), Some(lo)) => out.push(hi << 4 | lo),
            _ => return Err(HttpError::Malformed("bad percent-encoding")),
        }
        i += 3;
    }
    String::from_utf8(out).map_err(|_| HttpError::Malformed("invalid UTF-8 after percent-decoding"))
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}
