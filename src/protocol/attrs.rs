//! Stream attributes (extensions §5): a mutable JSON object beside the
//! stream (`title`, `metadata`; unknown top-level fields dropped), at most
//! 16 KiB, set on create with `Stream-Attrs` or replaced with
//! `PUT {stream}/attrs`, read with `GET {stream}/attrs`. They never touch
//! offsets, ETags, closure or reads, and may change on closed streams.

use serde_json::{Map, Value};

use super::response::{Response, bad_request, not_found};
use super::{Action, Request, content_type};
use crate::http::parse::Method;
use crate::stream::{Command, Table};

/// "The encoded attribute object MUST NOT exceed 16 KiB."
pub const MAX_ATTRS_BYTES: usize = 16 << 10;

/// Validates an attribute document and returns its canonical form: the
/// known fields only, compact JSON; empty for `{}` (no attributes).
pub fn canonical(text: &[u8]) -> Result<Vec<u8>, Response> {
    if text.len() > MAX_ATTRS_BYTES {
        return Err(bad_request("stream attributes exceed 16 KiB"));
    }
    let value = parse(text)?;
    let Value::Object(mut object) = value else {
        return Err(bad_request("stream attributes must be a JSON object"));
    };
    let mut kept = Map::new();
    if let Some(title) = object.remove("title") {
        if !title.is_string() {
            return Err(bad_request("attribute title must be a string"));
        }
        kept.insert("title".into(), title);
    }
    if let Some(metadata) = object.remove("metadata") {
        if !metadata.is_object() {
            return Err(bad_request("attribute metadata must be a JSON object"));
        }
        kept.insert("metadata".into(), metadata);
    }
    if kept.is_empty() {
        return Ok(Vec::new());
    }
    Ok(Value::Object(kept).to_string().into_bytes())
}

/// `text` as one JSON value. The streams' own validator checks it first, so
/// an attribute document is as deep (`json::MAX_DEPTH`) as an appended
/// message may be, and a refusal says what is wrong where; serde_json's own
/// recursion limit (128) is then lifted, the depth being bounded already.
fn parse(text: &[u8]) -> Result<Value, Response> {
    let mut scratch = Vec::new();
    if let Err(e) = super::json::normalize_into(text, true, &mut scratch) {
        return Err(bad_request(&format!("stream attributes: {e}")));
    }
    let mut parser = serde_json::Deserializer::from_slice(text);
    parser.disable_recursion_limit();
    let value = serde::Deserialize::deserialize(&mut parser);
    value.map_err(|_| bad_request("stream attributes are not valid JSON"))
}

/// The `Stream-Attrs` header of a create, canonical (empty when absent).
pub fn from_header(req: &Request) -> Result<Vec<u8>, Response> {
    match req.head.header("stream-attrs") {
        Some(text) => canonical(text.as_bytes()),
        None => Ok(Vec::new()),
    }
}

/// `GET` or `PUT` on `{stream}/attrs`.
pub fn decide(req: &Request, table: &Table) -> Action {
    match req.head.method {
        Method::Get | Method::Head => Action::Reply(read(req, table)),
        Method::Put => replace(req, table).unwrap_or_else(Action::Reply),
        _ => Action::Reply(
            Response::error(405, "method_not_allowed", "use GET, HEAD or PUT on attrs")
                .header("allow", "GET, HEAD, PUT, OPTIONS"),
        ),
    }
}

fn read(req: &Request, table: &Table) -> Response {
    let Some(stream) = table.get_visible(req.key) else {
        return not_found("stream not found");
    };
    let body = if stream.attrs.is_empty() {
        b"{}".to_vec()
    } else {
        stream.attrs.clone()
    };
    Response::new(200)
        .header("content-type", "application/json")
        .header("cache-control", "no-store")
        .with_body(body)
}

fn replace(req: &Request, table: &Table) -> Result<Action, Response> {
    let json = req
        .head
        .header("content-type")
        .is_some_and(content_type::is_json);
    if !json {
        return Err(bad_request(
            "attributes need Content-Type: application/json",
        ));
    }
    let attrs = canonical(req.body)?;
    let stream = table
        .get(req.key)
        .ok_or_else(|| not_found("stream not found"))?;
    if stream.attrs == attrs {
        return Ok(Action::Reply(Response::new(204)));
    }
    let growth = attrs.len().saturating_sub(stream.attrs.len()) as u64;
    if growth > 0 && table.index_refuses(growth) {
        return Err(super::response::index_full());
    }
    let command = Command::SetAttrs {
        key: req.key.to_string(),
        stream_id: stream.id,
        attrs,
    };
    Ok(Action::Commit {
        commands: vec![command],
        reply: Response::new(204),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_known_fields_only() {
        let got = canonical(br#"{"title":"T","extra":1,"metadata":{"a":{"b":2}}}"#).unwrap();
        let value: Value = serde_json::from_slice(&got).unwrap();
        assert_eq!(
            value,
            serde_json::json!({"title": "T", "metadata": {"a": {"b": 2}}})
        );
        assert_eq!(canonical(b"{}").unwrap(), b"");
        assert_eq!(canonical(br#"{"unknown":true}"#).unwrap(), b"");
    }

    /// Metadata numbers come back as sent, digits beyond u64 and f64 too.
    #[test]
    fn keeps_numbers_exact() {
        let sent =
            br#"{"metadata":{"id":123456789012345678901234567890,"x":0.10000000000000000001}}"#;
        assert_eq!(canonical(sent).unwrap(), sent);
    }

    /// As deep as an appended message may be (the object and `metadata`
    /// count): serde_json alone stops at 128.
    #[test]
    fn takes_documents_as_deep_as_messages() {
        let nested = format!("{}1{}", "[".repeat(510), "]".repeat(510));
        let deep = format!(r#"{{"metadata":{{"k":{nested}}},"extra":{nested}}}"#);
        let kept = format!(r#"{{"metadata":{{"k":{nested}}}}}"#);
        assert_eq!(canonical(deep.as_bytes()).unwrap(), kept.as_bytes());
    }

    #[test]
    fn rejects_bad_documents() {
        for bad in [
            &b"[]"[..],
            b"nope",
            br#"{"title":1}"#,
            br#"{"metadata":[]}"#,
        ] {
            assert_eq!(canonical(bad).unwrap_err().status, 400);
        }
        let deeper = format!(
            r#"{{"metadata":{{"k":{}1{}}}}}"#,
            "[".repeat(511),
            "]".repeat(511)
        );
        let refused = canonical(deeper.as_bytes()).unwrap_err();
        assert!(String::from_utf8_lossy(&refused.body).contains("depth"));
        let big = format!(r#"{{"title":"{}"}}"#, "x".repeat(MAX_ATTRS_BYTES));
        assert_eq!(canonical(big.as_bytes()).unwrap_err().status, 400);
    }
}
