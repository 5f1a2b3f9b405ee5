//! Secrets and the keys decoded from them. Neither ever prints its value.

use base64::Engine as _;
use hookhost_plugin_sdk::KeyFormat;
use std::fmt;

/// A configured secret string, exactly as the provider handed it to the user.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }
    /// The secret's text: for key decoding and the admin token check only.
    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

/// A key ready for verification.
#[derive(Clone)]
pub enum Key {
    /// Shared secret bytes: an HMAC key, a token compared as is, or the prefix of a
    /// hashed message.
    Hmac(Vec<u8>),
    /// An Ed25519 public key.
    Ed25519(ed25519_dalek::VerifyingKey),
    /// An ECDSA P-256 public key.
    EcdsaP256(p256::ecdsa::VerifyingKey),
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Hmac(_) => f.write_str("Key::Hmac([redacted])"),
            Key::Ed25519(_) => f.write_str("Key::Ed25519([redacted])"),
            Key::EcdsaP256(_) => f.write_str("Key::EcdsaP256([redacted])"),
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum KeyError {
    #[error("the plugin declares no key format")]
    NoFormat,
    #[error("the secret is empty")]
    Empty,
    #[error("the secret is not valid base64 after the prefix {0:?}")]
    Base64(String),
    #[error("the secret is not valid hex")]
    Hex,
    #[error("the secret is not a 32-byte Ed25519 public key")]
    Ed25519,
    #[error("the secret is not an ECDSA P-256 public key (base64 of DER SubjectPublicKeyInfo)")]
    EcdsaP256,
    #[error(
        "the secret starts with neither {shared:?} nor {public:?}, and its 32 bytes may be \
         a shared secret or an Ed25519 public key: write the prefix that says which"
    )]
    Ambiguous { shared: String, public: String },
}

/// Decode a secret with the plugin's key formats: the first format whose prefix the
/// secret starts with wins; a format without a prefix matches any secret; when none
/// matches, the first format is used (its prefix is optional). Unless that would make
/// a shared secret of what may be a public key: an Ed25519 key written without its
/// prefix would be an HMAC key anyone with the public key could sign with.
pub fn decode_key(secret: &Secret, formats: &[KeyFormat]) -> Result<Key, KeyError> {
    let text = secret.expose();
    if text.is_empty() {
        return Err(KeyError::Empty);
    }
    let matched = formats
        .iter()
        .find(|f| prefix(f).is_none_or(|p| text.starts_with(p)));
    let format = matched.or(formats.first()).ok_or(KeyError::NoFormat)?;
    let b64 = base64::engine::general_purpose::STANDARD;
    // An HMAC key of no bytes (a bare `whsec_`) would let anyone sign.
    let hmac = |bytes: Vec<u8>| {
        if bytes.is_empty() {
            Err(KeyError::Empty)
        } else {
            Ok(Key::Hmac(bytes))
        }
    };
    match format {
        KeyFormat::Raw => hmac(text.as_bytes().to_vec()),
        KeyFormat::Hex => hmac(hex::decode(text).map_err(|_| KeyError::Hex)?),
        KeyFormat::Base64AfterPrefix(p) => {
            let bytes = b64
                .decode(text.strip_prefix(p.as_str()).unwrap_or(text))
                .map_err(|_| KeyError::Base64(p.clone()))?;
            // Taken without its prefix, 32 bytes may be an Ed25519 key the plugin
            // also takes.
            let public = formats.iter().find_map(|f| match f {
                KeyFormat::Ed25519Base64AfterPrefix(public) => Some(public),
                _ => None,
            });
            if let (None, 32, Some(public)) = (matched, bytes.len(), public) {
                return Err(KeyError::Ambiguous {
                    shared: p.clone(),
                    public: public.clone(),
                });
            }
            hmac(bytes)
        }
        KeyFormat::Ed25519Hex => ed25519(&hex::decode(text).map_err(|_| KeyError::Hex)?),
        KeyFormat::Ed25519Base64AfterPrefix(p) => ed25519(
            &b64.decode(text.strip_prefix(p.as_str()).unwrap_or(text))
                .map_err(|_| KeyError::Base64(p.clone()))?,
        ),
        KeyFormat::EcdsaP256SpkiBase64 => {
            use p256::pkcs8::DecodePublicKey as _;
            let der = b64.decode(text).map_err(|_| KeyError::EcdsaP256)?;
            p256::ecdsa::VerifyingKey::from_public_key_der(&der)
                .map(Key::EcdsaP256)
                .map_err(|_| KeyError::EcdsaP256)
        }
    }
}

