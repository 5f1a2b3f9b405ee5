//! The Stripe event every phase sends: an `invoice.paid` event shaped like Stripe's,
//! padded to an exact size by a string in `data.object.metadata`, with a new event id
//! and invoice id each time, signed as Stripe signs:
//! `Stripe-Signature: t={t},v1={hex HMAC-SHA256(secret, "{t}.{body}")}`.
//!
//! The two ids come last in the body, after the padding, so every body of one size
//! starts with the same bytes. The HMAC state after `{t}.{those bytes}` is then the same
//! for every request signed within one second: it is computed once per second, and each
//! request hashes only its last few dozen bytes. Without that the load generator (one
//! thread) would hash each 1 MiB body in full, as the receivers do, and measure itself.
//! The receivers still verify every byte; for them the ids' place only means that a
//! parser meets them last.

use anyhow::{Context as _, anyhow, ensure};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// Largest body `--bodies` takes: the bench server's `[limits] max_body_bytes`, and
/// the comparison receivers' body limit. Twice hookhost's default (exactly 1 MiB), so
/// that a 1 MiB event plus nothing is never refused for its size.
pub const MAX_BODY_BYTES: usize = 2 * 1024 * 1024;

/// Event numbers, unique across the whole run: every phase, body size and receiver
/// takes the next, so no two requests anywhere carry the same event id.
static NEXT: AtomicU64 = AtomicU64::new(1);

/// Number the events from `first` on instead of 1: for `--send-to`, whose receiver may
/// already hold the events of an earlier run.
pub fn number_from(first: u64) {
    NEXT.store(first, Ordering::Relaxed);
}

/// The next unused event number.
pub fn next_number() -> u64 {
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Stripe-style ids, 24 characters after the prefix like Stripe's own.
pub fn event_id(n: u64) -> String {
    format!("evt_1Bench{n:018}")
}

fn invoice_id(n: u64) -> String {
    format!("in_1Bench{n:018}")
}

/// Events of one size and creation time.
pub struct StripeEvent {
    /// Everything before the invoice id: the same for every event of this size.
    head: Vec<u8>,
    size: usize,
    /// The HMAC state after `{t}.{head}`, and the `t` it was computed for.
    signer: Mutex<Option<(i64, Hmac<Sha256>)>>,
}

impl StripeEvent {
    /// Events of exactly `size` bytes, created at `created` (unix seconds).
    pub fn new(size: usize, created: i64) -> anyhow::Result<StripeEvent> {
        let unpadded = head(created, 0).len() + tail(0).len();
        ensure!(
            size >= unpadded,
            "a {size}-byte body cannot hold the bench's Stripe event: it needs at least {unpadded} bytes"
        );
        ensure!(
            size <= MAX_BODY_BYTES,
            "a {size}-byte body is larger than the bench allows ({MAX_BODY_BYTES} bytes)"
        );
        Ok(StripeEvent {
            head: head(created, size - unpadded),
            size,
            signer: Mutex::new(None),
        })
    }

    /// The body of event number `n`.
    pub fn body(&self, n: u64) -> Vec<u8> {
        let tail = tail(n);
        let mut body = Vec::with_capacity(self.head.len() + tail.len());
        body.extend_from_slice(&self.head);
        body.extend_from_slice(tail.as_bytes());
        body
    }

    /// The body of event number `n` and its `Stripe-Signature`, signed at `t`.
    pub fn signed(&self, n: u64, t: i64) -> anyhow::Result<(Vec<u8>, String)> {
        let body = self.body(n);
        // Ids wider than 18 digits would change the size; a bench never gets there.
        ensure!(
            body.len() == self.size,
            "event {n} is {} bytes, not {}",
            body.len(),
            self.size
        );
        let mut mac = {
            // The lock guards plain data: a panic elsewhere cannot leave it half-written.
            let mut signer = self.signer.lock().unwrap_or_else(PoisonError::into_inner);
            match &*signer {
                Some((at, state)) if *at == t => state.clone(),
                _ => {
                    let mut state = mac()?;
                    state.update(format!("{t}.").as_bytes());
                    state.update(&self.head);
                    *signer = Some((t, state.clone()));
                    state
                }
            }
        };
        mac.update(&body[self.head.len()..]);
        Ok((body, header(t, mac)))
    }
}

/// `t=<t>,v1=<hex HMAC-SHA256(secret, "{t}.{body}")>`, hashing the whole body.
pub fn signature(t: i64, body: &[u8]) -> anyhow::Result<String> {
    let mut mac = mac()?;
    mac.update(format!("{t}.").as_bytes());
    mac.update(body);
    Ok(header(t, mac))
}

fn mac() -> anyhow::Result<Hmac<Sha256>> {
    <Hmac<Sha256> as Mac>::new_from_slice(crate::SECRET.as_bytes())
        .map_err(|_| anyhow!("HMAC refused the key"))
}

fn header(t: i64, mac: Hmac<Sha256>) -> String {
    format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()))
}

