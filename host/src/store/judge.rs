//! Dedupe and the version gate for a batch of receipts, judged in memory.
//!
//! Both backends commit receipts in batches (group commit). Each reads what the store
//! holds for the batch's event ids and resources in one go, then calls [`judge`], and
//! writes what it returns. Receipts are judged in arrival order against that read
//! plus the effects of the batch's earlier receipts, exactly as if each had been its
//! own transaction.

use super::{NewReceipt, Outcome, PUSHED, RECONCILED, Resource};
use std::collections::HashMap;

/// (endpoint, resource kind, resource id).
pub(super) type ResourceKey<'a> = (&'a str, &'a str, &'a str);

/// A resource's new accepted state: (resource, version, event id that moved it,
/// tombstone).
pub(super) type Moved<'a> = (ResourceKey<'a>, i64, &'a str, bool);

/// What the store holds for a batch, as read before judging it.
#[derive(Default)]
pub(super) struct Held<'a, 'h> {
    /// The body digest stored under each (endpoint, event id) the batch names, and,
    /// for a receipt stored by reconciliation (from the provider's list), what it
    /// describes.
    pub digests: HashMap<(&'a str, &'a str), HeldEvent<'h>>,
    /// Each resource's accepted (version, tombstone).
    pub versions: HashMap<ResourceKey<'a>, (i64, bool)>,
}

/// What a batch writes, and what each of its receipts is answered.
pub(super) struct Judged<'a> {
    /// One per receipt, in the batch's order.
    pub outcomes: Vec<Outcome>,
    /// Receipts new to the store, with the state they are stored in.
    pub stored: Vec<(&'a NewReceipt, Verdict)>,
    /// Same event id as a stored receipt, another body: quarantined.
    pub conflicts: Vec<&'a NewReceipt>,
    /// Resources whose accepted version the batch moves forward, in key order.
    pub moved: Vec<Moved<'a>>,
}

/// What an event says it is, apart from its bytes: its type and its resource's kind,
/// id and version.
pub(super) type Described = (String, Option<String>, Option<String>, Option<i64>);

/// A stored event's body digest, and what it describes when it was stored from the
/// provider's list.
pub(super) type HeldEvent<'h> = (&'h [u8], Option<Described>);

/// What `r` describes (see [`Described`]).
pub(super) fn described(r: &NewReceipt) -> Described {
    let resource = r.resource.as_ref();
    (
        r.event_type.clone(),
        resource.map(|x| x.kind.clone()),
        resource.map(|x| x.id.clone()),
        resource
            .and_then(|x| x.version)
            .and_then(|v| i64::try_from(v).ok()),
    )
}

/// Judge a batch against what the store `held` before it.
pub(super) fn judge<'a: 'h, 'h>(receipts: &[&'a NewReceipt], held: Held<'a, 'h>) -> Judged<'a> {
    let Held {
        mut digests,
        versions,
    } = held;
    // Each resource's (version, tombstone) and the event id that moved it in this
    // batch (None: as the store holds it).
    let mut versions: HashMap<ResourceKey<'a>, (i64, bool, Option<&'a str>)> = versions
        .into_iter()
        .map(|(key, (version, deleted))| (key, (version, deleted, None)))
        .collect();
    let mut judged = Judged {
        outcomes: Vec::with_capacity(receipts.len()),
        stored: Vec::new(),
        conflicts: Vec::new(),
        moved: Vec::new(),
    };
    for &r in receipts {
        let key = (r.endpoint.as_str(), r.event_id.as_str());
        if let Some((digest, listed)) = digests.get(&key) {
            // The provider's push of an event stored from its list, describing it
            // alike, is that event, though its bytes differ (a list lays each event
            // out inside its page): a duplicate, not a conflict.
            let listed_alike = r.source == PUSHED
                && listed
                    .as_ref()
                    .is_some_and(|listed| *listed == described(r));
            if *digest == r.body_sha256.as_slice() || listed_alike {
                judged.outcomes.push(Outcome::Duplicate);
            } else {
                judged.conflicts.push(r);
                judged.outcomes.push(Outcome::Conflict);
            }
            continue;
        }
        let verdict = match (&r.ignore, &r.resource) {
            (Some(reason), _) => Verdict::Ignored(reason.clone()),
            (None, Some(x)) => {
                let at = (r.endpoint.as_str(), x.kind.as_str(), x.id.as_str());
                let current = versions
                    .get(&at)
                    .map(|&(version, deleted, _)| (version, deleted));
                let (verdict, newer) = gate(x, current);
                if let Some(version) = newer {
                    versions.insert(at, (version, x.deleted, Some(&r.event_id)));
                }
                verdict
            }
            (None, None) => Verdict::Pending,
        };
        let listed = (r.source == RECONCILED).then(|| described(r));
        digests.insert(key, (&r.body_sha256, listed));
        judged.outcomes.push(verdict.clone().into());
        judged.stored.push((r, verdict));
    }
    judged.moved = versions
        .into_iter()
        .filter_map(|(key, (version, deleted, by))| {
            by.map(|event_id| (key, version, event_id, deleted))
        })
        .collect();
    judged.moved.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    judged
}

/// What happens to a receipt that is new to the store.
#[derive(Clone)]
pub(super) enum Verdict {
    Pending,
    Stale,
    ResourceDeleted,
    Ignored(String),
}

