//! `hookhost spec --endpoint ID`: one endpoint's consumer contract, as Markdown.
//!
//! Generated from what the server itself uses: the configuration, the endpoint as
//! built from it (plugin, decoded secrets, window, schedule) and the plugin's `info()`.
//! The scheme's headers and signed string are what the plugin plans for the latest
//! stored request. So the spec cannot drift from the running configuration. It never
//! shows a secret, a signature or a header's value.

use crate::config::{Config, EndpointConfig};
use crate::endpoints::Endpoint;
use crate::store::ReceiptRow;
use base64::Engine as _;
use hookhost_plugin_sdk::{Algorithm, Candidate, Part, Plan};
use std::time::Duration;

/// How far back `secret_use` looks.
pub const SECRET_USE_WINDOW: Duration = Duration::from_secs(7 * 24 * 3600);

/// What the store and the plugin say about an endpoint, beside its configuration.
#[derive(Debug, Default)]
pub struct Observed {
    /// (secret index, receipts) over [`SECRET_USE_WINDOW`].
    pub secret_use: Vec<(i64, i64)>,
    /// The latest stored request and the plugin's plan for it, when there is one.
    pub latest: Option<(ReceiptRow, Plan)>,
    /// What the plugin can pull from the provider's API for this endpoint.
    pub reconcile: Option<hookhost_plugin_sdk::ReconcileInfo>,
    /// The endpoint's latest reconciliation run.
    pub last_run: Option<crate::store::RunRow>,
}

