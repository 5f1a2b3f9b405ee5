//! Shadow replay: run a candidate plugin over an endpoint's last stored requests,
//! beside the endpoint's current one, and report per request whether the verdict and
//! the described event stay the same. Nothing is stored or delivered.
//!
//! Each stored request is judged as it arrived: its raw body (opened when sealed),
//! its headers, and its arrival time as the clock (so the timestamp window judges it
//! as it did then). The method is not stored: both plugins see `POST`, at the
//! endpoint's path with the query the request came with.

use crate::endpoints::Endpoint;
use crate::http::App;
use crate::store::{StoreError, StoredRequest};
use crate::verify::{self, MessageSource, Trail};
use hookhost_plugin_sdk::Disposition;
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Most stored requests one shadow run reads.
pub const MAX_LAST: u32 = 1_000;

/// A verdict's outcome when the plugin accepts the request.
const ACCEPT: &str = "accept";

/// What one plugin made of one stored request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Verdict {
    /// `accept`, or the stable error code it would be answered with.
    pub outcome: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub event_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resource_version: Option<u64>,
    /// `process`, `ignore: <reason>` or `answer`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disposition: Option<String>,
}

/// One stored request, judged by both plugins.
#[derive(Debug, Clone, Serialize)]
pub struct Compared {
    pub event_id: String,
    pub received_at_ms: i64,
    /// Whether the current plugin accepts the stored request again. It was accepted
    /// on arrival; when it is not now, what verified it was not stored (a token
    /// header, a credential, a query holding a token, an escaped path, a request
    /// stored before queries were kept) or the plugin changed since, and the
    /// candidate's verdict tells nothing: such a request counts as neither changed
    /// nor the same.
    pub judged: bool,
    pub same: bool,
    pub current: Verdict,
    pub candidate: Verdict,
}

#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub endpoint: String,
    pub current_plugin: String,
    pub candidate_plugin: String,
    pub requests: usize,
    /// Every stored request asked for was judged. `false`: the run's time budget ran
    /// out first, and the report holds the newest ones, judged before it did.
    pub complete: bool,
    /// Judged requests whose verdict or event would change.
    pub changed: usize,
    /// Requests the current plugin does not accept again (see [`Compared::judged`]).
    pub not_judged: usize,
    pub results: Vec<Compared>,
}

/// Judge the endpoint's last `last` stored requests (newest first) with `current` and
/// `candidate`, which serve the same endpoint id with different plugins. With a
/// `budget`, no request is begun once it is spent.
pub async fn replay(
    app: &App,
    current: Arc<Endpoint>,
    candidate: Arc<Endpoint>,
    last: u32,
    budget: Option<Duration>,
) -> Result<Report, StoreError> {
    let started = Instant::now();
    let last = last.min(MAX_LAST);
    let (mut results, mut ran_out) = (Vec::new(), false);
    // Read a page at a time: `last` bodies of up to `max_body_bytes` each are not
    // held at once.
    let mut after: Option<(i64, String)> = None;
    'pages: while results.len() < last as usize {
        let wanted = (last - results.len() as u32).min(PAGE);
        let position = after.as_ref().map(|(at, id)| (*at, id.as_str()));
        let page = app
            .store
            .recent_requests(&current.id, wanted, position)
            .await?;
        let full = page.len() == wanted as usize;
        after = page.last().map(|r| (r.received_at_ms, r.event_id.clone()));
        for request in page {
            if budget.is_some_and(|budget| started.elapsed() >= budget) {
                ran_out = true;
                break 'pages;
            }
            results.push(compare(app, &current, &candidate, request).await?);
        }
        if !full {
            break;
        }
    }
    Ok(Report {
        endpoint: current.id.clone(),
        current_plugin: format!(
            "{} {} sha256:{}",
            current.plugin.name(),
            current.plugin.info.version,
            current.plugin.digest
        ),
        candidate_plugin: format!(
            "{} {} sha256:{}",
            candidate.plugin.name(),
            candidate.plugin.info.version,
            candidate.plugin.digest
        ),
        requests: results.len(),
        complete: !ran_out,
        changed: results.iter().filter(|r| r.judged && !r.same).count(),
        not_judged: results.iter().filter(|r| !r.judged).count(),
        results,
    })
}

/// Stored requests one page of a replay reads at once.
const PAGE: u32 = 16;

/// One stored request judged by both plugins, as it arrived.
async fn compare(
    app: &App,
    current: &Arc<Endpoint>,
    candidate: &Arc<Endpoint>,
    request: StoredRequest,
) -> Result<Compared, StoreError> {
    let StoredRequest {
        event_id,
        headers,
        body,
        received_at_ms,
        query,
    } = request;
    let body = crate::tenancy::plain_body(app, &current.id, &body)
        .map_err(StoreError::Unavailable)?
        .into_owned();
    let headers: Vec<(String, String)> = serde_json::from_str(&headers).unwrap_or_default();
    let (old, new) = (current.clone(), candidate.clone());
    let url = verify::stored_url(&app.public_url, &current.id, query.as_deref());
    let judged = app
        .plugin_threads
        .run(move || {
            let headers: Vec<(String, Vec<u8>)> = headers
                .into_iter()
                .map(|(name, value)| (name, value.into_bytes()))
                .collect();
            let source = MessageSource {
                method: "POST",
                url: &url,
                headers: &headers,
                body: &body,
            };
            let at = received_at_ms / 1000;
            (verdict(&old, &source, at), verdict(&new, &source, at))
        })
        .await
        .map_err(|e| StoreError::Unavailable(format!("shadow replay: {e}")))?;
    let (current, candidate) = judged;
    Ok(Compared {
        event_id,
        received_at_ms,
        judged: current.outcome == ACCEPT,
        same: current == candidate,
        current,
        candidate,
    })
}

fn verdict(endpoint: &Endpoint, source: &MessageSource<'_>, now: i64) -> Verdict {
    match verify::judge(endpoint, source, now, &mut Trail::default()) {
        Ok(verified) => {
            let event = verified.event;
            Verdict {
                outcome: ACCEPT.into(),
                event_id: Some(verified.event_id),
                event_type: Some(event.event_type),
                resource_kind: event.resource_kind,
                resource_id: event.resource_id,
                resource_version: event.resource_version,
                disposition: Some(match event.disposition {
                    Disposition::Process => "process".into(),
                    Disposition::Ignore(reason) => format!("ignore: {reason}"),
                    Disposition::Reject(reason) => format!("reject: {reason}"),
                    Disposition::Answer(_) => "answer".into(),
                }),
            }
        }
        Err(error) => Verdict {
            outcome: error.status_and_code().1.to_string(),
            event_id: None,
            event_type: None,
            resource_kind: None,
            resource_id: None,
            resource_version: None,
            disposition: None,
        },
    }
}
