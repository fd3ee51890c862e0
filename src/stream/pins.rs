//! Read pins (extensions §3.4 and §2.2 against reads in flight): a response
//! that announced a whole body (a catch-up with its length, a bootstrap)
//! pins its stream incarnation, and retention then leaves the log
//! locations of the bytes it passed in place until the last pin goes. The
//! retention itself applies at once: new reads before it are 410, while the
//! responses already on their way finish, where before they were cut short
//! as soon as retention passed bytes they had not sent. The cleaner keeps
//! the segments those locations name until they are dropped.

use super::table::Table;

impl Table {
    /// Pins incarnation `id` for one response.
    pub fn pin_reads(&mut self, id: u64) {
        *self.read_pins.entry(id).or_default() += 1;
    }

    /// Ends one pin of `key`'s incarnation `id`; the last one drops the
    /// locations retention has passed meanwhile.
    pub fn unpin_reads(&mut self, key: &str, id: u64) {
        let Some(pins) = self.read_pins.get_mut(&id) else {
            debug_assert!(false, "an unpin without its pin");
            return;
        };
        *pins -= 1;
        if *pins > 0 {
            return;
        }
        self.read_pins.remove(&id);
        let before = self.footprint_of(key);
        if let Some(stream) = self.streams.get_mut(key).filter(|s| s.id == id) {
            stream.data.drop_before(stream.retained);
        }
        self.count_index(before, key);
    }

    /// Whether a response pins incarnation `id`.
    pub fn reads_pinned(&self, id: u64) -> bool {
        self.read_pins.contains_key(&id)
    }
}

#[cfg(test)]
mod tests {
    use crate::stream::Command;
    use crate::stream::table::Table;

    fn appended(table: &mut Table, key: &str, id: u64, data: &[u8], at: u64) {
        let (applied, _) = table.apply(Command::Append {
            key: key.into(),
            stream_id: id,
            start: table.get(key).unwrap().tail(),
            data: data.to_vec(),
            producer: None,
            stream_seq: None,
            close: false,
            now_ms: 0,
        });
        table.publish(&applied, Some((1, at)));
    }

    #[test]
    fn retention_keeps_a_pinned_streams_locations_until_the_last_pin() {
        let mut table = Table::default();
        let (applied, _) = table.apply(Command::plain_create("k", "text/plain", b"", 0));
        table.publish(&applied, None);
        let id = table.get("k").unwrap().id;
        for (i, piece) in [b"aaaa", b"bbbb", b"cccc"].iter().enumerate() {
            appended(&mut table, "k", id, *piece, 4096 * i as u64);
        }
        table.pin_reads(id);
        table.pin_reads(id);
        let (applied, _) = table.apply(Command::Retain {
            key: "k".into(),
            stream_id: id,
            offset: 8,
            first_record: 2,
        });
        table.publish(&applied, None);
        let located = |t: &Table| t.get("k").unwrap().data.extents_in(0, 12).len();
        assert_eq!(table.get("k").unwrap().retained, 8, "retention applied");
        assert_eq!(located(&table), 3, "pinned: every location kept");
        table.unpin_reads("k", id);
        assert_eq!(located(&table), 3, "one pin left");
        table.unpin_reads("k", id);
        assert_eq!(
            located(&table),
            1,
            "the last pin drops what retention passed"
        );
        assert!(!table.reads_pinned(id));
    }
}