/// The event up to its invoice id, with `padding` bytes of metadata. Written out by
/// hand (serde_json would sort the keys, putting the ids before the padding).
fn head(created: i64, padding: usize) -> Vec<u8> {
    format!(
        r#"{{"object":"event","api_version":"2024-06-20","created":{created},"type":"invoice.paid","livemode":false,"pending_webhooks":1,"request":{{"id":null,"idempotency_key":null}},"data":{{"object":{{"object":"invoice","account_country":"US","amount_due":4900,"amount_paid":4900,"amount_remaining":0,"billing_reason":"subscription_cycle","collection_method":"charge_automatically","currency":"usd","customer":"cus_BenchCustomer0001","customer_email":"billing@example.com","paid":true,"period_start":{start},"period_end":{created},"status":"paid","subscription":"sub_1BenchSubscription000001","metadata":{{"bench_padding":"{pad}"}},"id":""#,
        start = created - 2_592_000,
        pad = "x".repeat(padding),
    )
    .into_bytes()
}

/// The rest: invoice id, event id, and the closing braces.
fn tail(n: u64) -> String {
    format!(r#"{}"}}}},"id":"{}"}}"#, invoice_id(n), event_id(n))
}

/// `--bodies` values: bytes, or KiB / MiB with a `k` / `m` suffix (`1k`, `64k`, `1m`).
pub fn parse_size(text: &str) -> Result<usize, String> {
    let lower = text.trim().to_ascii_lowercase();
    let (digits, unit) = match lower.as_bytes().last() {
        Some(b'k') => (&lower[..lower.len() - 1], 1024),
        Some(b'm') => (&lower[..lower.len() - 1], 1024 * 1024),
        _ => (lower.as_str(), 1),
    };
    let size = digits
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(unit))
        .ok_or_else(|| format!("{text:?}: a size like 1024, 1k, 64k or 1m"))?;
    if size == 0 || size > MAX_BODY_BYTES {
        return Err(format!(
            "{text:?}: between 1 byte and {} MiB",
            MAX_BODY_BYTES / 1024 / 1024
        ));
    }
    Ok(size)
}

/// `1 KiB`, `64 KiB`, `1 MiB`, else bytes.
pub fn size_label(size: usize) -> String {
    match size {
        s if s >= 1024 * 1024 && s % (1024 * 1024) == 0 => format!("{} MiB", s / 1024 / 1024),
        s if s >= 1024 && s % 1024 == 0 => format!("{} KiB", s / 1024),
        s => format!("{s} B"),
    }
}

/// A body as text, for the in-process measurements (the event is ASCII JSON).
pub fn text(body: Vec<u8>) -> anyhow::Result<String> {
    String::from_utf8(body).context("the bench's event is not UTF-8")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_have_the_exact_size_parse_and_verify() -> anyhow::Result<()> {
        for size in [1024, 65_536, 1_048_576] {
            let event = StripeEvent::new(size, 1_700_000_000)?;
            let t = 1_700_000_100;
            // Twice: the second signature comes from the kept HMAC state.
            for n in [7, 8] {
                let (body, signed) = event.signed(n, t)?;
                assert_eq!(body.len(), size);
                assert_eq!(signed, signature(t, &body)?);
                let json: serde_json::Value = serde_json::from_slice(&body)?;
                assert_eq!(json["id"], event_id(n).as_str());
                assert_eq!(json["data"]["object"]["id"], invoice_id(n).as_str());
                assert_eq!(json["type"], "invoice.paid");
            }
        }
        Ok(())
    }

    #[test]
    fn too_small_and_too_large_are_errors() {
        assert!(StripeEvent::new(100, 0).is_err());
        assert!(StripeEvent::new(MAX_BODY_BYTES + 1, 0).is_err());
    }

    #[test]
    fn sizes_parse() {
        assert_eq!(parse_size("1k"), Ok(1024));
        assert_eq!(parse_size("64K"), Ok(65_536));
        assert_eq!(parse_size("1m"), Ok(1_048_576));
        assert_eq!(parse_size("1500"), Ok(1500));
        assert!(parse_size("3m").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("k").is_err());
        assert!(parse_size("1g").is_err());
        assert_eq!(size_label(65_536), "64 KiB");
        assert_eq!(size_label(1500), "1500 B");
    }
}