fn prefix(format: &KeyFormat) -> Option<&str> {
    match format {
        KeyFormat::Base64AfterPrefix(p) | KeyFormat::Ed25519Base64AfterPrefix(p) => Some(p),
        KeyFormat::Raw
        | KeyFormat::Hex
        | KeyFormat::Ed25519Hex
        | KeyFormat::EcdsaP256SpkiBase64 => None,
    }
}

fn ed25519(bytes: &[u8]) -> Result<Key, KeyError> {
    let bytes: &[u8; 32] = bytes.try_into().map_err(|_| KeyError::Ed25519)?;
    ed25519_dalek::VerifyingKey::from_bytes(bytes)
        .map(Key::Ed25519)
        .map_err(|_| KeyError::Ed25519)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_prefix_with_no_key_after_it_is_an_empty_secret() {
        let formats = [KeyFormat::Base64AfterPrefix("whsec_".into())];
        let empty = decode_key(&Secret::new("whsec_"), &formats);
        assert!(matches!(empty, Err(KeyError::Empty)), "{empty:?}");
        assert!(
            matches!(decode_key(&Secret::new("whsec_a2V5"), &formats), Ok(Key::Hmac(k)) if k == b"key")
        );
    }

    #[test]
    fn secrets_and_keys_never_print_their_value() {
        let secret = Secret::new("whsec_topsecret");
        assert!(!format!("{secret:?}").contains("topsecret"));
        let key = decode_key(&secret, &[KeyFormat::Raw]).expect("raw key");
        assert!(!format!("{key:?}").contains("topsecret"));
    }

    #[test]
    fn formats_are_chosen_by_prefix() {
        let formats = [
            KeyFormat::Base64AfterPrefix("whsec_".into()),
            KeyFormat::Ed25519Base64AfterPrefix("whpk_".into()),
        ];
        let hmac = decode_key(&Secret::new("whsec_AAEC"), &formats).expect("hmac");
        assert!(matches!(hmac, Key::Hmac(ref k) if k == &[0, 1, 2]));
        // Without a known prefix, the first format applies to the whole string.
        let bare = decode_key(&Secret::new("AAEC"), &formats).expect("bare");
        assert!(matches!(bare, Key::Hmac(ref k) if k == &[0, 1, 2]));
        // Unless it may be a public key: 32 bytes are refused, not made an HMAC key
        // anyone with the public key could sign with.
        let b64 = base64::engine::general_purpose::STANDARD;
        let public = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]).verifying_key();
        let unmarked = Secret::new(b64.encode(public.as_bytes()));
        assert_eq!(
            decode_key(&unmarked, &formats).err(),
            Some(KeyError::Ambiguous {
                shared: "whsec_".into(),
                public: "whpk_".into()
            })
        );
        // A plugin with no public-key format takes 32 bare bytes as its secret.
        let hmac_only = decode_key(&unmarked, &formats[..1]);
        assert!(matches!(hmac_only, Ok(Key::Hmac(ref k)) if k == public.as_bytes()));
        let pk = format!("whpk_{}", b64.encode(public.as_bytes()));
        assert!(matches!(
            decode_key(&Secret::new(pk), &formats),
            Ok(Key::Ed25519(_))
        ));
        assert_eq!(
            decode_key(&Secret::new("whpk_AAEC"), &formats).err(),
            Some(KeyError::Ed25519)
        );
    }

    #[test]
    fn bad_secrets_are_errors_not_panics() {
        assert_eq!(
            decode_key(&Secret::new(""), &[KeyFormat::Raw]).err(),
            Some(KeyError::Empty)
        );
        assert_eq!(
            decode_key(&Secret::new("zz"), &[KeyFormat::Hex]).err(),
            Some(KeyError::Hex)
        );
        assert_eq!(
            decode_key(&Secret::new("x"), &[]).err(),
            Some(KeyError::NoFormat)
        );
        assert!(matches!(
            decode_key(
                &Secret::new("whsec_***"),
                &[KeyFormat::Base64AfterPrefix("whsec_".into())]
            ),
            Err(KeyError::Base64(_))
        ));
    }
}
