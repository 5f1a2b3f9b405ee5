//! The worker pool: delivers accepted events to each endpoint's destination.
//!
//! Owns leasing (with an expiry, so a crashed worker's events are leased again),
//! the retry schedule, and the move to dead letters and quarantine. Every attempt is
//! recorded; nothing is ever deleted here. Never answers a sender and never sees a
//! provider secret (only the destination's own signing key).

mod destination;
mod reach;
mod tls;

pub use destination::{
    Answer, Destination, HttpDestination, classify, idempotency_key, origin_form,
};
pub(crate) use destination::{connect, retry_after};
pub use reach::{Reach, refused_host};
pub use tls::CaFile;
pub(crate) use tls::Tls;

use crate::config::DeliveryConfig;
use crate::endpoints::Endpoint;
use crate::http::App;
use crate::store::{AttemptRecord, Leased, Next};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinSet;
use tracing::Instrument;

/// A destination's `Retry-After` is honoured up to this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(3600);
/// While the store fails (the database is unreachable), the pool waits between lease
/// attempts, doubling from the poll interval up to this: no busy loop, no log flood,
/// and it resumes within this long once the store is back.
const STORE_BACKOFF_MAX: Duration = Duration::from_secs(5);
/// Retry delays are spread by up to this fraction, so a burst of failures does not
/// come back as a burst.
const JITTER: f64 = 0.1;

/// Start the pool; it stops leasing when `stop` turns true and waits up to the grace
/// period for deliveries in flight. Drained in time, it gives back what it still
/// holds; past it, the leases of the deliveries it cuts off are left to expire.
pub fn spawn(
    app: Arc<App>,
    config: DeliveryConfig,
    stop: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(run(app, config, stop))
}

