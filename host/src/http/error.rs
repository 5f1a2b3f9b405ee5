//! Every way a request can fail, each with one status and one stable code.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum IngestError {
    #[error("unknown endpoint")]
    UnknownEndpoint,
    #[error("method not allowed")]
    MethodNotAllowed,
    #[error("body larger than the endpoint's cap")]
    BodyTooLarge,
    #[error("the body could not be read")]
    BodyUnreadable,
    #[error("the body did not arrive within the read timeout")]
    BodyTimeout,
    #[error("a required signature or timestamp header is missing")]
    MissingSignature,
    #[error("no signature matched any active secret")]
    InvalidSignature,
    #[error("the signed timestamp is {skew_seconds} s from arrival, outside the allowed window")]
    TimestampOutsideWindow {
        /// How far the (authentic) signed timestamp is from the arrival, either way.
        skew_seconds: u64,
    },
    #[error("the body is not what the provider sends")]
    MalformedBody,
    #[error("the plugin does not handle this request")]
    Unsupported,
    #[error("the plugin rejected the event: {0}")]
    Rejected(String),
    #[error("the handshake token does not match the endpoint's")]
    HandshakeRefused,
    #[error("the plugin failed")]
    PluginFailed,
    #[error("the receipt could not be stored")]
    StoreUnavailable,
    #[error("the store is too far behind to take the receipt now")]
    Overloaded,
    #[error("the tenant's request rate is over its quota")]
    RateLimited {
        /// When the sender may try again.
        retry_after_seconds: u64,
    },
}

/// How long an overloaded receiver asks the sender to wait: the queue drains at the
/// commit rate, thousands of receipts a second, once the store goes on.
const OVERLOADED_RETRY_AFTER_SECONDS: u64 = 5;

impl IngestError {
    /// The status and stable code for this error; one exhaustive match.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            IngestError::UnknownEndpoint => (StatusCode::NOT_FOUND, "unknown_endpoint"),
            IngestError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed"),
            IngestError::BodyTooLarge => (StatusCode::PAYLOAD_TOO_LARGE, "body_too_large"),
            IngestError::BodyUnreadable => (StatusCode::BAD_REQUEST, "body_unreadable"),
            IngestError::BodyTimeout => (StatusCode::REQUEST_TIMEOUT, "body_timeout"),
            IngestError::MissingSignature => (StatusCode::BAD_REQUEST, "missing_signature"),
            IngestError::InvalidSignature => (StatusCode::BAD_REQUEST, "invalid_signature"),
            IngestError::TimestampOutsideWindow { .. } => {
                (StatusCode::BAD_REQUEST, "timestamp_outside_window")
            }
            IngestError::MalformedBody => (StatusCode::BAD_REQUEST, "malformed_body"),
            IngestError::Unsupported => (StatusCode::BAD_REQUEST, "unsupported"),
            IngestError::Rejected(_) => (StatusCode::UNPROCESSABLE_ENTITY, "event_rejected"),
            IngestError::HandshakeRefused => (StatusCode::FORBIDDEN, "handshake_refused"),
            IngestError::PluginFailed => (StatusCode::INTERNAL_SERVER_ERROR, "plugin_failed"),
            IngestError::StoreUnavailable => (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable"),
            IngestError::Overloaded => (StatusCode::TOO_MANY_REQUESTS, "overloaded"),
            IngestError::RateLimited { .. } => (StatusCode::TOO_MANY_REQUESTS, "rate_limited"),
        }
    }
}

impl From<crate::plugins::threads::ThreadFailure> for IngestError {
    /// A plugin call that panicked the host or found no thread is the plugin's 500,
    /// never a hang and never the sender's fault; one that found no room in the
    /// threads' queue in time is 429 `overloaded`.
    fn from(failure: crate::plugins::threads::ThreadFailure) -> Self {
        match failure {
            crate::plugins::threads::ThreadFailure::Busy => IngestError::Overloaded,
            _ => IngestError::PluginFailed,
        }
    }
}

