//! An incremental parser for the `text/event-stream` bodies of SSE reads
//! (PROTOCOL.md §5.7): bytes arrive in arbitrary chunks, lines may be cut
//! anywhere, and the parser hands out each non-empty `data:` line of an
//! `event: data` event as it completes, and each `event: control` event's
//! data (the JSON object) when its blank line ends the event. Other events,
//! comments and fields are ignored. Lines end with LF (a CR before it is
//! dropped), which is how Durable Streams servers frame events.

use serde::Deserialize;

/// What the parser hands out.
#[derive(Debug, PartialEq, Eq)]
pub enum Item<'a> {
    /// One non-empty data line of an `event: data` event.
    Data(&'a [u8]),
    /// The data of a whole `event: control` event (lines joined with LF).
    Control(&'a [u8]),
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum Kind {
    #[default]
    None,
    Data,
    Control,
    Other,
}

#[derive(Default)]
pub struct Parser {
    /// The start of a line cut by the end of the last chunk.
    partial: Vec<u8>,
    /// The event the current lines belong to.
    kind: Kind,
    /// The data of the control event being read.
    control: Vec<u8>,
}

impl Parser {
    /// Parses one chunk of the body, calling `sink` for every item completed.
    pub fn feed(&mut self, mut chunk: &[u8], sink: &mut impl FnMut(Item<'_>)) {
        while let Some(at) = memchr::memchr(b'\n', chunk) {
            let (head, rest) = (&chunk[..at], &chunk[at + 1..]);
            if self.partial.is_empty() {
                self.line(head, sink);
            } else {
                let mut line = std::mem::take(&mut self.partial);
                line.extend_from_slice(head);
                self.line(&line, sink);
                line.clear();
                self.partial = line;
            }
            chunk = rest;
        }
        self.partial.extend_from_slice(chunk);
    }

    fn line(&mut self, line: &[u8], sink: &mut impl FnMut(Item<'_>)) {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            if self.kind == Kind::Control {
                sink(Item::Control(&self.control));
            }
            self.control.clear();
            self.kind = Kind::None;
            return;
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(0) => return, // a comment
            Some(at) => {
                let value = &line[at + 1..];
                (&line[..at], value.strip_prefix(b" ").unwrap_or(value))
            }
            None => (line, &b""[..]),
        };
        match field {
            b"event" => {
                self.kind = match value {
                    b"data" => Kind::Data,
                    b"control" => Kind::Control,
                    _ => Kind::Other,
                }
            }
            b"data" => self.data(value, sink),
            _ => {}
        }
    }

    fn data(&mut self, value: &[u8], sink: &mut impl FnMut(Item<'_>)) {
        match self.kind {
            Kind::Data if !value.is_empty() => sink(Item::Data(value)),
            Kind::Control => {
                if !self.control.is_empty() {
                    self.control.push(b'\n');
                }
                self.control.extend_from_slice(value);
            }
            _ => {}
        }
    }
}

/// The fields of a control event the benchmarks use.
#[derive(Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct Control {
    pub stream_next_offset: Option<String>,
    pub stream_cursor: Option<String>,
    #[serde(default)]
    pub up_to_date: bool,
    #[serde(default)]
    pub stream_closed: bool,
}

impl Control {
    pub fn parse(json: &[u8]) -> Option<Control> {
        serde_json::from_slice(json).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &[u8] = b"event: control\ndata:{\"streamNextOffset\":\"0_0\",\"streamCursor\":\"7\",\"upToDate\":true}\n\n\
event: data\ndata:0,100\ndata:1,200\ndata:\n\n\
: a comment\n\
event: control\r\ndata:{\"streamNextOffset\":\"0_12\",\"streamCursor\":\"8\"}\r\n\r\n\
event: other\ndata:ignored\n\n\
event: data\ndata: 2,300\n\n";

    #[derive(Debug, PartialEq, Eq)]
    enum Owned {
        Data(String),
        Control(String),
    }

    fn parse_in_pieces(pieces: &[&[u8]]) -> Vec<Owned> {
        let mut parser = Parser::default();
        let mut out = Vec::new();
        for piece in pieces {
            parser.feed(piece, &mut |item| {
                out.push(match item {
                    Item::Data(d) => Owned::Data(String::from_utf8(d.to_vec()).unwrap()),
                    Item::Control(c) => Owned::Control(String::from_utf8(c.to_vec()).unwrap()),
                })
            });
        }
        out
    }

    fn expected() -> Vec<Owned> {
        vec![
            Owned::Control(
                r#"{"streamNextOffset":"0_0","streamCursor":"7","upToDate":true}"#.into(),
            ),
            Owned::Data("0,100".into()),
            Owned::Data("1,200".into()),
            Owned::Control(r#"{"streamNextOffset":"0_12","streamCursor":"8"}"#.into()),
            Owned::Data("2,300".into()),
        ]
    }

    #[test]
    fn whole_body_at_once() {
        assert_eq!(parse_in_pieces(&[BODY]), expected());
    }

    #[test]
    fn every_two_way_split() {
        for at in 0..=BODY.len() {
            let (a, b) = BODY.split_at(at);
            assert_eq!(parse_in_pieces(&[a, b]), expected(), "split at {at}");
        }
    }

    #[test]
    fn one_byte_at_a_time() {
        let pieces: Vec<&[u8]> = BODY.chunks(1).collect();
        assert_eq!(parse_in_pieces(&pieces), expected());
    }

    #[test]
    fn multi_line_control_data_is_joined() {
        let got = parse_in_pieces(&[b"event: control\ndata:{\"a\":\ndata:1}\n\n"]);
        assert_eq!(got, vec![Owned::Control("{\"a\":\n1}".into())]);
    }

    #[test]
    fn control_fields() {
        let c =
            Control::parse(br#"{"streamNextOffset":"0_12","streamCursor":"8","upToDate":true}"#)
                .unwrap();
        assert_eq!(c.stream_next_offset.as_deref(), Some("0_12"));
        assert_eq!(c.stream_cursor.as_deref(), Some("8"));
        assert!(c.up_to_date && !c.stream_closed);
        let closed = Control::parse(br#"{"streamNextOffset":"0_1","streamClosed":true}"#).unwrap();
        assert!(closed.stream_closed && !closed.up_to_date);
        assert_eq!(Control::parse(b"not json"), None);
    }
}
