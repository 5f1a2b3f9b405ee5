//! Describing a request that carries many events (a batch) as one hookhost event,
//! folding its events one at a time so that a batch of any length costs time, not
//! memory: read them with [`Elements::next_object`](crate::Elements::next_object), add
//! each to a [`BatchId`] and to a [`Shared`] per field that describes the whole.

use crate::prelude::*;
use sha2::{Digest as _, Sha256};

/// The value every event of a batch shares, folded one event at a time.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Shared<T> {
    /// No event yet.
    #[default]
    Empty,
    /// Every event so far had this value.
    One(T),
    /// Two events differed.
    Mixed,
}

impl<T: PartialEq> Shared<T> {
    /// Fold in the next event's value.
    pub fn add(&mut self, value: T) {
        *self = match core::mem::take(self) {
            Shared::Empty => Shared::One(value),
            Shared::One(first) if first == value => Shared::One(first),
            Shared::One(_) | Shared::Mixed => Shared::Mixed,
        };
    }

    /// Whether no event was added.
    pub fn is_empty(&self) -> bool {
        matches!(self, Shared::Empty)
    }

    /// The value every event had; `None` when they differed or there were none.
    pub fn one(self) -> Option<T> {
        match self {
            Shared::One(value) => Some(value),
            Shared::Empty | Shared::Mixed => None,
        }
    }
}

/// A batch's id from its events' own keys: for a batch of one, the key; for several,
/// `batch-sha256:` and the lower-case hex SHA-256 of the keys joined by `\n`, so that
/// the same events posted again (with a new attempt number or timestamp beside them)
/// have the same id. There is none when the batch is empty or an event has no key;
/// [`Request::body_id`](crate::Request::body_id) is the usual fallback.
#[derive(Debug, Clone, Default)]
pub struct BatchId {
    count: usize,
    first: String,
    digest: Sha256,
    /// An event had no key.
    keyless: bool,
}

impl BatchId {
    /// Fold in the next event's key (`None`: it has none). Keys are joined by `\n`, so
    /// a key holding one could make two different batches one id: such a key counts
    /// as none (no provider's event id holds a newline).
    pub fn add(&mut self, key: Option<&str>) {
        match key {
            Some(key) if !self.keyless && !key.contains('\n') => {
                if self.count == 0 {
                    self.first = key.to_owned();
                } else {
                    self.digest.update(b"\n");
                }
                self.digest.update(key.as_bytes());
            }
            _ => self.keyless = true,
        }
        self.count += 1;
    }

    /// The id, once every event was added.
    pub fn finish(self) -> Option<String> {
        match self.count {
            _ if self.keyless => None,
            0 => None,
            1 => Some(self.first),
            _ => Some(format!(
                "batch-sha256:{}",
                hex::encode(self.digest.finalize())
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_holding_a_newline_counts_as_none() {
        let id = |keys: &[&str]| {
            let mut batch = BatchId::default();
            for key in keys {
                batch.add(Some(key));
            }
            batch.finish()
        };
        // Joined, these two would read the same.
        assert_eq!(id(&["a\nb", "c"]), None);
        assert!(id(&["a", "b", "c"]).is_some_and(|id| id.starts_with("batch-sha256:")));
        assert_eq!(id(&["a\nb"]), None);
    }

    #[test]
    fn shared_keeps_one_value_until_two_differ() {
        let mut shared = Shared::default();
        assert!(shared.is_empty());
        shared.add("a");
        shared.add("a");
        assert_eq!(shared, Shared::One("a"));
        shared.add("b");
        shared.add("a");
        assert_eq!(shared, Shared::Mixed);
        assert_eq!(shared.one(), None);
        assert_eq!(Shared::<u8>::Empty.one(), None);
        let mut absent = Shared::default();
        absent.add(None);
        absent.add(Some("m"));
        assert_eq!(absent.one(), None, "absent then present differ");
    }

    fn id(keys: &[Option<&str>]) -> Option<String> {
        let mut id = BatchId::default();
        for key in keys {
            id.add(*key);
        }
        id.finish()
    }

    #[test]
    fn a_batch_id_is_the_key_alone_or_the_digest_of_all_keys() {
        assert_eq!(id(&[]), None);
        assert_eq!(id(&[Some("evt_1")]).as_deref(), Some("evt_1"));
        // printf 'a\nb' | sha256sum
        assert_eq!(
            id(&[Some("a"), Some("b")]).as_deref(),
            Some("batch-sha256:7e18f737311b2dc3b2f269dd78396b0351f14fb66efa879f768cb23181883c78")
        );
        assert_ne!(id(&[Some("a"), Some("b")]), id(&[Some("b"), Some("a")]));
        assert_eq!(id(&[Some("a"), None, Some("b")]), None);
        assert_eq!(id(&[None]), None);
    }

    #[test]
    fn a_body_id_is_the_hex_sha256_of_the_body() {
        let empty = crate::testing::RequestBuilder::post("https://hooks.example.com/").build();
        // printf '' | sha256sum
        assert_eq!(
            empty.body_id(),
            "body-sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }
}
