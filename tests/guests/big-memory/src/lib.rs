//! A test guest whose linear memory starts at 24 MiB: a zeroed static of that size
//! sits in its data, so instantiating it at all needs more than the default 16 MiB per
//! call. Otherwise it is the hostile guest's well-behaved provider: `x-test-signature`
//! is the hex HMAC-SHA256 of the body with the raw secret, `x-test-id` the event id.

#![cfg_attr(not(test), no_std)]

use core::sync::atomic::{AtomicU8, Ordering};
use hookhost_plugin_sdk::prelude::*;
use hookhost_plugin_sdk::{
    Algorithm, Candidate, Event, KeyFormat, Part, Plan, PluginInfo, Provider, Rejection, Request,
    decode,
};

/// Zero-initialised, so it costs the component nothing but raises its memory's
/// minimum size past 24 MiB.
static BALLAST: [AtomicU8; 24 * 1024 * 1024] = [const { AtomicU8::new(0) }; 24 * 1024 * 1024];

pub struct BigMemory;

impl Provider for BigMemory {
    fn info() -> PluginInfo {
        PluginInfo {
            name: "big-memory".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            provider: "Big-memory test guest".into(),
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: None,
            retry_behaviour: "none".into(),
        }
    }

    fn plan_verification(req: &Request) -> Result<Plan, Rejection> {
        let signature = decode::hex(req.signature_header("x-test-signature")?)?;
        Ok(Plan {
            message: vec![Part::Body],
            candidates: vec![Candidate::new(Algorithm::HmacSha256, signature)],
            timestamp: None,
            message_id: None,
        })
    }

    fn describe_event(req: &Request) -> Result<Event, Rejection> {
        // Write to the ballast where the body's length says, so it cannot be
        // optimised away.
        let at = BALLAST.len() - 1 - req.body.len() % BALLAST.len();
        let last = BALLAST[at].fetch_add(1, Ordering::Relaxed);
        Ok(Event::new(format!("big.{last}")).maybe_id(req.header_str("x-test-id")))
    }
}

hookhost_plugin_sdk::export_provider!(BigMemory);
hookhost_plugin_sdk::no_std_runtime!();