/// The endpoint's contract, as Markdown.
pub fn render(
    config: &Config,
    endpoint_config: &EndpointConfig,
    endpoint: &Endpoint,
    observed: &Observed,
) -> String {
    let plugin = &endpoint.plugin;
    let info = &plugin.info;
    let mut md = String::new();
    let mut line = |text: String| {
        md.push_str(&text);
        md.push('\n');
    };
    line(format!("# Endpoint `{}`\n", endpoint.id));
    line(format!(
        "Senders POST to `{}/webhooks/{}`.\n",
        config.public_url, endpoint.id
    ));

    line("## Provider and plugin\n".into());
    line(format!("- provider: {}", info.provider));
    line(format!(
        "- plugin: `{}` {} (contract {}, {})",
        info.name,
        info.version,
        plugin.contract(),
        match &plugin.origin {
            crate::plugins::Origin::Builtin => "built-in".to_string(),
            other => format!("from {other}"),
        }
    ));
    line(format!("- sha256: `{}`\n", plugin.digest));

    line("## Signature\n".into());
    let algorithms: Vec<String> = plugin.algorithms.iter().map(algorithm).collect();
    line(format!(
        "- algorithm: {}",
        if algorithms.is_empty() {
            "as the plugin plans per request".to_string()
        } else {
            algorithms.join(", ")
        }
    ));
    line(format!(
        "- secret format: {}",
        info.key_formats
            .iter()
            .map(|f| format!("{f:?}"))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    match &observed.latest {
        Some((receipt, plan)) => {
            let headers: Vec<(String, String)> =
                serde_json::from_str(&receipt.headers).unwrap_or_default();
            line(format!(
                "- signed string (as planned for the latest stored event, `{}`): {}",
                receipt.event_id,
                signed_string(&plan.message)
            ));
            let carriers = carrying_headers(&headers, &plan.candidates);
            if !carriers.is_empty() {
                line(format!("- signature header: `{}`", carriers.join("`, `")));
            }
        }
        None => {
            line("- signed string and headers: shown once a request has been stored".to_string())
        }
    }
    line(String::new());

    line("## Secrets and rotation\n".into());
    line(format!(
        "- active secrets: {} (the first is current; any other still verifies during a rotation)",
        endpoint.keys.len()
    ));
    let days = SECRET_USE_WINDOW.as_secs() / 86_400;
    if observed.secret_use.is_empty() {
        line(format!("- matched in the last {days} days: nothing stored"));
    } else {
        for (index, count) in &observed.secret_use {
            let which = if *index == 0 {
                "current".to_string()
            } else {
                format!("previous #{index}")
            };
            line(format!(
                "- matched in the last {days} days: {which}, {count} requests"
            ));
        }
        if endpoint.keys.len() > 1 && observed.secret_use.iter().all(|(i, _)| *i == 0) {
            line(
                "- no request in that time matched a previous secret: it may be revoked"
                    .to_string(),
            );
        }
    }
    line(String::new());

    line("## Freshness\n".into());
    match endpoint.tolerance_seconds {
        Some(window) => line(format!(
            "- signed timestamp within ±{window} s of arrival{}, else 400 `timestamp_outside_window`\n",
            if endpoint_config.tolerance.is_some() {
                " (this endpoint's setting)"
            } else {
                " (the plugin's default)"
            }
        )),
        None => line("- no timestamp window: the scheme signs no time\n".to_string()),
    }

    line("## Idempotency\n".into());
    line(
        "- key: (endpoint, event id); the event id is the plugin's, else `sha256:` of the \
         signed message"
            .to_string(),
    );
    line(
        "- the same id with the same body: 200 `duplicate`; with another body: 200 \
         `conflicting_duplicate`, the first kept and the second quarantined"
            .to_string(),
    );
    let kept = config.retention.delivered;
    line(format!(
        "- receipts of delivered events are kept {}; dead letters {}",
        human(kept),
        config
            .retention
            .dead
            .map_or("until an operator acts".to_string(), human)
    ));
    line(format!(
        "- the provider's retries: {}",
        info.retry_behaviour
    ));
    if let Some(window) = retry_window(&info.retry_behaviour)
        && kept < window
    {
        line(format!(
            "- **warning:** receipts are kept {} but the provider may retry for {}: a retry \
             after its receipt is purged is accepted and delivered again",
            human(kept),
            human(window)
        ));
    }
    line(String::new());

    line("## Status codes\n".into());
    line("| code | answer | sender should |\n| --- | --- | --- |".into());
    for (code, answer, should) in STATUS_TABLE {
        line(format!("| {code} | {answer} | {should} |"));
    }
    line(String::new());

    line("## Ordering\n".into());
    line(
        "- events naming a resource and a version: an older version than the one accepted \
         is stored as `stale_version` and never delivered; the same version under another \
         id is accepted and delivered after it; after a delete, older events are \
         `stale_version`, and unversioned ones and those at the delete's version \
         `resource_deleted`"
            .to_string(),
    );
    line(
        "- delivery: one event of a resource at a time, in version order (then arrival)\n"
            .to_string(),
    );

    line("## Delivery\n".into());
    match &endpoint_config.destination {
        Some(destination) => {
            line(format!(
                "- to `{}`, signed with Standard Webhooks headers",
                destination.url
            ));
            let schedule: Vec<String> = endpoint.retry_schedule.iter().map(|d| human(*d)).collect();
            line(format!(
                "- attempts after: {} ({} in all)",
                schedule.join(", "),
                schedule.len()
            ));
            line(
                "- retried on 408, 425, 429, 5xx, a refused connection or a timeout; after \
                 the last attempt, a dead letter (`hookhost dlq list`); any other non-2xx answer is \
                 quarantined at once; both can be replayed under their original id"
                    .to_string(),
            );
        }
        None => line("- no destination: accepted events wait in the inbox".to_string()),
    }

    line("\n## Reconciliation\n".into());
    let lists = observed.reconcile.as_ref().filter(|i| i.lists_events);
    let fetches = observed.reconcile.as_ref().filter(|i| i.fetches_objects);
    match (&endpoint.reconcile, lists) {
        (None, _) => line(format!(
            "- not configured: events that never arrived are not looked for{}",
            if lists.is_some() {
                " (the plugin can list them: add `[endpoint.reconcile]`)"
            } else {
                ""
            }
        )),
        (Some(_), None) => line("- the plugin does not list the provider's events".into()),
        (Some(settings), Some(info)) => {
            let base = settings.api_base.as_deref().unwrap_or(&info.api_base);
            line(format!(
                "- lists the provider's events from `{base}`; the credential is sent \
                 only there and to {}",
                info.hosts
                    .iter()
                    .map(|h| format!("`{h}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            line(format!(
                "- {}, looking back {}; at most {} requests/s",
                match settings.every {
                    Some(every) => format!("every {}", human(every)),
                    None => "on demand (`hookhost reconcile`)".into(),
                },
                human(settings.lookback),
                settings.requests_per_second
            ));
            line(
                "- a missing event is stored (`source = reconcile`) or redelivered by the \
                 provider, then delivered like a push"
                    .into(),
            );
        }
    }
    if endpoint.reconcile.is_some() && fetches.is_some() {
        line("- thin events: each delivery fetches the object's current state".into());
    }
    if let Some(run) = &observed.last_run {
        line(format!(
            "- last run: `{}`, {}: {} listed, {} present, {} repaired",
            run.id, run.state, run.seen, run.present, run.repaired
        ));
    }
    md
}

/// The status-code contract, as the README states it.
pub(crate) const STATUS_TABLE: &[(&str, &str, &str)] = &[
    (
        "200",
        "`accepted`, `duplicate`, or `ignored` with a reason",
        "stop",
    ),
    (
        "400",
        "`missing_signature`, `invalid_signature`, `timestamp_outside_window`, `malformed_body`, `unsupported`, `body_unreadable`",
        "stop",
    ),
    ("403", "`handshake_refused`", "stop"),
    ("404", "`unknown_endpoint`", "stop"),
    ("405", "`method_not_allowed`", "stop"),
    ("408", "`body_timeout`", "retry"),
    ("413", "`body_too_large`", "stop"),
    ("422", "`event_rejected`", "stop"),
    (
        "429",
        "`overloaded` (the store is far behind), `rate_limited` (a tenant's rate), with `Retry-After`",
        "back off, retry",
    ),
    ("500", "`plugin_failed`", "retry"),
    ("503", "`store_unavailable`", "retry"),
];

fn algorithm(a: &Algorithm) -> String {
    match a {
        Algorithm::HmacSha1 => "HMAC-SHA1",
        Algorithm::HmacSha256 => "HMAC-SHA256",
        Algorithm::HmacSha512 => "HMAC-SHA512",
        Algorithm::Ed25519 => "Ed25519",
        Algorithm::EcdsaP256Sha256 => "ECDSA P-256 with SHA-256",
        Algorithm::Token => "a shared token, compared in constant time",
        Algorithm::Sha256SecretPrefix => "SHA-256 of the secret then the message",
    }
    .to_string()
}

/// The signed message's parts; text parts verbatim (they are what the sender sent).
fn signed_string(parts: &[Part]) -> String {
    let shown: Vec<String> = parts
        .iter()
        .map(|part| match part {
            Part::Text(text) => format!("`{text}`"),
            Part::Bytes(bytes) => format!("‹{} bytes›", bytes.len()),
            Part::Body => "‹raw body›".to_string(),
            Part::Header(name) => format!("‹header `{name}`›"),
            Part::Url => "‹request URL›".to_string(),
            Part::Method => "‹method›".to_string(),
        })
        .collect();
    shown.join(" + ")
}

/// Names of the headers whose value holds a candidate signature (hex, base64, or as
/// it is: a token scheme's candidate is the token), in the headers' order.
pub(crate) fn carrying_headers(
    headers: &[(String, String)],
    candidates: &[Candidate],
) -> Vec<String> {
    // Each candidate's spellings are made once, and each header lower-cased once: the
    // search is linear in the header's length for every spelling.
    let written: Vec<Written> = candidates
        .iter()
        .filter_map(|c| Written::of(&c.signature))
        .collect();
    let mut names: Vec<String> = Vec::new();
    for (name, value) in headers {
        if names.contains(name) {
            continue;
        }
        let lower = value.to_ascii_lowercase();
        if written
            .iter()
            .any(|w| w.in_value(value.as_bytes(), lower.as_bytes()))
        {
            names.push(name.clone());
        }
    }
    names
}

/// Whether a header value holds a candidate signature as senders write one: hex (either
/// case), base64 (standard or URL-safe), or as it is (a token scheme's token).
pub(crate) fn holds(value: &[u8], signature: &[u8]) -> bool {
    Written::of(signature).is_some_and(|w| w.in_value(value, &value.to_ascii_lowercase()))
}

/// A candidate signature in the spellings a header may carry it in.
struct Written<'a> {
    /// Lower-case hex, standard base64, URL-safe base64 without padding.
    encoded: [Vec<u8>; 3],
    raw: &'a [u8],
}

impl<'a> Written<'a> {
    fn of(signature: &'a [u8]) -> Option<Self> {
        if signature.is_empty() {
            return None;
        }
        use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
        Some(Self {
            encoded: [
                hex::encode(signature).into_bytes(),
                STANDARD.encode(signature).into_bytes(),
                URL_SAFE_NO_PAD.encode(signature).into_bytes(),
            ],
            raw: signature,
        })
    }

    /// In `value`, or (an encoding) in `lower`, the value lower-cased: upper-case hex.
    fn in_value(&self, value: &[u8], lower: &[u8]) -> bool {
        let found =
            |haystack: &[u8], needle: &[u8]| memchr::memmem::find(haystack, needle).is_some();
        self.encoded
            .iter()
            .any(|e| found(value, e) || found(lower, e))
            || found(value, self.raw)
    }
}

/// The longest span a retry note names ("up to 3 days", "over 72 hours").
fn retry_window(note: &str) -> Option<Duration> {
    let words: Vec<&str> = note
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .filter_map(|pair| {
            let n: u64 = pair[0].parse().ok()?;
            let unit = match pair[1].trim_end_matches('s') {
                "minute" => 60,
                "hour" => 3_600,
                "day" => 86_400,
                "week" => 7 * 86_400,
                _ => return None,
            };
            Some(Duration::from_secs(n.saturating_mul(unit)))
        })
        .max()
}

fn human(d: Duration) -> String {
    let s = d.as_secs();
    let (n, unit) = if s == 0 {
        (0, "s")
    } else if s.is_multiple_of(86_400) {
        (s / 86_400, "d")
    } else if s.is_multiple_of(3_600) {
        (s / 3_600, "h")
    } else if s.is_multiple_of(60) {
        (s / 60, "min")
    } else {
        (s, "s")
    };
    format!("{n} {unit}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_notes_give_their_longest_span() {
        assert_eq!(
            retry_window(
                "live mode: up to 3 days with exponential backoff; sandbox: 3 times over a few hours"
            ),
            Some(Duration::from_secs(3 * 86_400))
        );
        assert_eq!(
            retry_window("19 times over 48 hours"),
            Some(Duration::from_secs(48 * 3_600))
        );
        assert_eq!(retry_window("no retries"), None);
        // A drop-in plugin's note is its author's text: no number overflows it.
        assert_eq!(
            retry_window("for 18446744073709551615 weeks"),
            Some(Duration::from_secs(u64::MAX))
        );
    }
}