async fn run(app: Arc<App>, config: DeliveryConfig, mut stop: watch::Receiver<bool>) {
    let owner = owner_id();
    // A worker is busy while its request is out; recording the answer goes on in
    // `recording` (its lease still holds the event and the event's resource), so the
    // next delivery does not wait for the store's commit. Both together stay within
    // twice the pool size, so a slow store holds back leasing instead of piling up.
    let mut in_flight: JoinSet<Option<Attempted>> = JoinSet::new();
    let mut recording: JoinSet<()> = JoinSet::new();
    // Consecutive lease failures: the store is unreachable while this is above 0.
    let mut failures: u32 = 0;
    let record = |recording: &mut JoinSet<()>, attempted: Option<Attempted>| {
        if let Some(attempted) = attempted {
            let span = attempted.event.span();
            recording.spawn(
                attempted
                    .record(app.clone(), owner.clone())
                    .instrument(span),
            );
        }
    };
    loop {
        while let Some(done) = in_flight.try_join_next() {
            record(&mut recording, done.ok().flatten());
        }
        while recording.try_join_next().is_some() {}
        if *stop.borrow() {
            break;
        }
        let free = config
            .workers
            .saturating_sub(in_flight.len())
            .min((2 * config.workers).saturating_sub(in_flight.len() + recording.len()));
        let mut leased = 0;
        // Paused endpoints are left out by the lease statement itself.
        let endpoints = app.endpoints.with_destinations();
        // Lease in batches: one lease query per few finished deliveries, not per
        // delivery, unless the pool has nothing at all to do.
        let batch = (config.workers / 8).max(1);
        if (free >= batch || (free > 0 && in_flight.is_empty())) && !endpoints.is_empty() {
            let limit = u32::try_from(free).unwrap_or(u32::MAX);
            match app
                .store
                .lease_due(
                    &owner,
                    &endpoints,
                    crate::clock::now_ms(),
                    config.lease,
                    limit,
                )
                .await
            {
                Ok(batch) => {
                    if failures > 0 {
                        tracing::info!(failures, "store reachable again; leasing resumed");
                    }
                    failures = 0;
                    leased = batch.len();
                    for mut event in batch {
                        let Some(endpoint) = app.endpoints.get(&event.endpoint) else {
                            continue;
                        };
                        // A sealing tenant's body is opened only to be sent. One that does
                        // not open (altered at rest) never will: quarantined, with the
                        // reason, not leased again and again.
                        match crate::tenancy::plain_body(&app, &event.endpoint, &event.body) {
                            Ok(std::borrow::Cow::Owned(plain)) => event.body = plain,
                            Ok(std::borrow::Cow::Borrowed(_)) => {}
                            Err(error) => {
                                tracing::error!(endpoint = %event.endpoint, %error, "body does not open; quarantined");
                                let now_ms = crate::clock::now_ms();
                                let record_unopened = Attempted {
                                    record: AttemptRecord {
                                        started_at_ms: now_ms,
                                        ended_at_ms: now_ms,
                                        status: None,
                                        error: Some(format!(
                                            "the sealed body does not open: {error}"
                                        )),
                                    },
                                    next: Next::Quarantined,
                                    endpoint,
                                    event,
                                };
                                record(&mut recording, Some(record_unopened));
                                continue;
                            }
                        }
                        let span = event.span();
                        let within = answer_within(&event, config.lease);
                        in_flight
                            .spawn(deliver(app.clone(), endpoint, event, within).instrument(span));
                    }
                }
                Err(error) => {
                    if failures == 0 {
                        tracing::warn!(%error, "cannot lease events; backing off");
                    }
                    failures = failures.saturating_add(1);
                }
            }
        }
        if leased == 0 {
            let wait = if failures == 0 {
                config.poll
            } else {
                config
                    .poll
                    .saturating_mul(1 << failures.min(16))
                    .min(STORE_BACKOFF_MAX)
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = app.store.due_events() => {}
                // The sender gone means the server is going away: a stop, not a
                // wake-up (else this loop would spin on the closed channel).
                changed = stop.changed() => {
                    if changed.is_err() {
                        break;
                    }
                }
                Some(done) = in_flight.join_next(), if !in_flight.is_empty() => {
                    record(&mut recording, done.ok().flatten());
                }
                Some(_) = recording.join_next(), if !recording.is_empty() => {}
            }
        }
    }
    let drained = tokio::time::timeout(config.grace, async {
        while let Some(done) = in_flight.join_next().await {
            record(&mut recording, done.ok().flatten());
        }
    })
    .await;
    if drained.is_err() {
        // An attempt cut off may have reached the destination, which may still be
        // applying it. Its lease stays until it expires, as a crashed worker's would:
        // given back now, another process could send the event again meanwhile, or
        // send a newer version of its resource that the cut-off one then overtakes.
        tracing::warn!(
            abandoned = in_flight.len(),
            lease_seconds = config.lease.as_secs(),
            "grace period over; deliveries in flight cut off, their leases left to expire"
        );
        in_flight.abort_all();
    }
    // Answers already in are recorded before any lease is given back.
    while recording.join_next().await.is_some() {}
    if drained.is_err() {
        return;
    }
    match app.store.release_leases(&owner).await {
        Ok(0) => {}
        Ok(released) => tracing::info!(released, "leases given back"),
        Err(error) => tracing::warn!(%error, "leases not given back; they expire"),
    }
}

/// One attempt whose answer is in, to be recorded.
struct Attempted {
    /// The endpoint it was leased for: its plugin labels the attempt's metrics.
    endpoint: Arc<Endpoint>,
    event: Leased,
    record: AttemptRecord,
    next: Next,
}

impl Attempted {
    async fn record(self, app: Arc<App>, owner: String) {
        let Attempted {
            endpoint,
            event,
            record,
            next,
        } = self;
        match app
            .store
            .finish_attempt(&event, &owner, &record, &next)
            .await
        {
            Ok(()) => app.metrics.attempted(
                &event.endpoint,
                endpoint.plugin.label(),
                &next,
                event.signed_at,
                record.ended_at_ms,
            ),
            // The lease expires and the event is delivered again: at least once, never lost.
            Err(error) => tracing::error!(%error, "attempt not recorded"),
        }
    }
}

