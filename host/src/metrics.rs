//! Metrics: what an operator scrapes from the admin listener's `/metrics`.
//!
//! One registry per running server (no process-global state), so two servers in one
//! process count apart. Labels are bounded: endpoint ids and plugin names come from
//! the configuration (a request to an unknown endpoint counts under `endpoint=""`),
//! and outcome reasons are stable codes. No event id or other per-request value is
//! ever a label.

use crate::plugins::PluginFailure;
use crate::store::{Backlog, Next, Outcome};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::{Family, MetricConstructor};
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Metric, Registry};
use std::collections::{HashMap, HashSet};
use std::time::Duration;

/// Every metric hookhost keeps; cheap to share behind an `Arc`.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    signature_failures: Family<EndpointLabels, Counter>,
    secret_matched: Family<SecretLabels, Counter>,
    timestamp_skew: Family<EndpointLabels, Histogram>,
    verification: Family<EndpointLabels, Histogram>,
    receive_to_commit: Family<EndpointLabels, Histogram>,
    attempts: Family<AttemptLabels, Counter>,
    signed_to_delivered: Family<EndpointLabels, Histogram>,
    pending: Family<EndpointOnly, Gauge>,
    oldest_pending: Family<EndpointOnly, Gauge>,
    forensics: Family<ForensicsLabels, Counter>,
    reconcile_runs: Family<RunLabels, Counter>,
    reconciled: Family<ReconciledLabels, Counter>,
    plugin_calls: PluginCalls,
    /// Each endpoint's plugin ignore reasons counted under a label of their own.
    reasons: std::sync::Mutex<HashMap<String, HashSet<String>>>,
    /// The endpoints the backlog gauges were last set for.
    backlog_endpoints: std::sync::Mutex<HashSet<String>>,
    /// Each endpoint's series, to remove once it is gone.
    series: EndpointSeries,
}

/// Removes one series from its family.
type Remover = Box<dyn Fn() + Send + Sync>;

/// What removes each endpoint's series, recorded as each is made: a family cannot
/// list its label sets, and a tenant that creates and deletes endpoints in a loop
/// would otherwise grow `/metrics` without bound.
#[derive(Default)]
struct EndpointSeries(std::sync::Mutex<HashMap<String, Vec<Remover>>>);

