//! A request head's header fields (RFC 9112 §5): names lower-cased, values
//! trimmed of surrounding whitespace, kept in arrival order in one string
//! with the end of each name and value beside it, so that a head costs two
//! allocations however many fields it carries (two per field before).

use super::parse::HttpError;

/// The header fields of one request head.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Fields {
    /// Every name and value, one after another.
    text: String,
    /// Per field, where its name ends and where its value ends in `text`
    /// (a name starts where the previous value ended).
    ends: Vec<(u32, u32)>,
}

/// A field of the Durable Streams protocol itself.
fn is_protocol_field(name: &str) -> bool {
    // httparse has checked the name is a token: ASCII, so sliceable.
    let prefix = |p: &str| name.len() > p.len() && name[..p.len()].eq_ignore_ascii_case(p);
    prefix("stream-") || prefix("producer-") || name.eq_ignore_ascii_case("content-type")
}

impl Fields {
    /// Copies httparse's fields. A value may hold bytes that are not UTF-8
    /// (obs-text, RFC 9110 §5.5): they are kept as U+FFFD, except in the
    /// protocol's own `Stream-*` and `Producer-*` fields and `Content-Type`,
    /// whose values are compared byte for byte or stored and echoed (a
    /// lossy copy would differ from what was sent): there such a value is
    /// malformed.
    pub fn collect(raw: &[httparse::Header<'_>]) -> Result<Fields, HttpError> {
        let bytes = raw.iter().map(|h| h.name.len() + h.value.len()).sum();
        let mut fields = Fields {
            text: String::with_capacity(bytes),
            ends: Vec::with_capacity(raw.len()),
        };
        for h in raw {
            let value = match std::str::from_utf8(h.value) {
                Ok(value) => std::borrow::Cow::Borrowed(value),
                Err(_) if is_protocol_field(h.name) => {
                    return Err(HttpError::Malformed(
                        "a Stream-, Producer- or Content-Type value is not valid UTF-8",
                    ));
                }
                Err(_) => String::from_utf8_lossy(h.value),
            };
            let name_start = fields.text.len();
            fields.text.push_str(h.name);
            fields.text[name_start..].make_ascii_lowercase();
            let name_end = fields.text.len();
            fields.text.push_str(value.trim_matches([' ', '\t']));
            fields
                .ends
                .push((offset(name_end), offset(fields.text.len())));
        }
        Ok(fields)
    }

    pub fn len(&self) -> usize {
        self.ends.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// (name, value) of every field, in arrival order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().map(|&(_, value_end)| value_end));
        starts
            .zip(&self.ends)
            .map(|(start, &(name_end, value_end))| {
                let (start, name_end, value_end) =
                    (start as usize, name_end as usize, value_end as usize);
                (&self.text[start..name_end], &self.text[name_end..value_end])
            })
    }

    /// The value of the first field named `name_lowercase`.
    pub fn first(&self, name_lowercase: &str) -> Option<&str> {
        self.iter()
            .find(|(name, _)| *name == name_lowercase)
            .map(|(_, value)| value)
    }

    /// The values of the fields named `name_lowercase`, in arrival order.
    pub fn values<'a>(&'a self, name_lowercase: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.iter()
            .filter(move |(name, _)| *name == name_lowercase)
            .map(|(_, value)| value)
    }
}

/// A position in a head's text: heads are bounded by `--max-head-bytes`,
/// far below 4 GiB.
fn offset(at: usize) -> u32 {
    u32::try_from(at).expect("a request head is shorter than 4 GiB")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_lower_values_trimmed_in_order() {
        let raw = [
            httparse::Header {
                name: "X-A",
                value: b" 1 ",
            },
            httparse::Header {
                name: "Empty",
                value: b"",
            },
            httparse::Header {
                name: "x-a",
                value: b"\t2",
            },
        ];
        let fields = Fields::collect(&raw).unwrap();
        let all: Vec<_> = fields.iter().collect();
        assert_eq!(all, [("x-a", "1"), ("empty", ""), ("x-a", "2")]);
        assert_eq!(fields.values("x-a").collect::<Vec<_>>(), ["1", "2"]);
        assert_eq!(
            (fields.first("x-a"), fields.first("none")),
            (Some("1"), None)
        );
        assert_eq!(fields.values("X-A").count(), 0, "names are lower-cased");
        assert_eq!((fields.len(), fields.is_empty()), (3, false));
        let obs_text = [httparse::Header {
            name: "X-Note",
            value: b"caf\xe9",
        }];
        let kept = Fields::collect(&obs_text).unwrap();
        assert_eq!(kept.first("x-note"), Some("caf\u{fffd}"));
        for name in ["Stream-Seq", "producer-id", "Content-Type"] {
            let bad = [httparse::Header {
                name,
                value: b"\xff",
            }];
            assert!(Fields::collect(&bad).is_err(), "{name}");
        }
    }
}
