//! Routing (DESIGN.md "URL surfaces"): maps a request path to its target and
//! the key that decides which shard owns it. `/v1/stream/{path}` speaks the
//! upstream dialect; `/{bucket_id}/{stream_id}` the extensions' dialect.

use crate::http::target::percent_decode;

/// The first path segment PROTOCOL.md §6 reserves under `/v1/stream/`:
/// "Servers MUST route the reserved `__ds` prefix before normal stream
/// operations".
pub const RESERVED_SEGMENT: &str = "__ds";
/// Longest accepted `/v1/stream/` path, in bytes after decoding.
pub const MAX_V1_PATH_BYTES: usize = 1024;
/// extensions §1.1: the combined `{bucket_id}/{stream_id}` key limit.
pub const MAX_BUCKET_KEY_BYTES: usize = 122;
/// Prefix of the stream keys of the `/v1/stream/` surface. A bucket key never
/// starts with `/`, so the two key spaces cannot collide.
pub const V1_PREFIX: &str = "/v1/stream/";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Surface {
    /// Upstream PROTOCOL.md dialect: JSON reads are one JSON array.
    V1,
    /// The extensions' base dialect: JSON reads are NDJSON.
    Bucket,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Stream {
        surface: Surface,
        key: String,
        bucket: Option<String>,
    },
    /// A stream sub-resource of the extensions not served yet.
    StreamExtension {
        bucket: String,
        key: String,
        resource: String,
    },
    Bucket {
        bucket: String,
    },
    BucketStreams {
        bucket: String,
    },
    /// Liveness: `/v1/health`, `/v1/health/live`.
    Health,
    /// Readiness: `/v1/health/ready`.
    Ready,
    /// Prometheus text metrics: `/v1/metrics`.
    Metrics,
    NotFound,
    /// `/v1/stream/__ds/...`: PROTOCOL.md §6 reserves the `__ds` first
    /// segment for control APIs (subscriptions, not served yet), so no
    /// application stream may live there.
    Reserved,
    Invalid(&'static str),
}

impl Target {
    /// The key whose owner shard serves this target, if it has one.
    pub fn placement_key(&self) -> Option<&str> {
        match self {
            Target::Stream { key, .. } | Target::StreamExtension { key, .. } => Some(key),
            Target::Bucket { bucket } => Some(bucket),
            _ => None,
        }
    }
}

/// extensions §1.1: `^[a-z0-9_-]{4,64}$`.
pub fn is_valid_bucket_id(id: &str) -> bool {
    (4..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
}

/// extensions §1.1: any UTF-8 up to 122 bytes without `/`, NUL or `..`;
/// nor `.` alone, a path segment URL resolution removes (RFC 3986 §5.2.4:
/// its `Location` and sub-resources would name other paths), which the
/// base's §10.2 path sanitizing rules out as it does on `/v1/stream`.
pub fn is_valid_stream_id(id: &str) -> bool {
    !id.is_empty()
        && id != "."
        && id.len() <= MAX_BUCKET_KEY_BYTES
        && !id.contains('/')
        && !id.contains('\0')
        && !id.contains("..")
}

/// The answer to a path whose bucket breaks §1.1's pattern.
const INVALID_BUCKET: &str = "bucket_id must match ^[a-z0-9_-]{4,64}$";

/// The local stream ID that names a bucket's listing (extensions §1.1).
const LISTING: &str = "streams";

pub fn route(raw_path: &str) -> Target {
    if let Some(rest) = raw_path.strip_prefix(V1_PREFIX) {
        return route_v1_stream(rest);
    }
    if raw_path.starts_with("/v1/") || raw_path == "/v1" {
        return match raw_path {
            "/v1/health" | "/v1/health/live" => Target::Health,
            "/v1/health/ready" => Target::Ready,
            "/v1/metrics" => Target::Metrics,
            // Any other path here is in the bucket `v1`, which §1.1's
            // pattern rules out: the invalid bucket's 400 (§1.2).
            _ => Target::Invalid(INVALID_BUCKET),
        };
    }
    let segments: Vec<&str> = raw_path.trim_start_matches('/').split('/').collect();
    match segments.as_slice() {
        [""] => Target::NotFound,
        [bucket] => bucket_target(bucket, |b| Target::Bucket { bucket: b }),
        [bucket, stream] => bucket_stream(bucket, stream, None),
        // A sub-resource's name is the same path however it is spelled
        // (`%61ttrs` is `attrs`, RFC 3986 §6.2.2.2).
        [bucket, stream, resource] => match percent_decode(resource) {
            // `%2F` is not a segment separator (RFC 3986 §2.2).
            Ok(resource) if !resource.contains('/') => {
                bucket_stream(bucket, stream, Some(&resource))
            }
            _ => Target::NotFound,
        },
        [bucket, stream, kind, offset] => match percent_decode(kind).as_deref() {
            Ok(kind @ ("snapshot" | "retention")) => match percent_decode(offset) {
                Ok(offset) => bucket_stream(bucket, stream, Some(&format!("{kind}/{offset}"))),
                Err(_) => Target::Invalid("offset is not valid percent-encoding"),
            },
            _ => Target::NotFound,
        },
        _ => Target::NotFound,
    }
}

fn route_v1_stream(rest: &str) -> Target {
    let Ok(path) = percent_decode(rest) else {
        return Target::Invalid("stream path is not valid percent-encoded UTF-8");
    };
    if path.is_empty() {
        return Target::NotFound;
    }
    if path.len() > MAX_V1_PATH_BYTES {
        return Target::Invalid("stream path is too long");
    }
    // PROTOCOL.md §10.2 (validate stream URLs): no control characters,
    // which a name could carry into headers, logs and listings.
    if path.chars().any(char::is_control) {
        return Target::Invalid("stream path must not contain control characters");
    }
    // PROTOCOL.md §10.2 (sanitize stream URLs against path traversal): a
    // `.` or `..` segment names a stream no client can reach, since URL
    // resolution (RFC 3986 §5.2.4) removes it, also from `Location`.
    if path
        .split('/')
        .any(|segment| segment == "." || segment == "..")
    {
        return Target::Invalid("stream path must not contain '.' or '..' segments");
    }
    if path.split('/').next() == Some(RESERVED_SEGMENT) {
        return Target::Reserved;
    }
    let key = format!("{V1_PREFIX}{path}");
    Target::Stream {
        surface: Surface::V1,
        key,
        bucket: None,
    }
}

fn bucket_target(raw: &str, make: impl Fn(String) -> Target) -> Target {
    match percent_decode(raw) {
        Ok(bucket) if is_valid_bucket_id(&bucket) => make(bucket),
        _ => Target::Invalid(INVALID_BUCKET),
    }
}

fn bucket_stream(raw_bucket: &str, raw_stream: &str, resource: Option<&str>) -> Target {
    let Ok(bucket) = percent_decode(raw_bucket) else {
        return Target::Invalid("bucket_id is not valid percent-encoding");
    };
    if !is_valid_bucket_id(&bucket) {
        return Target::Invalid(INVALID_BUCKET);
    }
    let Ok(stream) = percent_decode(raw_stream) else {
        return Target::Invalid("stream_id is not valid percent-encoded UTF-8");
    };
    // extensions §1.1: `streams` is the listing's, however it is spelled
    // (`%73treams` is the same path, RFC 3986 §6.2.2.2).
    if stream == LISTING {
        return match resource {
            None => Target::BucketStreams { bucket },
            Some(_) => {
                Target::Invalid("the stream_id `streams` is reserved for the bucket listing")
            }
        };
    }
    let key = format!("{bucket}/{stream}");
    if !is_valid_stream_id(&stream) || key.len() > MAX_BUCKET_KEY_BYTES {
        return Target::Invalid("stream_id is invalid or the bucket/stream key exceeds 122 bytes");
    }
    match resource {
        None => Target::Stream {
            surface: Surface::Bucket,
            key,
            bucket: Some(bucket),
        },
        Some(resource) => Target::StreamExtension {
            bucket,
            key,
            resource: resource.to_string(),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v1_paths_may_contain_slashes() {
        assert_eq!(
            route("/v1/stream/a/b%20c"),
            Target::Stream {
                surface: Surface::V1,
                key: "/v1/stream/a/b c".into(),
                bucket: None
            }
        );
        assert!(matches!(route("/v1/stream/%FF"), Target::Invalid(_)));
        assert_eq!(route("/v1/stream/"), Target::NotFound);
        for dots in ["../../b/s", "./y", "a/./b", "a/..", "%2e%2E/x"] {
            let target = route(&format!("/v1/stream/{dots}"));
            assert!(matches!(target, Target::Invalid(_)), "{dots}");
        }
        assert!(matches!(route("/v1/stream/a..b/.c"), Target::Stream { .. }));
        for control in ["a%00b", "a%0D%0Ab", "%09", "x%7F", "%C2%85"] {
            let target = route(&format!("/v1/stream/{control}"));
            assert!(matches!(target, Target::Invalid(_)), "{control}");
        }
    }

    #[test]
    fn the_ds_segment_is_reserved_on_v1() {
        for path in [
            "__ds",
            "__ds/",
            "__ds/subscriptions/abc",
            "%5F%5Fds/x",
            "__d%73",
        ] {
            assert_eq!(
                route(&format!("/v1/stream/{path}")),
                Target::Reserved,
                "{path}"
            );
        }
        for path in ["a/__ds", "__dsx", "_ds", "__DS"] {
            let target = route(&format!("/v1/stream/{path}"));
            assert!(matches!(target, Target::Stream { .. }), "{path}");
        }
    }

    #[test]
    fn bucket_surface() {
        assert_eq!(
            route("/agents"),
            Target::Bucket {
                bucket: "agents".into()
            }
        );
        assert_eq!(
            route("/agents/streams"),
            Target::BucketStreams {
                bucket: "agents".into()
            }
        );
        assert!(matches!(route("/Agents/x"), Target::Invalid(_)));
        assert!(matches!(route("/abc/x"), Target::Invalid(_)));
        assert!(matches!(route("/agents/a%2Fb"), Target::Invalid(_)));
        assert!(matches!(route("/agents/a..b"), Target::Invalid(_)));
        assert!(matches!(route("/agents/."), Target::Invalid(_)));
        assert!(matches!(route("/agents/%2E"), Target::Invalid(_)));
        assert!(matches!(route("/agents/.a"), Target::Stream { .. }));
        let long = "x".repeat(118);
        assert!(matches!(
            route(&format!("/agents/{long}")),
            Target::Invalid(_)
        ));
        let fits = "x".repeat(115);
        assert!(matches!(
            route(&format!("/agents/{fits}")),
            Target::Stream { .. }
        ));
        assert_eq!(
            route("/agents/%73treams"),
            Target::BucketStreams {
                bucket: "agents".into()
            }
        );
        assert!(matches!(
            route("/agents/streams/bootstrap"),
            Target::Invalid(_)
        ));
        // Sub-resource names however spelled (RFC 3986 §6.2.2.2), but an
        // encoded slash separates nothing.
        for (spelled, plain) in [
            ("/agents/s/%61ttrs", "/agents/s/attrs"),
            ("/agents/s/%62ootstrap", "/agents/s/bootstrap"),
            ("/agents/s/append%2Dbatch", "/agents/s/append-batch"),
            ("/agents/s/%73napshot/5", "/agents/s/snapshot/5"),
            ("/agents/s/%72etention/5", "/agents/s/retention/5"),
        ] {
            assert_eq!(route(spelled), route(plain), "{spelled}");
            assert!(!matches!(route(plain), Target::NotFound), "{plain}");
        }
        assert_eq!(route("/agents/s/snapshot%2F5"), Target::NotFound);
        assert!(matches!(route("/v1"), Target::Invalid(_)));
        assert!(matches!(route("/v1/x"), Target::Invalid(_)));
        assert_eq!(route("/v1/health"), Target::Health);
        assert_eq!(route("/v1/health/live"), Target::Health);
        assert_eq!(route("/v1/health/ready"), Target::Ready);
        assert_eq!(route("/v1/metrics"), Target::Metrics);
    }
}