impl IntoResponse for IngestError {
    fn into_response(self) -> Response {
        let (status, code) = self.status_and_code();
        let body = match &self {
            // The plugin's reason is part of the sender-facing contract for 422.
            IngestError::Rejected(reason) => serde_json::json!({ "error": code, "reason": reason }),
            _ => serde_json::json!({ "error": code }),
        };
        let retry_after_seconds = match self {
            IngestError::RateLimited {
                retry_after_seconds,
            } => Some(retry_after_seconds),
            IngestError::Overloaded => Some(OVERLOADED_RETRY_AFTER_SECONDS),
            _ => None,
        };
        if let Some(retry_after_seconds) = retry_after_seconds {
            let retry_after = [(
                axum::http::header::RETRY_AFTER,
                retry_after_seconds.to_string(),
            )];
            return (status, retry_after, Json(body)).into_response();
        }
        (status, Json(body)).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every error, with the status and code it must answer.
    fn cases() -> [(IngestError, u16, &'static str); 16] {
        [
            (IngestError::UnknownEndpoint, 404, "unknown_endpoint"),
            (IngestError::MethodNotAllowed, 405, "method_not_allowed"),
            (IngestError::BodyTooLarge, 413, "body_too_large"),
            (IngestError::BodyUnreadable, 400, "body_unreadable"),
            (IngestError::BodyTimeout, 408, "body_timeout"),
            (IngestError::MissingSignature, 400, "missing_signature"),
            (IngestError::InvalidSignature, 400, "invalid_signature"),
            (
                IngestError::TimestampOutsideWindow { skew_seconds: 301 },
                400,
                "timestamp_outside_window",
            ),
            (IngestError::MalformedBody, 400, "malformed_body"),
            (IngestError::Unsupported, 400, "unsupported"),
            (IngestError::Rejected("no".into()), 422, "event_rejected"),
            (IngestError::HandshakeRefused, 403, "handshake_refused"),
            (IngestError::PluginFailed, 500, "plugin_failed"),
            (IngestError::StoreUnavailable, 503, "store_unavailable"),
            (IngestError::Overloaded, 429, "overloaded"),
            (
                IngestError::RateLimited {
                    retry_after_seconds: 1,
                },
                429,
                "rate_limited",
            ),
        ]
    }

    #[test]
    fn every_error_has_its_status_and_no_signature_failure_is_5xx() {
        for (error, status, code) in cases() {
            let (s, c) = error.status_and_code();
            assert_eq!((s.as_u16(), c), (status, code), "{error:?}");
        }
    }

    /// The README's status table and `hookhost spec`'s name every code a request can
    /// be answered, with its status.
    #[test]
    fn the_readme_and_the_spec_state_every_code() {
        let readme = include_str!("../../../README.md");
        for (_, status, code) in cases() {
            let row = format!("| {status} | `{{\"error\":\"{code}\"");
            assert!(readme.contains(&row), "README.md has no row {row}");
            let named = crate::spec::STATUS_TABLE.iter().any(|(s, answer, _)| {
                *s == status.to_string() && answer.contains(&format!("`{code}`"))
            });
            assert!(named, "spec's status table does not name {status} {code}");
        }
    }

    /// Both 429s say when to come back; no other answer carries Retry-After.
    #[test]
    fn only_the_429s_carry_retry_after() {
        let retry_after = |error: IngestError| {
            error
                .into_response()
                .headers()
                .get(axum::http::header::RETRY_AFTER)
                .map(|v| v.to_str().expect("ASCII").to_owned())
        };
        assert_eq!(retry_after(IngestError::Overloaded).as_deref(), Some("5"));
        let limited = IngestError::RateLimited {
            retry_after_seconds: 3,
        };
        assert_eq!(retry_after(limited).as_deref(), Some("3"));
        assert_eq!(retry_after(IngestError::StoreUnavailable), None);
        assert_eq!(retry_after(IngestError::PluginFailed), None);
    }
}
