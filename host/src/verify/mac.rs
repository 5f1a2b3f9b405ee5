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
///
/// The parts that refer to the request may add up to no more than the request holds
/// (plus [`MESSAGE_SLACK`]): a plan that names the body, a header or the URL again and
/// again would make the host hash or copy gigabytes for one request. Such a plan is
/// the plugin's failure.
fn parts<'a>(plan: &'a Plan, source: &MessageSource<'a>) -> Result<Vec<&'a [u8]>, IngestError> {
    let mut referenced = 0usize;
    let parts = plan
        .message
        .iter()
        .map(|part| -> Result<&'a [u8], IngestError> {
            let bytes = match part {
                Part::Text(text) => return Ok(text.as_bytes()),
                Part::Bytes(bytes) => return Ok(bytes.as_slice()),
                Part::Body => source.body,
                Part::Header(name) => source.header(name).ok_or(IngestError::MissingSignature)?,
                Part::Url => source.url.as_bytes(),
                Part::Method => source.method.as_bytes(),
            };
            referenced = referenced.saturating_add(bytes.len());
            Ok(bytes)
        })
        .collect::<Result<Vec<_>, _>>()?;
    // Within the slack whatever the request: its size is added up only past it.
    if referenced > MESSAGE_SLACK {
        let request = source.method.len()
            + source.url.len()
            + source.body.len()
            + source
                .headers
                .iter()
                .map(|(n, v)| n.len() + v.len())
                .sum::<usize>();
        if referenced > request.saturating_add(MESSAGE_SLACK) {
            tracing::error!(
                referenced,
                request,
                "plugin's signed message refers to more bytes than the request holds"
            );
            return Err(IngestError::PluginFailed);
        }
    }
    Ok(parts)
}

/// How far a signed message's references to the request may exceed the request's own
/// size: room for a small header or the URL named twice.
const MESSAGE_SLACK: usize = 64 * 1024;

