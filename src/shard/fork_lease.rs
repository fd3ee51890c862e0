//! Fork leases (PROTOCOL.md §4.2, soft delete). A source's owner counts the
//! forks it has planned whose FORK command has not applied yet on the
//! fork's shard. Such a fork is invisible to the fork count a DELETE
//! gathers: without the lease, a DELETE racing it would delete the source
//! for good while the fork still commits (the source's URL then answers 404
//! rather than 410, and could be created again under its forks).
//!
//! A DELETE or a collection watches the source's leases while it gathers:
//! if one was held, or one ended meanwhile, the source is soft-deleted (or
//! kept so). A lease ends when the fork's shard drops its [`Lease`] token,
//! after the FORK applied or once the fork failed; the end nudges the
//! source, which a soft delete may then collect.

use std::cell::RefCell;
use std::collections::HashMap;

use super::mesh::{Mesh, MeshMsg};

/// The leases of the sources this shard owns, by source incarnation.
#[derive(Default)]
pub struct Leases {
    by_source: RefCell<HashMap<u64, Held>>,
}

#[derive(Default, Clone, Copy, PartialEq, Eq, Debug)]
struct Held {
    /// Leases lent and not yet ended.
    active: u32,
    /// Leases ended, ever (while the entry lives).
    ended: u64,
    /// Deletes and collections watching this source's leases.
    watchers: u32,
}

impl Leases {
    /// A fork of `source_id` was planned: its lease begins.
    pub fn start(&self, source_id: u64) {
        self.by_source
            .borrow_mut()
            .entry(source_id)
            .or_default()
            .active += 1;
    }

    /// The fork's shard is done with its lease of `source_id`.
    pub fn end(&self, source_id: u64) {
        let mut map = self.by_source.borrow_mut();
        let Some(held) = map.get_mut(&source_id) else {
            debug_assert!(false, "a lease ended that never began");
            return;
        };
        // Checked in tests; in production a miscount must not stop a shard.
        debug_assert!(held.active > 0, "more lease ends than starts");
        held.active = held.active.saturating_sub(1);
        held.ended += 1;
        Self::forget_if_idle(&mut map, source_id);
    }

    /// Starts watching `source_id`'s leases, for the span of one gather.
    pub fn watch(&self, source_id: u64) -> Watch<'_> {
        let mut map = self.by_source.borrow_mut();
        let held = map.entry(source_id).or_default();
        held.watchers += 1;
        let before = *held;
        Watch {
            leases: self,
            source_id,
            before,
        }
    }

    fn forget_if_idle(map: &mut HashMap<u64, Held>, source_id: u64) {
        if map
            .get(&source_id)
            .is_some_and(|h| h.active == 0 && h.watchers == 0)
        {
            map.remove(&source_id);
        }
    }

    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.by_source.borrow().len()
    }
}

/// A watch of one source's leases (see [`Leases::watch`]).
pub struct Watch<'a> {
    leases: &'a Leases,
    source_id: u64,
    before: Held,
}

impl Watch<'_> {
    /// Whether a fork may exist that the gather did not count: a lease was
    /// held when the watch began, is held now, or ended in between.
    pub fn leased(&self) -> bool {
        let map = self.leases.by_source.borrow();
        let now = map.get(&self.source_id).copied().unwrap_or_default();
        self.before.active > 0 || now.active > 0 || now.ended != self.before.ended
    }
}

impl Drop for Watch<'_> {
    fn drop(&mut self) {
        let mut map = self.leases.by_source.borrow_mut();
        if let Some(held) = map.get_mut(&self.source_id) {
            held.watchers -= 1;
        }
        Leases::forget_if_idle(&mut map, self.source_id);
    }
}

/// The fork's side of a lease: dropping it (however the fork ends) tells
/// the source's owner.
pub struct Lease {
    mesh: Mesh,
    owner: usize,
    source: String,
    source_id: u64,
}

impl Lease {
    /// The token of a lease the owner (shard `owner`) has just started.
    pub fn new(mesh: Mesh, owner: usize, source: String, source_id: u64) -> Lease {
        Lease {
            mesh,
            owner,
            source,
            source_id,
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        // A shard that is stopping keeps the lease: its source is then
        // soft-deleted rather than deleted, which is safe either way.
        let msg = MeshMsg::ForkLeaseEnded {
            source: std::mem::take(&mut self.source),
            source_id: self.source_id,
        };
        self.mesh.send(self.owner, msg);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_held_or_ended_during_a_watch_counts() {
        let leases = Leases::default();
        {
            let quiet = leases.watch(7);
            assert!(!quiet.leased());
        }
        assert_eq!(leases.tracked(), 0, "an idle source is forgotten");

        leases.start(7);
        let held_before = leases.watch(7);
        assert!(held_before.leased());
        leases.end(7);
        assert!(held_before.leased(), "it was held when the watch began");
        drop(held_before);

        let watch = leases.watch(7);
        leases.start(7);
        leases.end(7);
        assert!(watch.leased(), "lent and ended while watched");
        assert!(!leases.watch(8).leased(), "another source's leases");
        drop(watch);
        assert_eq!(leases.tracked(), 0);
    }

    #[test]
    fn an_entry_lives_while_a_lease_or_a_watch_does() {
        let leases = Leases::default();
        leases.start(3);
        let watch = leases.watch(3);
        leases.end(3);
        assert_eq!(leases.tracked(), 1, "the watch still needs the count");
        drop(watch);
        assert_eq!(leases.tracked(), 0);
    }
}