/// How long an attempt (a thin event's fetch included) may take: until three quarters
/// of its lease have passed, counted from the lease's own start (the lease statement
/// may have waited on the store), so that its answer is recorded while the lease still
/// holds and no other worker (nor this one, leasing again) can be delivering the same
/// event meanwhile.
fn answer_within(event: &Leased, lease: Duration) -> Duration {
    let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
    let give_up_at = event.lease_expires_at_ms.saturating_sub(lease_ms / 4);
    let left = give_up_at.saturating_sub(crate::clock::now_ms());
    Duration::from_millis(u64::try_from(left).unwrap_or(0))
}

async fn deliver(
    app: Arc<App>,
    endpoint: Arc<Endpoint>,
    event: Leased,
    within: Duration,
) -> Option<Attempted> {
    let destination = endpoint.destination.as_ref()?;
    let started_at_ms = crate::clock::now_ms();
    let answer = tokio::time::timeout(
        within,
        attempt(&app, &endpoint, destination, &event, within),
    )
    .await
    .unwrap_or_else(|_| Answer::Retry {
        status: None,
        error: format!(
            "no answer within {} ms, by three quarters of the lease; given up while it holds",
            within.as_millis()
        ),
        retry_after: None,
    });
    let ended_at_ms = crate::clock::now_ms();
    let attempt = event.attempts + 1;
    let next = next_step(
        &answer,
        attempt,
        &endpoint.retry_schedule,
        ended_at_ms,
        &event.event_id,
    );
    let (status, error) = match &answer {
        Answer::Delivered(status) => (Some(*status), None),
        Answer::Retry { status, error, .. } => (*status, Some(error.clone())),
        Answer::Permanent { status, error } => {
            (Some(*status).filter(|s| *s != 0), Some(error.clone()))
        }
    };
    tracing::info!(attempt, status, ?next, "delivery attempt");
    let record = AttemptRecord {
        started_at_ms,
        ended_at_ms,
        status,
        error,
    };
    Some(Attempted {
        endpoint,
        event,
        record,
        next,
    })
}

/// One attempt at the destination. A thin event is delivered as its object's current
/// state, fetched now; an object older than the event is not delivered (the attempt
/// fails, and is tried again).
async fn attempt(
    app: &Arc<App>,
    endpoint: &Arc<Endpoint>,
    destination: &Arc<dyn Destination>,
    event: &Leased,
    within: Duration,
) -> Answer {
    match crate::reconcile::fetch_current(app, endpoint, event, within).await {
        Ok(None) => {
            destination
                .deliver(&endpoint.id, endpoint.plugin.name(), event)
                .await
        }
        Ok(Some(fetched))
            if fetched
                .resource_version
                .zip(event.resource_version)
                .is_some_and(|(object, event)| i64::try_from(object).is_ok_and(|o| o < event)) =>
        {
            // A read behind the provider's write (a lagging replica): delivered, it
            // would set the destination back. Tried again on the schedule.
            Answer::Retry {
                status: None,
                error: format!(
                    "the thin event's object was fetched at version {}, older than the \
                     event's {}",
                    fetched.resource_version.unwrap_or_default(),
                    event.resource_version.unwrap_or_default()
                ),
                retry_after: None,
            }
        }
        Ok(Some(fetched)) => {
            let mut current = event.clone();
            current.body = fetched.body;
            current.resource_version = fetched
                .resource_version
                .map(|v| i64::try_from(v).unwrap_or(i64::MAX));
            tracing::info!(version = ?current.resource_version, "delivering the thin event's current object");
            destination
                .deliver(&endpoint.id, endpoint.plugin.name(), &current)
                .await
        }
        Err(failure) => Answer::Retry {
            status: None,
            error: format!("fetching the thin event's current object: {failure}"),
            retry_after: failure.retry_after,
        },
    }
}