impl std::fmt::Debug for EndpointSeries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EndpointSeries").finish_non_exhaustive()
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RunLabels {
    endpoint: String,
    /// `done` or `failed`.
    state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReconciledLabels {
    endpoint: String,
    /// What a run found of the listed events: `present`, or `repaired` (stored, or
    /// redelivery asked for).
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ForensicsLabels {
    endpoint: String,
    plugin: String,
    /// `failed` (verified, then a 5xx) or `rejected`.
    kind: &'static str,
    /// `kept`, or `dropped` (the queue of rejected requests was full, or a failed
    /// request could not be stored).
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointOnly {
    endpoint: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct AttemptLabels {
    endpoint: String,
    plugin: String,
    /// What the attempt led to: `delivered`, `retry`, `dead` or `quarantined`.
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct EndpointLabels {
    endpoint: String,
    plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    endpoint: String,
    plugin: String,
    /// `accepted`, `duplicate`, `ignored`, `handshake` or `error`.
    outcome: &'static str,
    /// Why it was ignored, or the error's stable code; empty otherwise.
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct SecretLabels {
    endpoint: String,
    plugin: String,
    /// `current` (the first active secret) or `previous` (any other).
    generation: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CallLabels {
    plugin: String,
    /// `plan-verification`, `describe-event` or `handshake`.
    call: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct FailureLabels {
    plugin: String,
    /// `trap`, `timeout`, `memory`, `handles`, `output_too_large` or `instantiate`.
    kind: &'static str,
}

/// Each plugin's calls: latency per call and failures by kind. Plugins hold a clone
/// (the families are shared handles) and count their own calls.
#[derive(Debug, Clone)]
pub struct PluginCalls {
    seconds: Family<CallLabels, Histogram>,
    failures: Family<FailureLabels, Counter>,
}

impl PluginCalls {
    /// One call of `plugin` took `took`; `failure` when it produced no answer.
    pub fn observe(
        &self,
        plugin: &str,
        call: &'static str,
        took: Duration,
        failure: Option<&PluginFailure>,
    ) {
        self.seconds
            .get_or_create(&CallLabels {
                plugin: plugin.to_owned(),
                call,
            })
            .observe(took.as_secs_f64());
        if let Some(failure) = failure {
            self.failed(plugin, failure);
        }
    }

    /// A call or an instance of `plugin` failed.
    pub fn failed(&self, plugin: &str, failure: &PluginFailure) {
        let kind = match failure {
            PluginFailure::Timeout => "timeout",
            PluginFailure::Memory => "memory",
            PluginFailure::Handles => "handles",
            PluginFailure::OutputTooLarge(_) => "output_too_large",
            PluginFailure::Trap(_) => "trap",
            PluginFailure::Instantiate(_) => "instantiate",
            PluginFailure::Busy => "busy",
        };
        self.failures
            .get_or_create(&FailureLabels {
                plugin: plugin.to_owned(),
                kind,
            })
            .inc();
    }
}

/// How one request ended, as counted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestOutcome {
    Stored(Outcome),
    Handshake,
    /// The stable error code the sender was answered with.
    Error(&'static str),
}

/// Longest reason label kept from a plugin's ignore reason.
const REASON_LABEL_MAX: usize = 64;
/// Distinct plugin ignore reasons an endpoint's requests are counted under; later
/// new ones are counted as `other`.
const REASONS_PER_ENDPOINT: usize = 32;

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::with_prefix("hookhost");
        let r = &mut registry;
        let requests = registered(
            r,
            "requests",
            "Requests to the ingest route, by how they ended",
            Family::default(),
        );
        let signature_failures = registered(
            r,
            "signature_failures",
            "Requests whose signature matched no active secret",
            Family::default(),
        );
        let secret_matched = registered(
            r,
            "secret_matched",
            "Verified requests by the generation of the secret that matched; when \
             `previous` stays at zero, the old secret may be revoked",
            Family::default(),
        );
        let timestamp_skew = registered(
            r,
            "timestamp_skew_seconds",
            "Distance between an authentic request's signed timestamp and its arrival, \
             inside the window or outside it (then answered 400 timestamp_outside_window)",
            Family::new_with_constructor(skew_buckets as fn() -> _),
        );
        let verification = registered(
            r,
            "verification_seconds",
            "Time to verify a request on a plugin thread: both plugin calls and the \
             host's signature and timestamp checks",
            Family::new_with_constructor(verification_buckets as fn() -> _),
        );
        let receive_to_commit = registered(
            r,
            "receive_to_commit_seconds",
            "From a request's body being read to its receipt being durable",
            Family::new_with_constructor(commit_buckets as fn() -> _),
        );
        let attempts = registered(
            r,
            "delivery_attempts",
            "Delivery attempts recorded, by what each led to: `retry` counts retries, \
             `dead` dead letters, `quarantined` events the destination refused for good",
            Family::default(),
        );
        let signed_to_delivered = registered(
            r,
            "signed_to_delivered_seconds",
            "From the provider's signed timestamp to the destination's 2xx",
            Family::new_with_constructor(signed_to_delivered_buckets as fn() -> _),
        );
        let pending = registered(
            r,
            "pending_events",
            "Events accepted and not yet delivered, dead, quarantined or discarded",
            Family::default(),
        );
        let oldest_pending = registered(
            r,
            "oldest_pending_age_seconds",
            "How long ago the oldest pending event was received",
            Family::default(),
        );
        let forensics = registered(
            r,
            "forensics",
            "Requests refused after their body was read, kept for forensics (or \
             dropped), by kind",
            Family::default(),
        );
        let reconcile_runs = registered(
            r,
            "reconcile_runs",
            "Reconciliation runs that ended, by state (done, failed)",
            Family::default(),
        );
        let reconciled = registered(
            r,
            "reconciled_events",
            "Events the provider's API listed, by what a run found: present (received) \
             or repaired (missing: stored, or its redelivery asked for)",
            Family::default(),
        );
        let plugin_calls = PluginCalls {
            seconds: registered(
                r,
                "plugin_call_seconds",
                "Time of one plugin call, by plugin and call",
                Family::new_with_constructor(verification_buckets as fn() -> _),
            ),
            failures: registered(
                r,
                "plugin_failures",
                "Plugin calls and instances that produced no answer, by kind",
                Family::default(),
            ),
        };
        Metrics {
            registry,
            plugin_calls,
            reasons: Default::default(),
            backlog_endpoints: Default::default(),
            series: EndpointSeries::default(),
            requests,
            signature_failures,
            secret_matched,
            timestamp_skew,
            verification,
            receive_to_commit,
            attempts,
            signed_to_delivered,
            pending,
            oldest_pending,
            forensics,
            reconcile_runs,
            reconciled,
        }
    }
}

/// Register `metric` as `name` and keep a handle to it (metrics are shared handles).
fn registered<M: Metric + Clone>(registry: &mut Registry, name: &str, help: &str, metric: M) -> M {
    registry.register(name, help, metric.clone());
    metric
}

/// 0.5 s … ~4.5 h: from clock drift to a provider's retries of an old event.
fn skew_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.5, 2.0, 16))
}

/// 10 µs … ~5 s.
fn verification_buckets() -> Histogram {
    Histogram::new(exponential_buckets(1e-5, 2.0, 20))
}

/// 100 µs … ~6.5 s.
fn commit_buckets() -> Histogram {
    Histogram::new(exponential_buckets(1e-4, 2.0, 17))
}

/// 1 s … ~9 h (seconds resolution: the signed timestamp is in whole seconds).
fn signed_to_delivered_buckets() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 16))
}

