//! Read pins (extensions §3.4 and §2.2 against reads in flight): a response
//! that announced a whole body (a catch-up with its length, a bootstrap)
//! pins its stream incarnation at the offset it still needs, and committed
//! retention then drops log locations only up to the lowest such offset;
//! the rest go as the responses move on or end. The retention itself
//! applies at once: new reads before it are 410, while the responses
//! already on their way finish, where before they were cut short as soon
//! as retention passed bytes they had not sent. The cleaner keeps the
//! segments the remaining locations name.

use super::table::Table;

/// The pins of one incarnation.
#[derive(Debug, Default)]
pub struct Pins {
    /// Each response's token and the lowest offset it still reads.
    floors: Vec<(u64, u64)>,
    /// The latest committed retention offset: locations before it go once
    /// no pin needs them (never an uncommitted one, which a failed commit
    /// could take back).
    committed: u64,
}

impl Pins {
    /// Retention at `offset` committed: how far locations may go now.
    pub(super) fn commit_retention(&mut self, offset: u64) -> u64 {
        self.committed = self.committed.max(offset);
        self.drop_to()
    }

    /// Where locations may be dropped up to now.
    fn drop_to(&self) -> u64 {
        let needed = self.floors.iter().map(|&(_, floor)| floor).min();
        needed.map_or(self.committed, |floor| floor.min(self.committed))
    }
}

impl Table {
    /// Pins incarnation `id` from `floor` on for one response; returns the
    /// pin's token.
    pub fn pin_reads(&mut self, id: u64, floor: u64) -> u64 {
        self.pin_tokens += 1;
        let token = self.pin_tokens;
        self.read_pins
            .entry(id)
            .or_default()
            .floors
            .push((token, floor));
        token
    }

    /// The response of pin `token` no longer needs bytes before `floor`.
    pub fn advance_pin(&mut self, key: &str, id: u64, token: u64, floor: u64) {
        let Some(pins) = self.read_pins.get_mut(&id) else {
            return;
        };
        if let Some(entry) = pins.floors.iter_mut().find(|(t, _)| *t == token) {
            entry.1 = entry.1.max(floor);
        }
        self.drop_pinned(key, id);
    }

    /// Ends pin `token` of `key`'s incarnation `id`.
    pub fn unpin_reads(&mut self, key: &str, id: u64, token: u64) {
        let Some(pins) = self.read_pins.get_mut(&id) else {
            debug_assert!(false, "an unpin without its pin");
            return;
        };
        pins.floors.retain(|(t, _)| *t != token);
        self.drop_pinned(key, id);
        if self.read_pins.get(&id).is_some_and(|p| p.floors.is_empty()) {
            self.read_pins.remove(&id);
        }
    }

    /// Drops the locations no pin of `key`'s incarnation `id` needs.
    fn drop_pinned(&mut self, key: &str, id: u64) {
        let Some(to) = self.read_pins.get(&id).map(Pins::drop_to) else {
            return;
        };
        let before = self.footprint_of(key);
        if let Some(stream) = self.streams.get_mut(key).filter(|s| s.id == id) {
            stream.data.drop_before(to);
        }
        self.count_index(before, key);
    }

    /// Whether a response pins incarnation `id`.
    #[cfg(test)]
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
            data: data.to_vec().into(),
            producer: None,
            stream_seq: None,
            close: false,
            now_ms: 0,
        });
        table.publish(&applied, Some((1, at)));
    }

    fn three_appends(table: &mut Table) -> u64 {
        let (applied, _) = table.apply(Command::plain_create("k", "text/plain", b"", 0));
        table.publish(&applied, None);
        let id = table.get("k").unwrap().id;
        for (i, piece) in [b"aaaa", b"bbbb", b"cccc"].iter().enumerate() {
            appended(table, "k", id, *piece, 4096 * i as u64);
        }
        id
    }

    fn retain_at_8(table: &mut Table, id: u64, publish: bool) {
        let (applied, _) = table.apply(Command::Retain {
            key: "k".into(),
            stream_id: id,
            offset: 8,
            first_record: 2,
        });
        if publish {
            table.publish(&applied, None);
        }
    }

    fn located(table: &Table) -> usize {
        table.get("k").unwrap().data.extents_in(0, 12).len()
    }

    #[test]
    fn retention_drops_only_what_no_pin_still_reads() {
        let mut table = Table::default();
        let id = three_appends(&mut table);
        let a = table.pin_reads(id, 0);
        let b = table.pin_reads(id, 4);
        retain_at_8(&mut table, id, true);
        assert_eq!(table.get("k").unwrap().retained, 8, "retention applied");
        assert_eq!(located(&table), 3, "a pin reads from 0");
        table.advance_pin("k", id, a, 8);
        assert_eq!(located(&table), 2, "the lowest pin reads from 4");
        table.unpin_reads("k", id, b);
        assert_eq!(located(&table), 1, "no pin reads before 8");
        table.unpin_reads("k", id, a);
        assert!(!table.reads_pinned(id));
    }

    #[test]
    fn an_uncommitted_retention_drops_nothing_when_the_pins_go() {
        // Its commit may yet fail and take `retained` back.
        let mut table = Table::default();
        let id = three_appends(&mut table);
        let pin = table.pin_reads(id, 0);
        retain_at_8(&mut table, id, false);
        table.unpin_reads("k", id, pin);
        assert_eq!(located(&table), 3);
    }
}