/// After attempt number `attempt` (1-based) came back as `answer`: delivered, retry at
/// a time from the schedule (`schedule[attempt]`, with jitter, or the destination's
/// capped `Retry-After` when later), dead when the schedule is spent, or quarantined.
pub fn next_step(
    answer: &Answer,
    attempt: u32,
    schedule: &[Duration],
    now_ms: i64,
    event_id: &str,
) -> Next {
    match answer {
        Answer::Delivered(_) => Next::Delivered,
        Answer::Permanent { .. } => Next::Quarantined,
        Answer::Retry { retry_after, .. } => {
            let Some(base) = schedule.get(attempt as usize) else {
                return Next::Dead;
            };
            let spread = base.mul_f64(JITTER * jitter_unit(event_id, attempt));
            let mut delay = base.saturating_add(spread);
            if let Some(after) = retry_after {
                delay = delay.max((*after).min(MAX_RETRY_AFTER));
            }
            Next::RetryAt(
                now_ms.saturating_add(i64::try_from(delay.as_millis()).unwrap_or(i64::MAX)),
            )
        }
    }
}

/// The name this process's pool leases under, unique among the processes sharing a
/// store: shutdown gives back every lease held under it. The process id and start
/// time alone are not (every container's process may be 1, and two replicas may start
/// in the same millisecond): a random part makes it so.
fn owner_id() -> String {
    use chacha20poly1305::aead::{OsRng, rand_core::RngCore};
    let random = OsRng.next_u64();
    format!(
        "{}-{}-{random:016x}",
        std::process::id(),
        crate::clock::now_ms()
    )
}

/// A number in [0, 1) fixed by the event and attempt: jitter without a random source.
fn jitter_unit(event_id: &str, attempt: u32) -> f64 {
    let digest = Sha256::new()
        .chain_update(event_id.as_bytes())
        .chain_update(attempt.to_le_bytes())
        .finalize();
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    (u64::from_le_bytes(first) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn retry(after: Option<u64>) -> Answer {
        Answer::Retry {
            status: Some(503),
            error: "HTTP 503".into(),
            retry_after: after.map(Duration::from_secs),
        }
    }

    #[test]
    fn the_schedule_then_dead_letter() {
        let schedule: Vec<Duration> = [0, 30, 120].into_iter().map(Duration::from_secs).collect();
        // After attempt 1, wait schedule[1] = 30 s (+ up to 10 %).
        let Next::RetryAt(at) = next_step(&retry(None), 1, &schedule, 1_000, "e") else {
            panic!("retry")
        };
        assert!((31_000..=34_000).contains(&at), "{at}");
        let Next::RetryAt(at) = next_step(&retry(None), 2, &schedule, 0, "e") else {
            panic!("retry")
        };
        assert!((120_000..=132_000).contains(&at), "{at}");
        assert_eq!(next_step(&retry(None), 3, &schedule, 0, "e"), Next::Dead);
    }

    #[test]
    fn retry_after_is_honoured_and_capped_and_outcomes_map() {
        let schedule = vec![Duration::ZERO, Duration::ZERO];
        assert_eq!(
            next_step(&retry(Some(5)), 1, &schedule, 0, "e"),
            Next::RetryAt(5_000)
        );
        assert_eq!(
            next_step(&retry(Some(86_400)), 1, &schedule, 0, "e"),
            Next::RetryAt(3_600_000)
        );
        assert_eq!(
            next_step(&Answer::Delivered(200), 1, &schedule, 0, "e"),
            Next::Delivered
        );
        let refused = Answer::Permanent {
            status: 404,
            error: "HTTP 404".into(),
        };
        assert_eq!(next_step(&refused, 1, &schedule, 0, "e"), Next::Quarantined);
    }

    #[test]
    fn owners_started_together_are_told_apart() {
        let (a, b) = (owner_id(), owner_id());
        assert_ne!(a, b);
        assert!(a.starts_with(&format!("{}-", std::process::id())), "{a}");
    }

    #[test]
    fn jitter_is_spread_and_stable() {
        let a = jitter_unit("evt_1", 1);
        assert_eq!(a, jitter_unit("evt_1", 1));
        assert_ne!(a, jitter_unit("evt_1", 2));
        assert!((0.0..1.0).contains(&a));
    }
}
