//! Message assembly and constant-time comparison.
//!
//! The signed message is never copied for HMAC: each part (including the raw body)
//! is fed to the MAC in turn. Every candidate is compared with every key, and the
//! loop never exits early, so timing says nothing about which key or candidate came
//! close.

use super::Key;
use crate::http::IngestError;
use hmac::{Hmac, Mac};
use hookhost_plugin_sdk::{Algorithm, Part, Plan};
use sha2::Digest as _;
use subtle::{Choice, ConditionallySelectable, ConstantTimeEq};

/// The request bytes a plan's parts refer to.
#[derive(Debug, Clone, Copy)]
pub struct MessageSource<'a> {
    pub method: &'a str,
    /// The public URL the sender addressed.
    pub url: &'a str,
    /// Lower-case names, raw values, in order received.
    pub headers: &'a [(String, Vec<u8>)],
    pub body: &'a [u8],
}

/// Headers in the form [`MessageSource`] holds them: owned names, raw values, in the
/// order given. Names are taken as they are; the HTTP layer's are already lower-case.
pub fn owned_headers<N, V>(pairs: impl IntoIterator<Item = (N, V)>) -> Vec<(String, Vec<u8>)>
where
    N: AsRef<str>,
    V: AsRef<[u8]>,
{
    pairs
        .into_iter()
        .map(|(name, value)| (name.as_ref().to_owned(), value.as_ref().to_vec()))
        .collect()
}

impl<'a> MessageSource<'a> {
    fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }
}

/// Resolve the plan's parts to byte slices, in order. A part naming a header the
/// request lacks means the signature cannot be checked: `missing_signature`.
fn parts<'a>(plan: &'a Plan, source: &MessageSource<'a>) -> Result<Vec<&'a [u8]>, IngestError> {
    plan.message
        .iter()
        .map(|part| match part {
            Part::Text(text) => Ok(text.as_bytes()),
            Part::Bytes(bytes) => Ok(bytes.as_slice()),
            Part::Body => Ok(source.body),
            Part::Header(name) => source.header(name).ok_or(IngestError::MissingSignature),
            Part::Url => Ok(source.url.as_bytes()),
            Part::Method => Ok(source.method.as_bytes()),
        })
        .collect()
}

/// SHA-256 of the signed message (used to derive an event id when the plugin has none).
pub fn message_digest(plan: &Plan, source: &MessageSource<'_>) -> Result<[u8; 32], IngestError> {
    let mut hasher = sha2::Sha256::new();
    for part in parts(plan, source)? {
        hasher.update(part);
    }
    Ok(hasher.finalize().into())
}

/// The index of the first key that verifies any candidate, or `None`.
///
/// Work done does not depend on where a match is: every key is tried against every
/// candidate of its kind, and the result is selected with constant-time operations.
pub fn matching_key(
    keys: &[Key],
    plan: &Plan,
    source: &MessageSource<'_>,
) -> Result<Option<usize>, IngestError> {
    let parts = parts(plan, source)?;
    let mut found = Choice::from(0);
    let mut index = 0u64;
    let mut joined: Option<Vec<u8>> = None; // signatures need the message in one piece
    for (i, key) in keys.iter().enumerate() {
        let mut matched = Choice::from(0);
        for candidate in &plan.candidates {
            matched |= match (key, candidate.algorithm) {
                (Key::Hmac(k), Algorithm::HmacSha1) => {
                    hmac_eq::<Hmac<sha1::Sha1>>(k, &parts, &candidate.signature)
                }
                (Key::Hmac(k), Algorithm::HmacSha256) => {
                    hmac_eq::<Hmac<sha2::Sha256>>(k, &parts, &candidate.signature)
                }
                (Key::Hmac(k), Algorithm::HmacSha512) => {
                    hmac_eq::<Hmac<sha2::Sha512>>(k, &parts, &candidate.signature)
                }
                (Key::Hmac(k), Algorithm::Token) => k.as_slice().ct_eq(&candidate.signature),
                (Key::Hmac(k), Algorithm::Sha256SecretPrefix) => {
                    let mut hash = sha2::Sha256::new_with_prefix(k);
                    for part in &parts {
                        hash.update(part);
                    }
                    hash.finalize().as_slice().ct_eq(&candidate.signature)
                }
                (Key::Ed25519(k), Algorithm::Ed25519) => {
                    let message = joined.get_or_insert_with(|| parts.concat());
                    ed25519_ok(k, message, &candidate.signature)
                }
                (Key::EcdsaP256(k), Algorithm::EcdsaP256Sha256) => {
                    let message = joined.get_or_insert_with(|| parts.concat());
                    ecdsa_p256_ok(k, message, &candidate.signature)
                }
                // A key of one kind never verifies a signature of another.
                (Key::Hmac(_), Algorithm::Ed25519 | Algorithm::EcdsaP256Sha256)
                | (Key::Ed25519(_), _)
                | (Key::EcdsaP256(_), _) => Choice::from(0),
            };
        }
        let first = matched & !found;
        index.conditional_assign(&(i as u64), first);
        found |= matched;
    }
    Ok(bool::from(found).then_some(index as usize))
}

