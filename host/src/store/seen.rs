//! Receipts this process has seen committed, so that an exact duplicate (same
//! endpoint, event id and body digest) is answered without a trip to the database.
//!
//! Only durable facts go in: an entry is added after the commit that stored the
//! receipt (or after the store reported it already held it), and receipts are never
//! un-received, so a hit is always a true duplicate, on any backend and with any
//! number of processes sharing the database. A miss proves nothing and goes to the
//! store as before. Memory is bounded: two generations of at most [`GENERATION`]
//! entries each; when the young one fills, the old one is dropped.
//!
//! An entry is the SHA-256 of the three, so a lookup allocates nothing and an entry
//! is 32 bytes; two receipts share an entry only if SHA-256 collides.

use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::sync::Mutex;

/// Entries per generation; each is 32 bytes (and the table's own few).
const GENERATION: usize = 32 * 1024;

/// `(endpoint, event id, body digest)` of a committed receipt, folded into one digest.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Key([u8; 32]);

impl Key {
    pub fn new(endpoint: &str, event_id: &str, digest: &[u8; 32]) -> Key {
        let mut hash = Sha256::new();
        // Each id length-prefixed, so no two pairs of ids give the same input.
        for id in [endpoint, event_id] {
            hash.update((id.len() as u64).to_le_bytes());
            hash.update(id.as_bytes());
        }
        hash.update(digest);
        Key(hash.finalize().into())
    }
}

#[derive(Debug, Default)]
pub struct Seen {
    generations: Mutex<Generations>,
}

#[derive(Debug, Default)]
struct Generations {
    young: HashSet<Key>,
    old: HashSet<Key>,
}

impl Seen {
    /// True when a receipt with this key is committed.
    pub fn contains(&self, key: &Key) -> bool {
        let Ok(g) = self.generations.lock() else {
            return false;
        };
        g.young.contains(key) || g.old.contains(key)
    }

    /// Remember a committed receipt.
    pub fn insert(&self, key: Key) {
        let retired = {
            let Ok(mut g) = self.generations.lock() else {
                return;
            };
            // A full young generation becomes the old one, and the old one is freed
            // after the lock is let go: other requests' lookups do not wait for it.
            // The new one is sized at once, so it never grows while the lock is held.
            let retired = (g.young.len() >= GENERATION).then(|| {
                let young = std::mem::replace(&mut g.young, HashSet::with_capacity(GENERATION));
                std::mem::replace(&mut g.old, young)
            });
            g.young.insert(key);
            retired
        };
        drop(retired);
    }

    /// Entries held (both generations).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.generations
            .lock()
            .map_or(0, |g| g.young.len() + g.old.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hit_needs_the_same_endpoint_event_id_and_digest() {
        let seen = Seen::default();
        seen.insert(Key::new("stripe", "evt_1", &[1; 32]));
        assert!(seen.contains(&Key::new("stripe", "evt_1", &[1; 32])));
        assert!(
            !seen.contains(&Key::new("stripe", "evt_1", &[2; 32])),
            "another body"
        );
        assert!(
            !seen.contains(&Key::new("github", "evt_1", &[1; 32])),
            "another endpoint"
        );
        assert!(
            !seen.contains(&Key::new("stripe", "evt_2", &[1; 32])),
            "another event"
        );
        // The same bytes split differently between the two ids.
        seen.insert(Key::new("ab", "c", &[1; 32]));
        assert!(
            !seen.contains(&Key::new("a", "bc", &[1; 32])),
            "a shifted split"
        );
    }

    #[test]
    fn memory_is_bounded_to_two_generations() {
        let seen = Seen::default();
        for n in 0..(3 * GENERATION) {
            seen.insert(Key::new("stripe", &format!("evt_{n}"), &[0; 32]));
        }
        assert!(seen.len() <= 2 * GENERATION);
        // The newest are kept, the oldest forgotten (a miss only costs a store read).
        assert!(seen.contains(&Key::new(
            "stripe",
            &format!("evt_{}", 3 * GENERATION - 1),
            &[0; 32]
        )));
        assert!(!seen.contains(&Key::new("stripe", "evt_0", &[0; 32])));
    }
}