impl Metrics {
    /// Metrics that also count the calls of every plugin in `plugins`.
    pub fn counting<'a>(plugins: impl IntoIterator<Item = &'a crate::plugins::Plugin>) -> Metrics {
        let metrics = Metrics::default();
        for plugin in plugins {
            plugin.count_calls_in(&metrics.plugin_calls);
        }
        metrics
    }

    /// Where plugins loaded at runtime count their calls.
    pub fn plugin_calls(&self) -> &PluginCalls {
        &self.plugin_calls
    }

    /// Show how much of the uploaded plugins' code this process keeps loaded.
    pub fn watch_uploaded(&mut self, residency: &crate::plugins::Residency) {
        let registry = &mut self.registry;
        registered(
            registry,
            "uploaded_plugin_loads",
            "Uploaded plugins' code loaded (from the disk cache or compiled) on first use",
            residency.loads.clone(),
        );
        registered(
            registry,
            "uploaded_plugin_evictions",
            "Uploaded plugins' code dropped to stay within resident_plugin_bytes",
            residency.evictions.clone(),
        );
        registered(
            registry,
            "uploaded_plugin_resident_bytes",
            "Bytes of uploaded plugins' compiled code loaded now",
            residency.resident_bytes.clone(),
        );
        registered(
            registry,
            "uploaded_plugins_resident",
            "Uploaded plugins whose code is loaded now",
            residency.resident_plugins.clone(),
        );
    }

    /// Count one request to the ingest route. `endpoint` and `plugin` are empty when
    /// the endpoint is unknown.
    pub fn request(&self, endpoint: &str, plugin: &str, outcome: &RequestOutcome) {
        let (kind, reason) = match outcome {
            RequestOutcome::Stored(stored) => match (stored, stored.ignored_reason()) {
                (Outcome::Ignored(reason), _) => ("ignored", self.plugin_reason(endpoint, reason)),
                (_, Some(reason)) => ("ignored", reason.to_owned()),
                (Outcome::Duplicate, None) => ("duplicate", String::new()),
                (_, None) => ("accepted", String::new()),
            },
            RequestOutcome::Handshake => ("handshake", String::new()),
            RequestOutcome::Error(code) => ("error", (*code).to_owned()),
        };
        let labels = RequestLabels {
            endpoint: endpoint.to_owned(),
            plugin: plugin.to_owned(),
            outcome: kind,
            reason,
        };
        self.series(&self.requests, endpoint, &labels).inc();
        if *outcome == RequestOutcome::Error("invalid_signature") {
            let labels = endpoint_labels(endpoint, plugin);
            self.series(&self.signature_failures, endpoint, &labels)
                .inc();
        }
    }

    /// An authentic request's signed timestamp was `skew_seconds` from its arrival,
    /// outside the window.
    pub fn outside_window(&self, endpoint: &str, plugin: &str, skew_seconds: u64) {
        let labels = endpoint_labels(endpoint, plugin);
        self.series(&self.timestamp_skew, endpoint, &labels)
            .observe(skew_seconds as f64);
    }

    /// A request passed verification: which secret matched, how far its signed
    /// timestamp was from its arrival (when it has one), and how long verifying took.
    pub fn verified(
        &self,
        endpoint: &str,
        plugin: &str,
        secret_index: usize,
        skew_seconds: Option<i64>,
        took: Duration,
    ) {
        let labels = endpoint_labels(endpoint, plugin);
        let generation = if secret_index == 0 {
            "current"
        } else {
            "previous"
        };
        let secret = SecretLabels {
            endpoint: labels.endpoint.clone(),
            plugin: labels.plugin.clone(),
            generation,
        };
        self.series(&self.secret_matched, endpoint, &secret).inc();
        if let Some(skew) = skew_seconds {
            self.series(&self.timestamp_skew, endpoint, &labels)
                .observe(skew.unsigned_abs() as f64);
        }
        self.series(&self.verification, endpoint, &labels)
            .observe(took.as_secs_f64());
    }

    /// A receipt became durable `took` after its body was read.
    pub fn committed(&self, endpoint: &str, plugin: &str, took: Duration) {
        let labels = endpoint_labels(endpoint, plugin);
        self.series(&self.receive_to_commit, endpoint, &labels)
            .observe(took.as_secs_f64());
    }

    /// A delivery attempt was recorded, leading to `next`. `signed_at` is the
    /// provider's signed timestamp (unix seconds), when its scheme signs one.
    pub fn attempted(
        &self,
        endpoint: &str,
        plugin: &str,
        next: &Next,
        signed_at: Option<i64>,
        ended_at_ms: i64,
    ) {
        let result = match next {
            Next::Delivered => "delivered",
            Next::RetryAt(_) => "retry",
            Next::Dead => "dead",
            Next::Quarantined => "quarantined",
        };
        let labels = AttemptLabels {
            endpoint: endpoint.to_owned(),
            plugin: plugin.to_owned(),
            result,
        };
        self.series(&self.attempts, endpoint, &labels).inc();
        if let (Next::Delivered, Some(signed_at)) = (next, signed_at) {
            let seconds = (ended_at_ms as f64 / 1000.0 - signed_at as f64).max(0.0);
            let labels = endpoint_labels(endpoint, plugin);
            self.series(&self.signed_to_delivered, endpoint, &labels)
                .observe(seconds);
        }
    }

    /// Set the backlog gauges from the store's answer, at `now_ms`; an endpoint
    /// missing from `backlog` has nothing pending.
    pub fn backlog(&self, endpoints: &[String], backlog: &[Backlog], now_ms: i64) {
        // An endpoint deleted, or no longer delivering, loses its series: left, they
        // would hold their last values for ever (a backlog that never drains).
        let mut shown = self
            .backlog_endpoints
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for gone in shown.iter().filter(|e| !endpoints.contains(e)) {
            let labels = EndpointOnly {
                endpoint: gone.clone(),
            };
            self.pending.remove(&labels);
            self.oldest_pending.remove(&labels);
        }
        *shown = endpoints.iter().cloned().collect();
        for endpoint in endpoints {
            let labels = EndpointOnly {
                endpoint: endpoint.clone(),
            };
            let (count, oldest) = backlog
                .iter()
                .find(|(id, ..)| id == endpoint)
                .map_or((0, None), |&(_, count, oldest)| (count, Some(oldest)));
            self.pending.get_or_create(&labels).set(count);
            let age = oldest.map_or(0, |oldest| (now_ms - oldest).max(0) / 1000);
            self.oldest_pending.get_or_create(&labels).set(age);
        }
    }

    /// A refused request of `kind` was kept for forensics (`kept`) or not.
    pub fn forensics(&self, endpoint: &str, plugin: &str, kind: &'static str, kept: bool) {
        let labels = ForensicsLabels {
            endpoint: endpoint.to_owned(),
            plugin: plugin.to_owned(),
            kind,
            result: if kept { "kept" } else { "dropped" },
        };
        self.series(&self.forensics, endpoint, &labels).inc();
    }

    /// A reconciliation run of `endpoint` ended: its state, and how many listed events
    /// it found present and repaired (a dry run repairs nothing).
    pub fn reconciled(&self, run: &crate::store::RunRow) {
        let labels = RunLabels {
            endpoint: run.endpoint.clone(),
            state: run.state.clone(),
        };
        self.series(&self.reconcile_runs, &run.endpoint, &labels)
            .inc();
        let count = |result, n: i64| {
            let labels = ReconciledLabels {
                endpoint: run.endpoint.clone(),
                result,
            };
            self.series(&self.reconciled, &run.endpoint, &labels)
                .inc_by(u64::try_from(n).unwrap_or(0));
        };
        count("present", run.present);
        if !run.dry_run {
            count("repaired", run.repaired);
        }
    }

    /// `family`'s series of `endpoint` with `labels`, made if it is new, and then
    /// recorded for [`Metrics::forget_gone`].
    fn series<'a, S, M, C>(
        &self,
        family: &'a Family<S, M, C>,
        endpoint: &str,
        labels: &S,
    ) -> impl std::ops::Deref<Target = M> + 'a
    where
        S: Clone + std::hash::Hash + Eq + Send + Sync + 'static,
        M: Send + Sync + 'static,
        C: MetricConstructor<M> + Clone + Send + Sync + 'static,
    {
        if let Some(series) = family.get(labels) {
            return series;
        }
        // Recorded once made: recorded first, it could be removed by a scrape before
        // it exists, and then made, never to be removed.
        let series = family.get_or_create(labels);
        let (family_of_it, its_labels) = (family.clone(), labels.clone());
        self.series
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(endpoint.to_owned())
            .or_default()
            .push(Box::new(move || {
                family_of_it.remove(&its_labels);
            }));
        series
    }

    /// Remove the series of every endpoint that `exists` no longer knows, and forget
    /// its ignore reasons. Requests to an unknown endpoint (`endpoint=""`) keep theirs.
    pub fn forget_gone(&self, exists: impl Fn(&str) -> bool) {
        let gone: Vec<Vec<Remover>> = {
            let mut series = self
                .series
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let ids: Vec<String> = series
                .keys()
                .filter(|id| !id.is_empty() && !exists(id))
                .cloned()
                .collect();
            let mut reasons = self
                .reasons
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            ids.iter()
                .map(|id| {
                    reasons.remove(id);
                    series.remove(id).unwrap_or_default()
                })
                .collect()
        };
        for remove in gone.iter().flatten() {
            remove();
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

fn endpoint_labels(endpoint: &str, plugin: &str) -> EndpointLabels {
    EndpointLabels {
        endpoint: endpoint.to_owned(),
        plugin: plugin.to_owned(),
    }
}

impl Metrics {
    /// A plugin's ignore reason as a label: its first [`REASON_LABEL_MAX`] characters
    /// of `[a-z0-9_.-]` (others become `_`), and only the first
    /// [`REASONS_PER_ENDPOINT`] distinct ones of an endpoint; after them, `other`. A
    /// reason may be a body's own text (the generic plugin ignores by a field's value),
    /// and every label set is a series kept for the life of the process.
    fn plugin_reason(&self, endpoint: &str, reason: &str) -> String {
        let label = reason_label(reason);
        let mut reasons = self
            .reasons
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let known = reasons.entry(endpoint.to_owned()).or_default();
        if known.contains(&label) {
            return label;
        }
        if known.len() < REASONS_PER_ENDPOINT {
            known.insert(label.clone());
            return label;
        }
        "other".to_owned()
    }
}

fn reason_label(reason: &str) -> String {
    reason
        .chars()
        .take(REASON_LABEL_MAX)
        .map(|c| match c {
            'a'..='z' | '0'..='9' | '_' | '.' | '-' => c,
            'A'..='Z' => c.to_ascii_lowercase(),
            _ => '_',
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endpoints_distinct_ignore_reasons_are_bounded_and_the_rest_are_other() {
        let metrics = Metrics::default();
        for endpoint in ["a", "b"] {
            for i in 0..40 {
                let outcome = RequestOutcome::Stored(Outcome::Ignored(format!("test.{i}")));
                metrics.request(endpoint, "generic", &outcome);
            }
        }
        // The store's own codes are never bounded.
        metrics.request(
            "a",
            "generic",
            &RequestOutcome::Stored(Outcome::StaleVersion),
        );
        let text = metrics.render();
        let series = |endpoint: &str| {
            text.lines()
                .filter(|l| l.starts_with("hookhost_requests_total{"))
                .filter(|l| l.contains(&format!("endpoint=\"{endpoint}\"")))
                .count()
        };
        assert_eq!(series("a"), REASONS_PER_ENDPOINT + 2, "{text}");
        assert_eq!(series("b"), REASONS_PER_ENDPOINT + 1, "{text}");
        assert!(text.contains(r#"reason="test.31"} 1"#), "{text}");
        assert!(!text.contains(r#"reason="test.32""#), "{text}");
        assert!(
            text.contains(r#"endpoint="b",plugin="generic",outcome="ignored",reason="other"} 8"#),
            "{text}"
        );
        assert!(text.contains(r#"reason="stale_version"} 1"#), "{text}");
    }

    #[test]
    fn a_gone_endpoints_series_are_removed_and_the_others_kept() {
        let metrics = Metrics::default();
        for endpoint in ["a", "b", ""] {
            let ignored = RequestOutcome::Stored(Outcome::Ignored("test.reason".into()));
            metrics.request(endpoint, "generic", &ignored);
            metrics.request(
                endpoint,
                "generic",
                &RequestOutcome::Error("invalid_signature"),
            );
            metrics.outside_window(endpoint, "generic", 400);
            metrics.verified(endpoint, "generic", 1, Some(3), Duration::from_micros(5));
            metrics.committed(endpoint, "generic", Duration::from_millis(1));
            metrics.attempted(endpoint, "generic", &Next::Delivered, Some(1), 2_000);
            metrics.forensics(endpoint, "generic", "rejected", true);
            let mut run = crate::store::RunRow::begun("r".into(), endpoint, 0, false, 0);
            run.state = "done".into();
            metrics.reconciled(&run);
        }
        let series = |text: &str, endpoint: &str| {
            let label = format!("endpoint=\"{endpoint}\"");
            text.lines()
                .filter(|l| !l.starts_with('#') && l.contains(&label))
                .count()
        };
        let before = metrics.render();
        // Every family above, histograms with their buckets.
        assert!(series(&before, "b") > 40, "{before}");
        metrics.forget_gone(|id| id == "a");
        let after = metrics.render();
        assert_eq!(series(&after, "b"), 0, "{after}");
        assert_eq!(series(&after, "a"), series(&before, "a"), "{after}");
        assert_eq!(series(&after, ""), series(&before, ""), "{after}");
        // Its ignore reasons are forgotten with it: one created again under the id
        // has its own allowance.
        assert!(!metrics.reasons.lock().expect("reasons").contains_key("b"));
        metrics.request("b", "generic", &RequestOutcome::Handshake);
        let again = metrics.render();
        assert_eq!(series(&again, "b"), 1, "{again}");
    }

    #[test]
    fn an_endpoint_no_longer_delivering_loses_its_backlog_gauges() {
        let metrics = Metrics::default();
        let both = ["a".to_string(), "b".to_string()];
        metrics.backlog(&both, &[("a".into(), 3, 0), ("b".into(), 5, 0)], 60_000);
        let text = metrics.render();
        assert!(
            text.contains(r#"hookhost_pending_events{endpoint="b"} 5"#),
            "{text}"
        );
        metrics.backlog(&both[..1], &[("a".into(), 2, 0)], 60_000);
        let text = metrics.render();
        assert!(
            text.contains(r#"hookhost_pending_events{endpoint="a"} 2"#),
            "{text}"
        );
        assert!(!text.contains(r#"endpoint="b""#), "{text}");
    }
}