fn hmac_eq<M: Mac + hmac::digest::KeyInit>(
    key: &[u8],
    parts: &[&[u8]],
    candidate: &[u8],
) -> Choice {
    let Ok(mut mac) = <M as Mac>::new_from_slice(key) else {
        return Choice::from(0);
    };
    for part in parts {
        mac.update(part);
    }
    let expected = mac.finalize().into_bytes();
    // Slices of different lengths compare unequal (length is not secret).
    expected.as_slice().ct_eq(candidate)
}

fn ed25519_ok(key: &ed25519_dalek::VerifyingKey, message: &[u8], signature: &[u8]) -> Choice {
    let Ok(signature) = ed25519_dalek::Signature::from_slice(signature) else {
        return Choice::from(0);
    };
    Choice::from(u8::from(key.verify_strict(message, &signature).is_ok()))
}

/// ECDSA P-256 over SHA-256 of the message; the signature is DER-encoded. High-S
/// signatures are accepted, as the senders' own verifiers accept them.
fn ecdsa_p256_ok(key: &p256::ecdsa::VerifyingKey, message: &[u8], signature: &[u8]) -> Choice {
    use p256::ecdsa::signature::Verifier as _;
    let Ok(signature) = p256::ecdsa::Signature::from_der(signature) else {
        return Choice::from(0);
    };
    Choice::from(u8::from(key.verify(message, &signature).is_ok()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::Signer;
    use hookhost_plugin_sdk::Candidate;

    fn source<'a>(headers: &'a [(String, Vec<u8>)], body: &'a [u8]) -> MessageSource<'a> {
        MessageSource {
            method: "POST",
            url: "https://h.example/w",
            headers,
            body,
        }
    }

    fn hmac256(key: &[u8], message: &[u8]) -> Vec<u8> {
        let mut mac = Hmac::<sha2::Sha256>::new_from_slice(key).expect("any key length");
        mac.update(message);
        mac.finalize().into_bytes().to_vec()
    }

    fn plan(candidates: Vec<Candidate>) -> Plan {
        Plan {
            message: vec![
                Part::Text("t.".into()),
                Part::Header("x-id".into()),
                Part::Body,
            ],
            candidates,
            timestamp: None,
            message_id: None,
        }
    }

    /// What the HTTP layer received is what the plugin and the MAC see: every header,
    /// repeats included, in order, with values that are not UTF-8 kept byte for byte.
    #[test]
    fn owned_headers_keep_order_repeats_and_raw_bytes() {
        use axum::http::{HeaderMap, HeaderValue};
        let mut map = HeaderMap::new();
        map.append("x-sig", HeaderValue::from_static("v1=a"));
        map.append("x-sig", HeaderValue::from_static("v1=b"));
        map.append(
            "x-raw",
            HeaderValue::from_bytes(b"caf\xe9").expect("obs-text"),
        );
        let expected = vec![
            ("x-sig".to_owned(), b"v1=a".to_vec()),
            ("x-sig".to_owned(), b"v1=b".to_vec()),
            ("x-raw".to_owned(), b"caf\xe9".to_vec()),
        ];
        assert_eq!(owned_headers(&map), expected);
        let pairs = [("x-sig", "v1=a"), ("x-sig", "v1=b")];
        assert_eq!(owned_headers(pairs), expected[..2]);
    }

    #[test]
    fn github_documented_example_verifies() {
        // docs.github.com "validating webhook deliveries" test values.
        let key = Key::Hmac(b"It's a Secret to Everybody".to_vec());
        let sig = hex::decode("757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
            .expect("hex");
        let plan = Plan {
            message: vec![Part::Body],
            candidates: vec![Candidate::new(Algorithm::HmacSha256, sig)],
            ..Plan::default()
        };
        let found = matching_key(&[key], &plan, &source(&[], b"Hello, World!")).expect("parts");
        assert_eq!(found, Some(0));
    }

    #[test]
    fn parts_are_concatenated_in_order_and_the_matching_key_index_is_reported() {
        let headers = vec![("x-id".to_string(), b"42".to_vec())];
        let good = hmac256(b"old", b"t.42body");
        let keys = [Key::Hmac(b"new".to_vec()), Key::Hmac(b"old".to_vec())];
        let plan = plan(vec![
            Candidate::new(Algorithm::HmacSha256, vec![0; 32]),
            Candidate::new(Algorithm::HmacSha256, good),
        ]);
        assert_eq!(
            matching_key(&keys, &plan, &source(&headers, b"body")).expect("ok"),
            Some(1)
        );
        assert_eq!(
            matching_key(&keys, &plan, &source(&headers, b"bodY")).expect("ok"),
            None
        );
    }

    #[test]
    fn wrong_length_and_wrong_kind_candidates_are_rejected_without_panicking() {
        let headers = vec![("x-id".to_string(), b"42".to_vec())];
        let good = hmac256(b"k", b"t.42body");
        let keys = [Key::Hmac(b"k".to_vec())];
        for bad in [
            vec![],
            good[..31].to_vec(),
            [good.clone(), vec![0]].concat(),
        ] {
            let p = plan(vec![Candidate::new(Algorithm::HmacSha256, bad)]);
            assert_eq!(
                matching_key(&keys, &p, &source(&headers, b"body")).expect("ok"),
                None
            );
        }
        let as_ed = plan(vec![Candidate::new(Algorithm::Ed25519, good.clone())]);
        assert_eq!(
            matching_key(&keys, &as_ed, &source(&headers, b"body")).expect("ok"),
            None
        );
        let as_sha1 = plan(vec![Candidate::new(Algorithm::HmacSha1, good)]);
        assert_eq!(
            matching_key(&keys, &as_sha1, &source(&headers, b"body")).expect("ok"),
            None
        );
    }

    #[test]
    fn a_missing_header_part_is_missing_signature() {
        let p = plan(vec![Candidate::new(Algorithm::HmacSha256, vec![0; 32])]);
        let err = matching_key(&[Key::Hmac(b"k".to_vec())], &p, &source(&[], b"body"));
        assert!(matches!(err, Err(IngestError::MissingSignature)));
    }

    #[test]
    fn ed25519_signatures_verify_with_the_public_key_only() {
        let signing = ed25519_dalek::SigningKey::from_bytes(&[9u8; 32]);
        let headers = vec![("x-id".to_string(), b"42".to_vec())];
        let sig = signing.sign(b"t.42body").to_bytes().to_vec();
        let keys = [
            Key::Hmac(b"k".to_vec()),
            Key::Ed25519(signing.verifying_key()),
        ];
        let p = plan(vec![Candidate::new(Algorithm::Ed25519, sig.clone())]);
        assert_eq!(
            matching_key(&keys, &p, &source(&headers, b"body")).expect("ok"),
            Some(1)
        );
        let short = plan(vec![Candidate::new(Algorithm::Ed25519, sig[..10].to_vec())]);
        assert_eq!(
            matching_key(&keys, &short, &source(&headers, b"body")).expect("ok"),
            None
        );
    }
}