/// At most this many candidate signatures are checked for one request; a request
/// that carries more is refused before any is checked. Senders send one per active
/// signing key and algorithm: two or three during a rotation, one per active key for
/// DocuSign (up to 100 Connect keys). An HMAC or token candidate costs one comparison
/// (each key's MAC is computed once); a public-key one costs a pass over the message,
/// so those are capped lower, at [`MAX_PUBLIC_KEY_CANDIDATES`]. The plugin SDK passes
/// the host one candidate past it at most.
pub const MAX_CANDIDATES: usize = hookhost_plugin_sdk::MAX_CANDIDATES;
/// At most this many Ed25519 or ECDSA candidates per request.
pub const MAX_PUBLIC_KEY_CANDIDATES: usize = 16;
/// At most this many public-key checks per request: each candidate of a kind against
/// each key of that kind, a pass over the message each (nothing of one serves another).
/// A sender signs once per key it holds, so a rotation makes a handful; an endpoint
/// with ten public keys still takes three candidates.
pub const MAX_PUBLIC_KEY_CHECKS: usize = 32;

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
/// Work done does not depend on where a match is: every key is compared with every
/// candidate of its kind, and the result is selected with constant-time operations.
/// Each key's MAC (per algorithm) is computed once and compared with every candidate,
/// so the work grows with the message, not with the message times the candidates. A
/// plan with more than [`MAX_CANDIDATES`] candidates, more than
/// [`MAX_PUBLIC_KEY_CANDIDATES`] public-key ones, or more public-key checks against
/// the keys than [`MAX_PUBLIC_KEY_CHECKS`], is `invalid_signature`.
pub fn matching_key(
    keys: &[Key],
    plan: &Plan,
    source: &MessageSource<'_>,
) -> Result<Option<usize>, IngestError> {
    let of = |algorithm: Algorithm| {
        let candidates = plan.candidates.iter();
        candidates.filter(|c| c.algorithm == algorithm).count()
    };
    let (ed25519, ecdsa) = (of(Algorithm::Ed25519), of(Algorithm::EcdsaP256Sha256));
    let ed25519_keys = keys.iter().filter(|k| matches!(k, Key::Ed25519(_))).count();
    let ecdsa_keys = keys
        .iter()
        .filter(|k| matches!(k, Key::EcdsaP256(_)))
        .count();
    if plan.candidates.len() > MAX_CANDIDATES
        || ed25519 + ecdsa > MAX_PUBLIC_KEY_CANDIDATES
        || ed25519 * ed25519_keys + ecdsa * ecdsa_keys > MAX_PUBLIC_KEY_CHECKS
    {
        return Err(IngestError::InvalidSignature);
    }
    let parts = parts(plan, source)?;
    let mut found = Choice::from(0);
    let mut index = 0u64;
    let mut joined: Option<Vec<u8>> = None; // Ed25519 needs the message in one piece
    let mut digest: Option<sha2::digest::Output<sha2::Sha256>> = None; // ECDSA's prehash
    for (i, key) in keys.iter().enumerate() {
        let mut matched = Choice::from(0);
        // This key's tags, each computed when a candidate first needs it.
        let (mut sha1, mut sha256, mut sha512, mut prefixed) = (None, None, None, None);
        for candidate in &plan.candidates {
            let signature = candidate.signature.as_slice();
            matched |= match (key, candidate.algorithm) {
                (Key::Hmac(k), Algorithm::HmacSha1) => sha1
                    .get_or_insert_with(|| hmac_tag::<Hmac<sha1::Sha1>>(k, &parts))
                    .ct_eq(signature),
                (Key::Hmac(k), Algorithm::HmacSha256) => sha256
                    .get_or_insert_with(|| hmac_tag::<Hmac<sha2::Sha256>>(k, &parts))
                    .ct_eq(signature),
                (Key::Hmac(k), Algorithm::HmacSha512) => sha512
                    .get_or_insert_with(|| hmac_tag::<Hmac<sha2::Sha512>>(k, &parts))
                    .ct_eq(signature),
                (Key::Hmac(k), Algorithm::Token) => token_eq(k, signature),
                (Key::Hmac(k), Algorithm::Sha256SecretPrefix) => prefixed
                    .get_or_insert_with(|| {
                        let mut hash = sha2::Sha256::new_with_prefix(k);
                        for part in &parts {
                            hash.update(part);
                        }
                        hash.finalize()
                    })
                    .as_slice()
                    .ct_eq(signature),
                (Key::Ed25519(k), Algorithm::Ed25519) => {
                    let message = joined.get_or_insert_with(|| parts.concat());
                    ed25519_ok(k, message, signature)
                }
                (Key::EcdsaP256(k), Algorithm::EcdsaP256Sha256) => {
                    let digest = digest.get_or_insert_with(|| {
                        let mut hash = sha2::Sha256::new();
                        for part in &parts {
                            hash.update(part);
                        }
                        hash.finalize()
                    });
                    ecdsa_p256_ok(k, digest, signature)
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

/// Whether a presented token is the secret one. Compared as SHA-256 digests, so that
/// the time taken tells nothing of the secret's length either (slices of different
/// lengths compare unequal at once).
pub(crate) fn token_eq(secret: &[u8], presented: &[u8]) -> Choice {
    sha2::Sha256::digest(secret).ct_eq(&sha2::Sha256::digest(presented))
}

/// A key's MAC over the parts. Slices of different lengths compare unequal (a tag's
/// length is not secret).
fn hmac_tag<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]]) -> Tag {
    let Ok(mut mac) = <M as Mac>::new_from_slice(key) else {
        return Tag(None);
    };
    for part in parts {
        mac.update(part);
    }
    Tag(Some(mac.finalize().into_bytes().to_vec()))
}

/// An expected MAC; `None` (a key the MAC cannot take) equals no candidate.
struct Tag(Option<Vec<u8>>);

impl Tag {
    fn ct_eq(&self, candidate: &[u8]) -> Choice {
        self.0
            .as_deref()
            .map_or(Choice::from(0), |tag| tag.ct_eq(candidate))
    }
}

fn ed25519_ok(key: &ed25519_dalek::VerifyingKey, message: &[u8], signature: &[u8]) -> Choice {
    let Ok(signature) = ed25519_dalek::Signature::from_slice(signature) else {
        return Choice::from(0);
    };
    Choice::from(u8::from(key.verify_strict(message, &signature).is_ok()))
}

/// ECDSA P-256 over SHA-256 of the message (given as its digest); the signature is
/// DER-encoded. High-S signatures are accepted, as the senders' own verifiers accept
/// them.
fn ecdsa_p256_ok(
    key: &p256::ecdsa::VerifyingKey,
    digest: &sha2::digest::Output<sha2::Sha256>,
    signature: &[u8],
) -> Choice {
    use p256::ecdsa::signature::hazmat::PrehashVerifier as _;
    let Ok(signature) = p256::ecdsa::Signature::from_der(signature) else {
        return Choice::from(0);
    };
    Choice::from(u8::from(key.verify_prehash(digest, &signature).is_ok()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::Signer;
    use hookhost_plugin_sdk::Candidate;

    #[test]
    fn a_token_equals_only_itself_whatever_the_lengths() {
        let secret = b"glpat-token-0123456789";
        assert!(bool::from(token_eq(secret, secret)));
        for presented in [
            &b""[..],
            b"glpat-token-012345678",
            b"glpat-token-01234567890",
            b"GLPAT-TOKEN-0123456789",
        ] {
            assert!(!bool::from(token_eq(secret, presented)), "{presented:?}");
        }
    }

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

    /// A sender cannot make one request cost a check per signature it lists: more than
    /// the caps is refused before any check, and up to them the key's MAC is computed
    /// once.
    #[test]
    fn too_many_candidates_are_refused_and_the_caps_themselves_are_checked() {
        let headers = vec![("x-id".to_string(), b"42".to_vec())];
        let good = hmac256(b"k", b"t.42body");
        let keys = [Key::Hmac(b"k".to_vec())];
        let check = |candidates: &[Candidate]| {
            matching_key(
                &keys,
                &plan(candidates.to_vec()),
                &source(&headers, b"body"),
            )
        };
        let mut candidates =
            vec![Candidate::new(Algorithm::HmacSha256, vec![]); MAX_CANDIDATES - 1];
        candidates.push(Candidate::new(Algorithm::HmacSha256, good.clone()));
        assert_eq!(check(&candidates).expect("ok"), Some(0));
        candidates.insert(0, Candidate::new(Algorithm::HmacSha256, vec![]));
        assert!(matches!(
            check(&candidates),
            Err(IngestError::InvalidSignature)
        ));
        // Public-key candidates, a pass over the message each, have a cap of their own.
        let mut mixed =
            vec![Candidate::new(Algorithm::Ed25519, vec![0; 64]); MAX_PUBLIC_KEY_CANDIDATES];
        mixed.push(Candidate::new(Algorithm::HmacSha256, good));
        assert_eq!(check(&mixed).expect("ok"), Some(0));
        mixed.push(Candidate::new(Algorithm::EcdsaP256Sha256, vec![0x30, 0x00]));
        assert!(matches!(check(&mixed), Err(IngestError::InvalidSignature)));
        // And so have their checks: each candidate against each key of its kind.
        let public = |seed: u8| {
            Key::Ed25519(ed25519_dalek::SigningKey::from_bytes(&[seed; 32]).verifying_key())
        };
        let keys = [
            Key::Hmac(b"k".to_vec()),
            public(1),
            public(2),
            public(3),
            public(4),
        ];
        let check = |candidates: &[Candidate]| {
            let plan = plan(candidates.to_vec());
            matching_key(&keys, &plan, &source(&headers, b"body"))
        };
        let each = MAX_PUBLIC_KEY_CHECKS / 4;
        let mut four_keys = vec![Candidate::new(Algorithm::Ed25519, vec![0; 64]); each];
        four_keys.push(Candidate::new(
            Algorithm::HmacSha256,
            hmac256(b"k", b"t.42body"),
        ));
        assert_eq!(check(&four_keys).expect("ok"), Some(0));
        four_keys.push(Candidate::new(Algorithm::Ed25519, vec![0; 64]));
        assert!(four_keys.len() < MAX_PUBLIC_KEY_CANDIDATES);
        assert!(matches!(
            check(&four_keys),
            Err(IngestError::InvalidSignature)
        ));
    }

    /// A plan naming the body (or a header) over and over would have the host hash or
    /// copy many times the request: the plugin's failure, before any MAC.
    #[test]
    fn a_message_referring_to_more_than_the_request_holds_is_the_plugins_failure() {
        let body = vec![b'x'; 100 * 1024];
        let keys = [Key::Hmac(b"k".to_vec())];
        let candidates = vec![Candidate::new(Algorithm::HmacSha256, vec![0; 32])];
        let twice = Plan {
            message: vec![Part::Body, Part::Text(".".into()), Part::Body],
            candidates: candidates.clone(),
            ..Plan::default()
        };
        let err = matching_key(&keys, &twice, &source(&[], &body));
        assert!(matches!(err, Err(IngestError::PluginFailed)), "{err:?}");
        assert!(matches!(
            message_digest(&twice, &source(&[], &body)),
            Err(IngestError::PluginFailed)
        ));
        let headers = vec![("x-id".to_string(), b"42".to_vec())];
        let small_twice = Plan {
            message: vec![
                Part::Header("x-id".into()),
                Part::Header("x-id".into()),
                Part::Body,
            ],
            candidates,
            ..Plan::default()
        };
        assert_eq!(
            matching_key(&keys, &small_twice, &source(&headers, &body)).expect("within slack"),
            None
        );
    }

    #[test]
    fn ecdsa_p256_signatures_verify_over_the_whole_message() {
        use p256::ecdsa::signature::Signer as _;
        let signing = p256::ecdsa::SigningKey::from_slice(&[7u8; 32]).expect("scalar");
        let headers = vec![("x-id".to_string(), b"42".to_vec())];
        let signature: p256::ecdsa::Signature = signing.sign(b"t.42body");
        let der = signature.to_der().as_bytes().to_vec();
        let keys = [
            Key::Hmac(b"k".to_vec()),
            Key::EcdsaP256(*signing.verifying_key()),
        ];
        let p = plan(vec![
            Candidate::new(Algorithm::EcdsaP256Sha256, vec![0x30, 0x00]),
            Candidate::new(Algorithm::EcdsaP256Sha256, der),
        ]);
        assert_eq!(
            matching_key(&keys, &p, &source(&headers, b"body")).expect("ok"),
            Some(1)
        );
        assert_eq!(
            matching_key(&keys, &p, &source(&headers, b"bodY")).expect("ok"),
            None
        );
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