impl Verdict {
    /// The stored `state` and `state_reason`.
    pub(super) fn state(&self) -> (&'static str, Option<&str>) {
        match self {
            Verdict::Pending => ("pending", None),
            Verdict::Stale => ("stale", Some("stale_version")),
            Verdict::ResourceDeleted => ("ignored", Some("resource_deleted")),
            Verdict::Ignored(reason) => ("ignored", Some(reason)),
        }
    }
}

impl From<Verdict> for Outcome {
    fn from(verdict: Verdict) -> Outcome {
        match verdict {
            Verdict::Pending => Outcome::Accepted,
            Verdict::Stale => Outcome::StaleVersion,
            Verdict::ResourceDeleted => Outcome::ResourceDeleted,
            Verdict::Ignored(reason) => Outcome::Ignored(reason),
        }
    }
}

/// The version gate for one resource, given its `current` (version, tombstone): older →
/// stale, otherwise accepted, and the version to record for the resource (a delete
/// leaves a tombstone at its version). The same version under another event id is
/// another change the provider stamped alike (two events of one object in the same
/// second): it is accepted and delivered after the first, in arrival order, unless
/// that version is a tombstone.
fn gate(resource: &Resource, current: Option<(i64, bool)>) -> (Verdict, Option<i64>) {
    let Some(version) = resource.version.map(version_i64) else {
        // No version to order it by: only a tombstone can refuse it.
        let verdict = match current {
            Some((_, true)) => Verdict::ResourceDeleted,
            _ => Verdict::Pending,
        };
        return (verdict, None);
    };
    match current {
        Some((accepted, _)) if version < accepted => (Verdict::Stale, None),
        Some((accepted, true)) if version == accepted => (Verdict::ResourceDeleted, None),
        // Only a delete changes what is recorded at the same version: its tombstone.
        Some((accepted, false)) if version == accepted => {
            (Verdict::Pending, resource.deleted.then_some(version))
        }
        _ => (Verdict::Pending, Some(version)),
    }
}

/// Versions are u64 on the wire; the stores' integers are i64. Ingest refuses versions
/// past i64::MAX (`verify::storable`); any other way in saturates them.
pub(super) fn version_i64(version: u64) -> i64 {
    i64::try_from(version).unwrap_or(i64::MAX)
}

/// A receipt's headers as stored: JSON `[[name, value], ...]`.
pub(super) fn headers_json(r: &NewReceipt) -> String {
    serde_json::to_string(&r.headers).unwrap_or_else(|_| "[]".into())
}

/// A mixed batch and what each backend must make of it, for the backends' tests.
#[cfg(test)]
pub(super) mod fixture {
    use super::super::{NewReceipt, Outcome, Resource};
    use sha2::Digest as _;

    pub fn receipt(id: &str, body: &str, version: Option<u64>, deleted: bool) -> NewReceipt {
        NewReceipt {
            endpoint: "stripe".into(),
            event_id: id.into(),
            body_sha256: sha2::Sha256::digest(body).into(),
            body: body.into(),
            headers: vec![],
            secret_index: 0,
            plugin: "stripe".into(),
            plugin_version: "test".into(),
            plugin_digest: "test".into(),
            message_id: None,
            query: None,
            event_type: "customer.updated".into(),
            resource: Some(Resource {
                kind: "customer".into(),
                id: "cus_1".into(),
                version,
                deleted,
            }),
            occurred_at: None,
            signed_at: None,
            received_at_ms: 0,
            ignore: None,
            source: super::super::PUSHED,
        }
    }

    /// Committed before the batch: evt_0 at version 1.
    pub fn before() -> Vec<NewReceipt> {
        vec![receipt("evt_0", "zero", Some(1), false)]
    }

    pub fn batch() -> Vec<NewReceipt> {
        vec![
            receipt("evt_0", "zero", Some(1), false), // held by the store
            receipt("evt_2", "two", Some(2), false),
            receipt("evt_old", "old", Some(1), false), // older than evt_2
            receipt("evt_2", "two", Some(2), false),   // earlier in this batch
            receipt("evt_2", "TWO", Some(2), false),   // same id, other body
            receipt("evt_2b", "2b", Some(2), false),   // same version, other id
            receipt("evt_3", "three", Some(3), true),  // newer: a delete
            receipt("evt_3b", "3b", Some(3), false),   // the delete's own version
            receipt("evt_none", "none", None, false),  // unversioned, after it
        ]
    }

    /// The batch's answers, in its order: what separate transactions would give.
    pub fn outcomes() -> Vec<Outcome> {
        vec![
            Outcome::Duplicate,
            Outcome::Accepted,
            Outcome::StaleVersion,
            Outcome::Duplicate,
            Outcome::Conflict,
            Outcome::Accepted,
            Outcome::Accepted,
            Outcome::ResourceDeleted,
            Outcome::ResourceDeleted,
        ]
    }

    /// (event id, state) of every receipt stored, in insertion order.
    pub const STATES: [(&str, &str); 7] = [
        ("evt_0", "pending"),
        ("evt_2", "pending"),
        ("evt_old", "stale"),
        ("evt_2b", "pending"),
        ("evt_3", "pending"),
        ("evt_3b", "ignored"),
        ("evt_none", "ignored"),
    ];

    /// cus_1's (version, event id, tombstone) after the batch.
    pub const VERSION: (i64, &str, bool) = (3, "evt_3", true);

    pub const CONFLICTS: i64 = 1;

    pub fn pairs(rows: &[(String, String)]) -> Vec<(&str, &str)> {
        rows.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect()
    }
}
