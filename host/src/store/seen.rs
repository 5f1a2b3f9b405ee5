//! Receipts this process has seen committed, so that an exact duplicate (same
//! endpoint, event id and body digest) is answered without a trip to the database.
//!
//! Only durable facts go in: an entry is added after the commit that stored the
//! receipt (or after the store reported it already held it), and receipts are never
//! un-received, so a hit is always a true duplicate, on any backend and with any
//! number of processes sharing the database. A miss proves nothing and goes to the
//! store as before. Memory is bounded: two generations of at most [`GENERATION`]
//! entries each; when the young one fills, the old one is dropped.

use std::collections::HashSet;
use std::sync::Mutex;

/// Entries per generation; each costs the two ids plus a digest (~150 bytes).
const GENERATION: usize = 32 * 1024;

/// `(endpoint, event id, body digest)` of a committed receipt.
type Key = (Box<str>, Box<str>, [u8; 32]);

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
    /// True when a receipt with this endpoint, event id and body digest is committed.
    pub fn contains(&self, endpoint: &str, event_id: &str, digest: &[u8; 32]) -> bool {
        let key = (endpoint.into(), event_id.into(), *digest);
        let Ok(g) = self.generations.lock() else {
            return false;
        };
        g.young.contains(&key) || g.old.contains(&key)
    }

    /// Remember a committed receipt.
    pub fn insert(&self, endpoint: &str, event_id: &str, digest: &[u8; 32]) {
        let Ok(mut g) = self.generations.lock() else {
            return;
        };
        if g.young.len() >= GENERATION {
            g.old = std::mem::take(&mut g.young);
        }
        g.young.insert((endpoint.into(), event_id.into(), *digest));
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
        seen.insert("stripe", "evt_1", &[1; 32]);
        assert!(seen.contains("stripe", "evt_1", &[1; 32]));
        assert!(!seen.contains("stripe", "evt_1", &[2; 32]), "another body");
        assert!(
            !seen.contains("github", "evt_1", &[1; 32]),
            "another endpoint"
        );
        assert!(!seen.contains("stripe", "evt_2", &[1; 32]), "another event");
    }

    #[test]
    fn memory_is_bounded_to_two_generations() {
        let seen = Seen::default();
        for n in 0..(3 * GENERATION) {
            seen.insert("stripe", &format!("evt_{n}"), &[0; 32]);
        }
        assert!(seen.len() <= 2 * GENERATION);
        // The newest are kept, the oldest forgotten (a miss only costs a store read).
        assert!(seen.contains("stripe", &format!("evt_{}", 3 * GENERATION - 1), &[0; 32]));
        assert!(!seen.contains("stripe", "evt_0", &[0; 32]));
    }
}
