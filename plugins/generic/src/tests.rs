use super::*;
use hookhost_plugin_sdk::serde_json::{self, Value, json};
use hookhost_plugin_sdk::testing::RequestBuilder;
use hookhost_plugin_sdk::{Disposition, Handshake};

const URL: &str = "https://hooks.example.com/webhooks/generic";

/// The mapping files, as the crate docs show them.
const FILES: &[(&str, &str)] = &[
    ("stripe", include_str!("../mappings/stripe.toml")),
    ("github", include_str!("../mappings/github.toml")),
    ("shopify", include_str!("../mappings/shopify.toml")),
    ("slack", include_str!("../mappings/slack.toml")),
    (
        "standard-webhooks",
        include_str!("../mappings/standard-webhooks.toml"),
    ),
    ("in-house", include_str!("../mappings/in-house.toml")),
];

/// Endpoint `index` of a mapping file: its `config` as the host hands it over (JSON).
fn file_config(name: &str, index: usize) -> Value {
    let (_, text) = FILES
        .iter()
        .find(|(n, _)| *n == name)
        .expect("known mapping file");
    let doc: toml::Value = toml::from_str(text).expect("mapping file is TOML");
    let endpoint = &doc["endpoint"][index];
    assert_eq!(endpoint["plugin"].as_str(), Some("generic"), "{name}");
    serde_json::to_value(&endpoint["config"]).expect("TOML → JSON")
}

fn facts(config: &Value) -> Result<EndpointFacts, ConfigError> {
    Generic::check_config(config)
}

fn request(config: Value) -> RequestBuilder {
    RequestBuilder::post(URL).config(config)
}

fn hmac(signature: Vec<u8>) -> Candidate {
    Candidate::new(Algorithm::HmacSha256, signature)
}

// ------------------------------------------------------------------ check_config

#[test]
fn every_mapping_file_is_accepted_with_its_key_format_and_window() {
    let expected: &[(&str, usize, KeyFormat, Option<u32>)] = &[
        ("stripe", 0, KeyFormat::Raw, Some(300)),
        ("github", 0, KeyFormat::Raw, None),
        ("shopify", 0, KeyFormat::Raw, None),
        ("slack", 0, KeyFormat::Raw, Some(300)),
        (
            "standard-webhooks",
            0,
            KeyFormat::Base64AfterPrefix("whsec_".into()),
            Some(300),
        ),
        (
            "standard-webhooks",
            1,
            KeyFormat::Base64AfterPrefix("whsec_".into()),
            Some(300),
        ),
        (
            "standard-webhooks",
            2,
            KeyFormat::Ed25519Base64AfterPrefix("whpk_".into()),
            Some(300),
        ),
        ("in-house", 0, KeyFormat::Hex, Some(120)),
    ];
    for (name, index, format, window) in expected {
        let got = facts(&file_config(name, *index)).unwrap_or_else(|e| panic!("{name}: {e:?}"));
        assert_eq!(
            got,
            EndpointFacts {
                key_formats: vec![format.clone()],
                default_tolerance_seconds: *window,
            },
            "{name}[{index}]"
        );
    }
}

#[test]
fn a_timestamp_without_tolerance_gets_the_default_window() {
    let config = json!({
        "algorithm": "hmac-sha256",
        "signature": {"header": "x-sig", "encoding": "hex"},
        "signed": "{timestamp}.{body}",
        "timestamp": {"header": "x-ts", "unit": "seconds"}
    });
    let got = facts(&config).expect("valid");
    assert_eq!(got.default_tolerance_seconds, Some(300));
    assert_eq!(got.key_formats, vec![KeyFormat::Raw]);
}

/// A minimal valid configuration, changed by `patch` (objects merge, `null` removes).
fn base(patch: Value) -> Value {
    fn merge(into: &mut Value, patch: Value) {
        match (into, patch) {
            (Value::Object(into), Value::Object(patch)) => {
                for (key, value) in patch {
                    if value.is_null() {
                        into.remove(&key);
                    } else {
                        merge(into.entry(key).or_insert(Value::Null), value);
                    }
                }
            }
            (into, patch) => *into = patch,
        }
    }
    let mut config = json!({
        "algorithm": "hmac-sha256",
        "signature": {"header": "X-Sig", "encoding": "hex"},
    });
    merge(&mut config, patch);
    config
}

#[test]
fn the_minimal_base_is_valid() {
    assert_eq!(
        facts(&base(json!({}))),
        Ok(EndpointFacts {
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: None
        })
    );
}

#[track_caller]
fn refused(config: Value, key: &str, says: &str) {
    let error = facts(&config).expect_err(&format!("{config} must be refused"));
    assert_eq!(error.key, key, "{config}: {}", error.message);
    assert!(
        error.message.contains(says),
        "{config}: {key}: {:?} lacks {says:?}",
        error.message
    );
}

#[test]
fn unknown_or_missing_algorithm() {
    refused(
        base(json!({"algorithm": "hmac-md5"})),
        "algorithm",
        "unknown algorithm \"hmac-md5\"",
    );
    refused(
        base(json!({"algorithm": "HMAC-SHA256"})),
        "algorithm",
        "hmac-sha256",
    );
    refused(base(json!({"algorithm": null})), "algorithm", "required");
    refused(
        base(json!({"algorithm": 256})),
        "algorithm",
        "must be a string",
    );
}

#[test]
fn bad_or_missing_encoding() {
    refused(
        base(json!({"signature": {"encoding": "b64"}})),
        "signature.encoding",
        "unknown encoding \"b64\"",
    );
    refused(
        base(json!({"signature": {"encoding": null}})),
        "signature.encoding",
        "required",
    );
    refused(
        base(json!({"signature": {"encoding": "text"}})),
        "signature.encoding",
        "token",
    );
}

#[test]
fn templates_with_unknown_placeholders_or_without_the_body() {
    refused(
        base(json!({"signed": "{payload}.{body}"})),
        "signed",
        "unknown placeholder {payload}",
    );
    refused(base(json!({"signed": "{body"})), "signed", "never closed");
    refused(
        base(json!({"signed": "{/id}.{body}"})),
        "signed",
        "sign {body}",
    );
    refused(
        base(json!({"signed": "{header:x-id}"})),
        "signed",
        "does not include {body}",
    );
    refused(
        base(json!({"event": {"type": "{kind}"}})),
        "event.type",
        "unknown placeholder {kind}",
    );
    refused(
        base(json!({"event": {"type": ["{/type}", "{body}"]}})),
        "event.type[1]",
        "can only be signed",
    );
    refused(
        base(json!({"event": {"resource": {"kind": "{/type|after:.}", "id": "{/id}"}}})),
        "event.resource.kind",
        "unknown filter",
    );
    refused(
        base(json!({"message_id": "{header:x id}"})),
        "message_id",
        "not an HTTP header name",
    );
}

#[test]
fn a_window_is_judged_only_on_a_signed_time() {
    // From a header or a key of the signature header, the time must be signed: else a
    // replay carries a fresh one and the window stops nothing.
    for timestamp in [
        json!({"header": "x-ts", "unit": "seconds"}),
        json!({"header": "x-ts", "unit": "seconds", "tolerance_seconds": 60}),
    ] {
        refused(
            base(json!({"timestamp": timestamp})),
            "signed",
            "does not include {timestamp}",
        );
    }
    refused(
        base(
            json!({"signed": "{header:x-other}.{body}", "timestamp": {"header": "x-ts", "unit": "seconds"}}),
        ),
        "signed",
        "does not include {timestamp}",
    );
    // Signed as {timestamp}, as the header itself, or in the body: accepted.
    for (signed, timestamp) in [
        (
            "{timestamp}.{body}",
            json!({"header": "x-ts", "unit": "seconds"}),
        ),
        (
            "{header:X-TS}.{body}",
            json!({"header": "x-ts", "unit": "seconds"}),
        ),
        ("{body}", json!({"pointer": "/ts", "unit": "seconds"})),
    ] {
        let config = base(json!({"signed": signed, "timestamp": timestamp}));
        assert!(facts(&config).is_ok(), "{config}");
    }
    // A token signs nothing: no window.
    refused(
        base(json!({
            "algorithm": "token",
            "signed": null,
            "signature": {"encoding": "text"},
            "timestamp": {"header": "x-ts", "unit": "seconds"}
        })),
        "timestamp",
        "signs nothing",
    );
}

#[test]
fn the_timestamp_placeholder_needs_a_header_or_key_source() {
    refused(
        base(json!({"signed": "{timestamp}.{body}"})),
        "signed",
        "[timestamp]",
    );
    refused(
        base(json!({
            "signed": "{timestamp}.{body}",
            "timestamp": {"pointer": "/ts", "unit": "seconds"}
        })),
        "signed",
        "not from the body",
    );
}

#[test]
fn missing_signature_header() {
    refused(
        base(json!({"signature": {"header": null}})),
        "signature.header",
        "required",
    );
    refused(
        base(json!({"signature": null})),
        "signature.header",
        "required",
    );
    refused(
        base(json!({"signature": {"header": "X Sig"}})),
        "signature.header",
        "not an HTTP header name",
    );
    refused(
        base(json!({"signature": {"header": 1}})),
        "signature.header",
        "must be a string",
    );
    refused(
        base(json!({"signature": "X-Sig"})),
        "signature",
        "must be a table",
    );
}

#[test]
fn bad_json_pointers() {
    refused(
        base(json!({"event": {"id": "{/data//id}"}})),
        "event.id",
        "empty step",
    );
    refused(
        base(json!({"event": {"id": "/data/id"}})),
        "event.id",
        "in braces",
    );
    refused(
        base(json!({"timestamp": {"pointer": "data/ts", "unit": "seconds"}})),
        "timestamp.pointer",
        "not a JSON Pointer",
    );
    refused(
        base(json!({"event": {"resource": [{"kind": "a", "id": "{/a~2}"}]}})),
        "event.resource[0].id",
        "~0",
    );
    refused(
        base(json!({"event": {"deleted": "{data/deleted}"}})),
        "event.deleted",
        "unknown placeholder",
    );
}

#[test]
fn a_window_needs_a_timestamp_source() {
    refused(
        base(json!({"timestamp": {"tolerance_seconds": 300}})),
        "timestamp.tolerance_seconds",
        "needs a signed timestamp",
    );
    refused(
        base(json!({"timestamp": {"unit": "seconds"}})),
        "timestamp",
        "names no source",
    );
    refused(
        base(json!({"timestamp": {"header": "x-ts", "pointer": "/ts", "unit": "seconds"}})),
        "timestamp.pointer",
        "one source",
    );
    refused(
        base(json!({"timestamp": {"header": "x-ts"}})),
        "timestamp.unit",
        "required",
    );
    refused(
        base(json!({"timestamp": {"header": "x-ts", "unit": "ms"}})),
        "timestamp.unit",
        "unknown unit",
    );
    refused(
        base(json!({"timestamp": {"header": "x-ts", "unit": "seconds", "tolerance_seconds": -1}})),
        "timestamp.tolerance_seconds",
        "whole number",
    );
    refused(
        base(
            json!({"timestamp": {"header": "x-ts", "unit": "seconds", "tolerance_seconds": "5m"}}),
        ),
        "timestamp.tolerance_seconds",
        "whole number",
    );
    refused(
        base(json!({"timestamp": {"header": "x-ts", "unit": "seconds", "tolerance_seconds": 0}})),
        "timestamp.tolerance_seconds",
        "at least 1",
    );
    refused(
        base(json!({"timestamp": {"key": "t", "unit": "seconds"}})),
        "timestamp.key",
        "key-values",
    );
    // The signature's own key is never read as the timestamp: every request would be
    // refused, as if the sender had sent no time.
    refused(
        base(json!({
            "signature": {"format": "key-values", "key": "t"},
            "timestamp": {"key": "t", "unit": "seconds"},
        })),
        "timestamp.key",
        "is signature.key",
    );
    refused(
        base(json!({
            "signature": {"format": "key-values", "key": "v1"},
            "timestamp": {"key": " t", "unit": "seconds"},
        })),
        "timestamp.key",
        "the separator or spaces",
    );
}

#[test]
fn unknown_keys_at_every_level() {
    refused(
        base(json!({"algoritm": "hmac-sha256"})),
        "algoritm",
        "unknown key",
    );
    refused(
        base(json!({"signature": {"encodng": "hex"}})),
        "signature.encodng",
        "unknown key",
    );
    refused(
        base(json!({"timestamp": {"header": "x-ts", "unit": "seconds", "window": 5}})),
        "timestamp.window",
        "unknown key",
    );
    refused(
        base(json!({"secret": {"fromat": "hex"}})),
        "secret.fromat",
        "unknown key",
    );
    refused(
        base(json!({"event": {"kind": "{/kind}"}})),
        "event.kind",
        "unknown key",
    );
    refused(
        base(json!({"event": {"resource": [
            {"kind": "a", "id": "{/id}"},
            {"kind": "b", "id": "{/id}", "versoin": "{/v}"}
        ]}})),
        "event.resource[1].versoin",
        "unknown key",
    );
    refused(
        base(json!({"event": {"deleted": {"value": "{/a}", "equal": "x"}}})),
        "event.deleted.equal",
        "unknown key",
    );
    refused(json!([1]), "", "must be a table");
}

#[test]
fn secret_formats_must_fit_the_algorithm() {
    refused(
        base(json!({"secret": {"format": "pem"}})),
        "secret.format",
        "unknown secret format",
    );
    refused(
        base(json!({"secret": {"format": "ed25519-hex"}})),
        "secret.format",
        "not a key for this algorithm",
    );
    refused(
        base(json!({"algorithm": "ed25519"})),
        "secret.format",
        "required",
    );
    refused(
        base(json!({"algorithm": "ecdsa-p256-sha256", "secret": {"format": "base64"}})),
        "secret.format",
        "ecdsa-p256-spki-base64",
    );
    refused(
        base(json!({"secret": {"format": "raw", "prefix": "whsec_"}})),
        "secret.prefix",
        "only a base64 secret",
    );
    refused(
        base(json!({"secret": {"format": "base64", "prefix": ""}})),
        "secret.prefix",
        "must not be empty",
    );
    let ed = facts(&base(json!({
        "algorithm": "ed25519",
        "secret": {"format": "ed25519-hex"},
        "signature": {"encoding": "base64"}
    })));
    assert_eq!(ed.map(|f| f.key_formats), Ok(vec![KeyFormat::Ed25519Hex]));
    let ecdsa = facts(&base(json!({
        "algorithm": "ecdsa-p256-sha256",
        "secret": {"format": "ecdsa-p256-spki-base64"}
    })));
    assert_eq!(
        ecdsa.map(|f| f.key_formats),
        Ok(vec![KeyFormat::EcdsaP256SpkiBase64])
    );
    let b64 = facts(&base(json!({"secret": {"format": "base64"}})));
    assert_eq!(
        b64.map(|f| f.key_formats),
        Ok(vec![KeyFormat::Base64AfterPrefix(String::new())])
    );
}

#[test]
fn signature_layouts_are_checked() {
    refused(
        base(json!({"signature": {"format": "key-values"}})),
        "signature.key",
        "required",
    );
    refused(
        base(json!({"signature": {"key": "v1"}})),
        "signature.key",
        "key-values",
    );
    refused(
        base(json!({"signature": {"format": "csv"}})),
        "signature.format",
        "\"list\" or \"key-values\"",
    );
    refused(
        base(json!({"signature": {"labels": ["v1"]}})),
        "signature.label_separator",
        "required with labels",
    );
    refused(
        base(json!({"signature": {"label_separator": ","}})),
        "signature.labels",
        "required with label_separator",
    );
    refused(
        base(json!({"signature": {"labels": [], "label_separator": ","}})),
        "signature.labels",
        "at least one",
    );
    refused(
        base(json!({"signature": {"separator": ",", "labels": ["v1"], "label_separator": ","}})),
        "signature.label_separator",
        "must differ",
    );
    refused(
        base(json!({"signature": {"format": "key-values", "key": "v1", "labels": ["v1"]}})),
        "signature.labels",
        "only with format = \"list\"",
    );
    refused(
        base(json!({"signature": {"separator": ""}})),
        "signature.separator",
        "must not be empty",
    );
    refused(
        base(json!({"signature": {"format": "key-values", "key": "v1", "separator": "="}})),
        "signature.separator",
        "cannot contain =",
    );
    refused(
        base(json!({"signature": {"prefix": ""}})),
        "signature.prefix",
        "must not be empty",
    );
    // Keys and labels are read trimmed, between separators: one that holds a
    // separator or spaces at its ends would never match, and refuse every request.
    for key in ["v1 ", "v,1"] {
        refused(
            base(json!({"signature": {"format": "key-values", "key": key}})),
            "signature.key",
            "the separator or spaces",
        );
    }
    for (labels, separator) in [([" v1"], " "), (["v1="], " "), (["v 1"], " ")] {
        refused(
            base(
                json!({"signature": {"separator": separator, "labels": labels, "label_separator": "="}}),
            ),
            "signature.labels",
            "could never match",
        );
    }
}

#[test]
fn other_mistakes_name_their_key() {
    refused(
        base(json!({"algorithm": "token", "signed": "{body}"})),
        "signed",
        "nothing is signed",
    );
    refused(base(json!({"body": "xml"})), "body", "\"json\" or \"any\"");
    refused(
        base(json!({"event": {"id": "evt"}})),
        "event.id",
        "same for every event",
    );
    refused(
        base(json!({"message_id": "m"})),
        "message_id",
        "same for every delivery",
    );
    refused(
        base(json!({"event": {"occurred_at": "{/t}"}})),
        "event.occurred_at_unit",
        "required",
    );
    refused(
        base(json!({"event": {"resource": {"kind": "a", "id": "{/id}", "version": "{/v}"}}})),
        "event.resource.version_format",
        "required",
    );
    refused(
        base(
            json!({"event": {"resource": {"kind": "a", "id": "{/id}", "version": "{/v}", "version_format": "semver"}}}),
        ),
        "event.resource.version_format",
        "unknown format",
    );
    refused(
        base(json!({"event": {"resource": {"id": "{/id}"}}})),
        "event.resource.kind",
        "required",
    );
    refused(
        base(json!({"event": {"resource": []}})),
        "event.resource",
        "at least one",
    );
    refused(
        base(json!({"event": {"required": ["id"]}})),
        "event.required",
        "not set",
    );
    refused(
        base(json!({"event": {"id": "{/id}", "required": ["ids"]}})),
        "event.required",
        "expected id, type",
    );
    refused(
        base(json!({"event": {"ignore": {"equals": "ping"}}})),
        "event.ignore.value",
        "required",
    );
}

// ------------------------------------------------------------------ plan_verification

#[test]
fn stripe_mapping_signs_t_as_sent_and_keeps_every_v1() {
    let req = request(file_config("stripe", 0))
        .header("Stripe-Signature", "t=01700000000,v1=00ff,v0=aa,v1=0102")
        .body("{}")
        .build();
    let plan = Generic::plan_verification(&req).expect("plan");
    assert_eq!(
        plan.message,
        vec![
            Part::Text("01700000000".into()),
            Part::Text(".".into()),
            Part::Body
        ]
    );
    assert_eq!(plan.timestamp, Some(1_700_000_000));
    assert_eq!(
        plan.candidates,
        vec![hmac(vec![0x00, 0xff]), hmac(vec![0x01, 0x02])]
    );
    assert_eq!(plan.message_id, None);
}

#[test]
fn stripe_mapping_rejects_like_the_stripe_plugin() {
    let plan = |header: Option<&str>| {
        let mut req = request(file_config("stripe", 0)).body("{}");
        if let Some(h) = header {
            req = req.header("Stripe-Signature", h);
        }
        Generic::plan_verification(&req.build())
    };
    assert!(matches!(plan(None), Err(Rejection::MissingSignature(_))));
    assert!(matches!(
        plan(Some("t=1,v0=aa")),
        Err(Rejection::MissingSignature(_))
    ));
    for malformed in ["v1=00ff", "t=1,v1=zz", "t=2024-06-12T18:40:05Z,v1=00"] {
        assert!(
            matches!(plan(Some(malformed)), Err(Rejection::MalformedSignature(_))),
            "{malformed}"
        );
    }
}

#[test]
fn slack_mapping_signs_the_timestamp_header_as_sent() {
    let req = |sig: Option<&str>, ts: Option<&str>| {
        let mut b = request(file_config("slack", 0)).body("token=x");
        if let Some(sig) = sig {
            b = b.header("X-Slack-Signature", sig);
        }
        if let Some(ts) = ts {
            b = b.header("X-Slack-Request-Timestamp", ts);
        }
        Generic::plan_verification(&b.build())
    };
    let plan = req(Some("v0=00ff"), Some(" 1531420618")).expect("plan");
    assert_eq!(
        plan.message,
        vec![
            Part::Text("v0:".into()),
            Part::Header("x-slack-request-timestamp".into()),
            Part::Text(":".into()),
            Part::Body
        ]
    );
    assert_eq!(plan.timestamp, Some(1_531_420_618));
    assert_eq!(plan.candidates, vec![hmac(vec![0x00, 0xff])]);
    assert!(matches!(
        req(None, Some("1")),
        Err(Rejection::MissingSignature(_))
    ));
    assert!(matches!(
        req(Some("v0=00"), None),
        Err(Rejection::MissingSignature(_))
    ));
    for (sig, ts) in [("00ff", "1"), ("v0=zz", "1"), ("v0=00", "soon")] {
        assert!(
            matches!(
                req(Some(sig), Some(ts)),
                Err(Rejection::MalformedSignature(_))
            ),
            "{sig} {ts}"
        );
    }
}

#[test]
fn standard_webhooks_mapping_needs_every_signed_header() {
    let headers = |id: Option<&str>, sig: &str| {
        let mut b = request(file_config("standard-webhooks", 0))
            .header("webhook-timestamp", "1614265330")
            .header("webhook-signature", sig)
            .body("{}");
        if let Some(id) = id {
            b = b.header("webhook-id", id);
        }
        Generic::plan_verification(&b.build())
    };
    let plan = headers(Some("msg_1"), "v1,AP8= v2,AAAA  v1a,AQI= v1,AQI=").expect("plan");
    assert_eq!(
        plan.message,
        vec![
            Part::Header("webhook-id".into()),
            Part::Text(".".into()),
            Part::Header("webhook-timestamp".into()),
            Part::Text(".".into()),
            Part::Body,
        ]
    );
    assert_eq!(
        plan.candidates,
        vec![hmac(vec![0x00, 0xff]), hmac(vec![0x01, 0x02])]
    );
    assert_eq!(plan.message_id.as_deref(), Some("msg_1"));
    assert_eq!(
        headers(None, "v1,AP8="),
        Err(Rejection::MissingSignature("webhook-id".into()))
    );
    assert!(matches!(
        headers(Some("m"), "v2,AP8="),
        Err(Rejection::MissingSignature(_))
    ));
    for bad in ["v1,***", "g0hM9SsE"] {
        assert!(
            matches!(
                headers(Some("m"), bad),
                Err(Rejection::MalformedSignature(_))
            ),
            "{bad}"
        );
    }
    // An entry with another label is skipped unread, whatever it holds.
    assert!(matches!(
        headers(Some("m"), "v1a,%%"),
        Err(Rejection::MissingSignature(_))
    ));
    let ed = request(file_config("standard-webhooks", 2))
        .header("webhook-id", "m")
        .header("webhook-timestamp", "1")
        .header("webhook-signature", "v1,AP8= v1a,AQI=")
        .build();
    let plan = Generic::plan_verification(&ed).expect("plan");
    assert_eq!(
        plan.candidates,
        vec![Candidate::new(Algorithm::Ed25519, vec![0x01, 0x02])]
    );
}

#[test]
fn github_mapping_signs_the_body_with_the_delivery_as_message_id() {
    let req = request(file_config("github", 0))
        .header("X-Hub-Signature-256", "sha256=00ff")
        .header("X-GitHub-Delivery", " d-1 ")
        .body("{}")
        .build();
    let plan = Generic::plan_verification(&req).expect("plan");
    assert_eq!(plan.message, vec![Part::Body]);
    assert_eq!(plan.candidates, vec![hmac(vec![0x00, 0xff])]);
    assert_eq!(plan.timestamp, None);
    assert_eq!(plan.message_id.as_deref(), Some("d-1"));
    let legacy_only = request(file_config("github", 0))
        .header("X-Hub-Signature", "sha1=00ff")
        .build();
    assert!(matches!(
        Generic::plan_verification(&legacy_only),
        Err(Rejection::MissingSignature(_))
    ));
}

#[test]
fn in_house_mapping_signs_method_url_millisecond_timestamp_and_delivery_id() {
    let req = RequestBuilder::new("put", URL)
        .config(file_config("in-house", 0))
        .header("X-Ledger-Timestamp", "1718217605999")
        .header("X-Ledger-Delivery", "dlv_1")
        .header("X-Ledger-Signature", "v1=-_8 v0=AAAA v1=AQ")
        .body("{}")
        .build();
    let plan = Generic::plan_verification(&req).expect("plan");
    assert_eq!(
        plan.message,
        vec![
            Part::Method,
            Part::Text(" ".into()),
            Part::Url,
            Part::Text("\n".into()),
            Part::Header("x-ledger-timestamp".into()),
            Part::Text("\n".into()),
            Part::Header("x-ledger-delivery".into()),
            Part::Text("\n".into()),
            Part::Body
        ]
    );
    assert_eq!(plan.timestamp, Some(1_718_217_605));
    assert_eq!(
        plan.candidates,
        vec![
            Candidate::new(Algorithm::HmacSha512, vec![0xfb, 0xff]),
            Candidate::new(Algorithm::HmacSha512, vec![0x01]),
        ]
    );
    assert_eq!(plan.message_id.as_deref(), Some("dlv_1"));
}

#[test]
fn timestamps_in_the_body_and_as_rfc3339() {
    let config = base(json!({"timestamp": {"pointer": "/meta/sent_at", "unit": "rfc3339"}}));
    let plan = |body: &str| {
        let req = request(config.clone())
            .header("X-Sig", "00")
            .body(body)
            .build();
        Generic::plan_verification(&req)
    };
    let ok = plan(r#"{"meta":{"sent_at":"1970-01-01T01:00:00+01:00"}}"#).expect("plan");
    assert_eq!(ok.timestamp, Some(0));
    assert_eq!(ok.message, vec![Part::Body]);
    assert!(matches!(
        plan(r#"{"meta":{}}"#),
        Err(Rejection::MissingSignature(_))
    ));
    assert!(matches!(
        plan(r#"{"meta":{"sent_at":"yesterday"}}"#),
        Err(Rejection::MalformedSignature(_))
    ));
    assert!(matches!(plan("not json"), Err(Rejection::MalformedBody(_))));
    let ms = base(json!({"timestamp": {"pointer": "/ts", "unit": "milliseconds"}}));
    let req = request(ms)
        .header("X-Sig", "00")
        .body(r#"{"ts":-1}"#)
        .build();
    assert_eq!(
        Generic::plan_verification(&req).map(|p| p.timestamp),
        Ok(Some(-1))
    );
}

#[test]
fn a_number_of_seconds_or_milliseconds_may_have_a_fraction() {
    let at = |unit: &str, value: &str| {
        let config = base(json!({"timestamp": {"pointer": "/ts", "unit": unit}}));
        let req = request(config)
            .header("X-Sig", "00")
            .body(format!(r#"{{"ts":{value}}}"#))
            .build();
        Generic::plan_verification(&req).map(|p| p.timestamp)
    };
    assert_eq!(at("seconds", "1521472262.908181"), Ok(Some(1_521_472_262)));
    assert_eq!(
        at("seconds", r#""1355517523.000005""#),
        Ok(Some(1_355_517_523))
    );
    assert_eq!(at("seconds", "-0.5"), Ok(Some(-1)));
    assert_eq!(
        at("milliseconds", "1521472262908.5"),
        Ok(Some(1_521_472_262))
    );
    for odd in [
        "1e9",
        r#""1.""#,
        r#"".5""#,
        r#""NaN""#,
        "1234567890123456.5",
    ] {
        assert!(
            matches!(at("seconds", odd), Err(Rejection::MalformedSignature(_))),
            "{odd}"
        );
    }
}

#[test]
fn token_mapping_signs_nothing_and_carries_the_token() {
    let config = json!({"algorithm": "token", "signature": {"header": "X-Token"}});
    assert_eq!(
        facts(&config),
        Ok(EndpointFacts {
            key_formats: vec![KeyFormat::Raw],
            default_tolerance_seconds: None
        })
    );
    let req = request(config).header("X-Token", " s3cret ").build();
    let plan = Generic::plan_verification(&req).expect("plan");
    // Not signed: the body only keeps the ids the host derives apart.
    assert_eq!(plan.message, vec![Part::Body]);
    assert_eq!(
        plan.candidates,
        vec![Candidate::new(Algorithm::Token, b"s3cret".to_vec())]
    );
}

#[test]
fn a_bad_configuration_at_call_time_is_unsupported_not_a_panic() {
    for config in [
        json!({}),
        json!([]),
        json!("x"),
        base(json!({"signature": {"encoding": "b64"}})),
    ] {
        let req = request(config.clone())
            .header("X-Sig", "00")
            .body("{}")
            .build();
        assert!(
            matches!(
                Generic::plan_verification(&req),
                Err(Rejection::Unsupported(_))
            ),
            "{config}"
        );
        assert!(
            matches!(
                Generic::describe_event(&req),
                Err(Rejection::Unsupported(_))
            ),
            "{config}"
        );
    }
    let handshake: Option<Handshake> = Generic::handshake(&request(json!({})).build());
    assert_eq!(handshake, None);
}

// ------------------------------------------------------------------ describe_event

fn github(event: &str, body: &str) -> Result<Event, Rejection> {
    let req = request(file_config("github", 0))
        .header("X-GitHub-Delivery", "d-1")
        .header("X-GitHub-Event", event)
        .body(body)
        .build();
    Generic::describe_event(&req)
}

#[test]
fn github_mapping_builds_the_type_and_picks_the_first_resource() {
    let event = github(
        "issues",
        r#"{"action":"deleted","issue":{"id":1,"updated_at":"2024-01-01T00:00:01Z"},
            "repository":{"id":2}}"#,
    )
    .expect("event");
    assert_eq!(event.id.as_deref(), Some("d-1"));
    assert_eq!(event.event_type, "issues.deleted");
    assert_eq!(event.resource_kind.as_deref(), Some("issue"));
    assert_eq!(event.resource_id.as_deref(), Some("1"));
    assert_eq!(event.resource_version, Some(1_704_067_201_000));
    assert!(event.deleted);
    assert_eq!(event.disposition, Disposition::Process);

    let push = github("push", r#"{"repository":{"id":2}}"#).expect("push");
    assert_eq!(push.event_type, "push");
    assert_eq!(push.resource_kind.as_deref(), Some("repository"));
    assert_eq!(push.resource_version, None);
    assert!(!push.deleted);

    let ping = github("ping", r#"{"zen":"Design for failure."}"#).expect("ping");
    assert_eq!(ping.disposition, Disposition::Ignore("ping".into()));
    assert_eq!(ping.resource_id, None);

    assert!(matches!(
        github("push", "Hello, World!"),
        Err(Rejection::MalformedBody(_))
    ));
    let no_delivery = request(file_config("github", 0))
        .header("X-GitHub-Event", "push")
        .body("{}")
        .build();
    assert!(matches!(
        Generic::describe_event(&no_delivery),
        Err(Rejection::MalformedBody(_))
    ));
}

fn shopify(topic: &str, body: impl AsRef<[u8]>) -> Event {
    let req = request(file_config("shopify", 0))
        .header("X-Shopify-Webhook-Id", "w-1")
        .header("X-Shopify-Topic", topic)
        .header("X-Shopify-Triggered-At", "2024-01-01T00:00:00.123456Z")
        .body(body)
        .build();
    Generic::describe_event(&req).expect("event")
}

#[test]
fn shopify_mapping_reads_headers_and_filters_the_topic() {
    let body = r#"{"id":820982911946154508,"updated_at":"2024-01-01T01:00:00-01:00"}"#;
    let event = shopify("orders/delete", body);
    assert_eq!(event.id.as_deref(), Some("w-1"));
    assert_eq!(event.event_type, "orders/delete");
    assert_eq!(event.occurred_at, Some(1_704_067_200));
    assert_eq!(event.resource_kind.as_deref(), Some("orders"));
    assert_eq!(event.resource_id.as_deref(), Some("820982911946154508"));
    assert_eq!(event.resource_version, Some(1_704_074_400_000));
    assert!(event.deleted);
    // body = "any": an XML or non-UTF-8 body is described from the headers.
    for body in [b"<order/>".to_vec(), vec![0xff, b'{', b'}']] {
        let event = shopify("orders/create", body);
        assert_eq!(event.event_type, "orders/create");
        assert_eq!(event.resource_kind, None);
        assert_eq!(event.resource_id, None);
    }
}

#[test]
fn stripe_mapping_reads_numbers_and_nested_objects() {
    let req = request(file_config("stripe", 0))
        .body(
            r#"{"id":"evt_1","type":"customer.deleted","created":1700000000,
                "data":{"object":{"id":"cus_9","object":"customer"}}}"#,
        )
        .build();
    let event = Generic::describe_event(&req).expect("event");
    assert_eq!(event.id.as_deref(), Some("evt_1"));
    assert_eq!(event.event_type, "customer.deleted");
    assert_eq!(event.occurred_at, Some(1_700_000_000));
    assert_eq!(event.resource_kind.as_deref(), Some("customer"));
    assert_eq!(event.resource_id.as_deref(), Some("cus_9"));
    assert_eq!(event.resource_version, Some(1_700_000_000));
    assert!(event.deleted);
    for body in [r#"{"type":"x"}"#, r#"{"id":"evt_1"}"#, "not json"] {
        let req = request(file_config("stripe", 0)).body(body).build();
        assert!(
            matches!(
                Generic::describe_event(&req),
                Err(Rejection::MalformedBody(_))
            ),
            "{body}"
        );
    }
}

fn slack(body: &str) -> Event {
    let req = request(file_config("slack", 0)).body(body).build();
    Generic::describe_event(&req).expect("event")
}

#[test]
fn slack_mapping_falls_back_between_alternatives() {
    let event = slack(
        r#"{"type":"event_callback","event_id":"Ev1","event_time":1700000000,
            "event":{"type":"app_mention"}}"#,
    );
    assert_eq!(event.id.as_deref(), Some("Ev1"));
    assert_eq!(event.event_type, "app_mention");
    assert_eq!(event.occurred_at, Some(1_700_000_000));
    let challenge = slack(r#"{"type":"url_verification","challenge":"c"}"#);
    assert_eq!(challenge.event_type, "url_verification");
    assert_eq!(
        challenge.disposition,
        Disposition::Ignore("url_verification".into())
    );
    let command = slack("token=t&command=%2Fdeploy");
    assert_eq!(command.event_type, "unknown");
    assert_eq!(command.id, None);
}

#[test]
fn standard_webhooks_mapping_defaults_the_type_and_derives_the_kind() {
    let describe = |body: &str| {
        let req = request(file_config("standard-webhooks", 0))
            .header("webhook-id", "msg_1")
            .body(body)
            .build();
        Generic::describe_event(&req)
    };
    let spec = describe(r#"{"test": 2432232314}"#).expect("event");
    assert_eq!(spec.event_type, "unknown");
    assert_eq!(spec.id.as_deref(), Some("msg_1"));
    assert_eq!(spec.resource_id, None);
    let deleted = describe(
        r#"{"type":"contact.deleted","timestamp":"2022-11-03T20:26:10.344522Z",
            "data":{"id":"c_1","updatedAt":"2022-11-03T20:26:10.5Z"}}"#,
    )
    .expect("event");
    assert_eq!(deleted.occurred_at, Some(1_667_507_170));
    assert_eq!(deleted.resource_kind.as_deref(), Some("contact"));
    assert_eq!(deleted.resource_version, Some(1_667_507_170_500));
    assert!(deleted.deleted);
    // |before: keeps the whole value when the separator is absent.
    let flat = describe(r#"{"type":"ping","data":{"id":"p"}}"#).expect("event");
    assert_eq!(flat.resource_kind.as_deref(), Some("ping"));
    assert!(matches!(
        describe("contact updated"),
        Err(Rejection::MalformedBody(_))
    ));
}

#[test]
fn values_are_strings_numbers_and_booleans_and_empty_means_absent() {
    let config = base(json!({"event": {
        "id": ["{/empty}", "{/null}", "{/object}", "{/n}"],
        "type": "{/flag}:{/f}",
        "resource": {"kind": "thing", "id": "{/s}", "version": "{/v}", "version_format": "integer"},
        "deleted": "{/flag}",
        "required": ["id", "type", "resource"]
    }}));
    let req = request(config)
        .body(r#"{"empty":"","null":null,"object":{"a":1},"n":-1.5e3,"flag":true,"f":false,"s":"a\"b","v":"12"}"#)
        .build();
    let event = Generic::describe_event(&req).expect("event");
    assert_eq!(event.id.as_deref(), Some("-1.5e3"));
    assert_eq!(event.event_type, "true:false");
    assert_eq!(event.resource_kind.as_deref(), Some("thing"));
    assert_eq!(event.resource_id.as_deref(), Some("a\"b"));
    assert_eq!(event.resource_version, Some(12));
    assert!(event.deleted);
}

#[test]
fn required_fields_that_resolve_to_nothing_are_malformed_bodies() {
    let config = base(json!({"event": {
        "id": "{header:X-Id}",
        "occurred_at": "{/at}",
        "occurred_at_unit": "milliseconds",
        "resource": {"kind": "thing", "id": "{/id}"},
        "required": ["occurred_at", "resource"]
    }}));
    let describe = |body: &str| {
        let req = request(config.clone()).body(body).build();
        Generic::describe_event(&req)
    };
    let ok = describe(r#"{"at":1700000000999,"id":7}"#).expect("event");
    assert_eq!(ok.occurred_at, Some(1_700_000_000));
    assert_eq!(ok.id, None, "id is optional and its header is absent");
    assert_eq!(ok.event_type, "unknown");
    assert_eq!(ok.resource_id.as_deref(), Some("7"));
    for bad in [r#"{"id":7}"#, r#"{"at":"soon","id":7}"#, r#"{"at":1}"#] {
        assert!(
            matches!(describe(bad), Err(Rejection::MalformedBody(_))),
            "{bad}"
        );
    }
}

#[test]
fn conditions_match_equals_prefixes_and_suffixes() {
    let config = base(json!({"event": {
        "type": "{/type}",
        "resource": {"kind": "thing", "id": "{/id}"},
        "deleted": {"value": "{/type}", "equals": ["gone"], "starts_with": "purge.", "ends_with": [".deleted", ".removed"]},
        "ignore": {"value": "{/type}", "starts_with": "test."}
    }}));
    let event = |t: &str| {
        let req = request(config.clone())
            .body(format!(r#"{{"type":"{t}","id":"1"}}"#))
            .build();
        Generic::describe_event(&req).expect("event")
    };
    for deleted in ["gone", "purge.all", "thing.deleted", "thing.removed"] {
        assert!(event(deleted).deleted, "{deleted}");
    }
    for kept in ["gone.not", "thing.updated", "deleted"] {
        assert!(!event(kept).deleted, "{kept}");
    }
    assert_eq!(
        event("test.hello").disposition,
        Disposition::Ignore("test.hello".into())
    );
}

// ----------------------------------------------------------------- reconciliation

use hookhost_plugin_sdk::{Answer, Page, ReconcileInfo, Repair, RequestPlan};

/// The base mapping with an event id and a reconcile table; `patch` sets (or, with
/// `null`, removes) keys of the reconcile table.
fn reconciling(patch: Value) -> Value {
    let mut table = json!({
        "api_base": "https://api.example.com",
        "hosts": ["api.example.com"],
        "path": "/v1/events?since={since}",
        "items": "/data",
        "id": "/id",
        "type": "/type",
    });
    if let (Some(table), Value::Object(patch)) = (table.as_object_mut(), patch) {
        for (key, value) in patch {
            if value.is_null() {
                table.remove(&key);
            } else {
                table.insert(key, value);
            }
        }
    }
    base(json!({
        "event": {"id": "{/id}", "type": "{/type}"},
        "reconcile": table,
    }))
}

fn page_answer(body: &str) -> Answer {
    Answer {
        status: 200,
        headers: Vec::new(),
        body: body.as_bytes().to_vec(),
    }
}

fn plan_target(config: &Value, since: i64, cursor: Option<&str>) -> String {
    Generic::reconcile_request(config, since, cursor)
        .expect("plan")
        .target
}

#[test]
fn reconcile_info_comes_from_the_reconcile_table() {
    assert_eq!(Generic::reconcile_info(&base(json!({}))), None);
    assert_eq!(
        Generic::reconcile_info(&reconciling(
            json!({"hosts": ["API.example.com", "files.example.com"]})
        )),
        Some(ReconcileInfo {
            hosts: vec!["api.example.com".into(), "files.example.com".into()],
            api_base: "https://api.example.com".into(),
            lists_events: true,
            fetches_objects: false,
        })
    );
    // A configuration the host would refuse lists nothing.
    assert_eq!(
        Generic::reconcile_info(&reconciling(json!({"items": "data"}))),
        None
    );
    assert!(facts(&reconciling(json!({}))).is_ok());
    let error = Generic::reconcile_request(&base(json!({})), 0, None).expect_err("no table");
    assert!(error.contains("no reconcile table"), "{error}");
    let error =
        Generic::reconcile_request(&reconciling(json!({"id": "id"})), 0, None).expect_err("bad");
    assert!(error.contains("reconcile.id"), "{error}");
}

#[test]
fn request_targets_replace_since_and_append_the_cursor() {
    let config = reconciling(json!({"cursor": "/next_cursor"}));
    let first = Generic::reconcile_request(&config, 1_700_000_000, None).expect("plan");
    assert_eq!(
        first,
        RequestPlan::get("/v1/events?since=1700000000").header("accept", "application/json")
    );
    assert_eq!(
        plan_target(&config, 1_700_000_000, Some("c_2")),
        "/v1/events?since=1700000000&cursor=c_2"
    );
    // The cursor is one parameter's value, whatever it holds.
    assert_eq!(
        plan_target(&config, 5, Some("a&since=0#x y/+=é")),
        "/v1/events?since=5&cursor=a%26since%3D0%23x%20y%2F%2B%3D%C3%A9"
    );
    assert!(Generic::reconcile_request(&config, 5, Some("")).is_err());

    let no_query = reconciling(json!({
        "path": "/v1/events", "cursor": "/next", "cursor_param": "page%5Bafter%5D"
    }));
    assert_eq!(plan_target(&no_query, 5, None), "/v1/events");
    assert_eq!(
        plan_target(&no_query, 5, Some("c")),
        "/v1/events?page%5Bafter%5D=c"
    );
    let open_query = reconciling(json!({"path": "/v1/events?", "cursor": "/next"}));
    assert_eq!(
        plan_target(&open_query, 5, Some("c")),
        "/v1/events?cursor=c"
    );
    let twice = reconciling(json!({"path": "/v1/events?from={since}&to={since}"}));
    assert_eq!(plan_target(&twice, 7, None), "/v1/events?from=7&to=7");
}

const ITEM_1: &str = r#"{"id":"evt_2","type":"order.paid","created":1700000020,"version":3,
    "object":{"type":"order","id":"o_1"}}"#;
const ITEM_2: &str =
    r#"{"id":41,"type":"order.deleted","created":"1700000010","object":{"type":"order","id":7}}"#;

#[test]
fn a_page_stores_each_item_as_listed_and_carries_the_cursor() {
    let config = reconciling(json!({
        "cursor": "/next_cursor",
        "resource_kind": "/object/type",
        "resource_id": "/object/id",
        "version": "/version",
        "occurred_at": "/created",
    }));
    let body = format!(r#"{{"data":[{ITEM_1},{ITEM_2}],"next_cursor":"c_2"}}"#);
    let page = Generic::reconcile_page(&config, 0, &page_answer(&body)).expect("page");
    assert_eq!(page.next_cursor.as_deref(), Some("c_2"));
    assert_eq!(page.events.len(), 2);
    assert_eq!(
        page.events[0].repair,
        Repair::Store(ITEM_1.as_bytes().to_vec())
    );
    assert_eq!(
        page.events[1].repair,
        Repair::Store(ITEM_2.as_bytes().to_vec())
    );
    let first = &page.events[0].event;
    assert_eq!(
        first,
        &Event::new("order.paid")
            .id("evt_2")
            .occurred_at(Some(1_700_000_020))
            .resource("order", "o_1")
            .version(Some(3))
    );
    // Numbers read as their text, as `{/id}` reads a pushed body.
    let second = &page.events[1].event;
    assert_eq!(second.id.as_deref(), Some("41"));
    assert_eq!(second.occurred_at, Some(1_700_000_010));
    assert_eq!(second.resource_id.as_deref(), Some("7"));
    assert_eq!(second.resource_version, None);

    // The same event pushed gets the same id and type from the mapping.
    let pushed = Generic::describe_event(
        &request(config.clone())
            .header("X-Sig", "00")
            .body(ITEM_1)
            .build(),
    )
    .expect("push");
    assert_eq!(
        (pushed.id, pushed.event_type),
        (first.id.clone(), first.event_type.clone())
    );

    // A numeric cursor is its text.
    let numeric = format!(r#"{{"data":[{ITEM_1}],"next_cursor":20}}"#);
    let page = Generic::reconcile_page(&config, 0, &page_answer(&numeric)).expect("page");
    assert_eq!(page.next_cursor.as_deref(), Some("20"));
}

#[test]
fn the_last_page_has_no_cursor() {
    let config = reconciling(json!({"cursor": "/next_cursor"}));
    for last in [
        format!(r#"{{"data":[{ITEM_1}]}}"#),
        format!(r#"{{"data":[{ITEM_1}],"next_cursor":null}}"#),
        format!(r#"{{"data":[{ITEM_1}],"next_cursor":""}}"#),
    ] {
        let page = Generic::reconcile_page(&config, 0, &page_answer(&last)).expect("page");
        assert_eq!((page.events.len(), page.next_cursor), (1, None), "{last}");
    }
    // An empty page ends the listing, whatever its cursor.
    assert_eq!(
        Generic::reconcile_page(
            &config,
            0,
            &page_answer(r#"{"data":[],"next_cursor":"again"}"#)
        ),
        Ok(Page::default())
    );
    // Without a cursor pointer the first page is the last.
    let single = reconciling(json!({}));
    let body = format!(r#"{{"data":[{ITEM_1}],"next_cursor":"c"}}"#);
    let page = Generic::reconcile_page(&single, 0, &page_answer(&body)).expect("page");
    assert_eq!(page.next_cursor, None);
    // A page that is the array itself.
    let bare = reconciling(json!({"items": ""}));
    let page =
        Generic::reconcile_page(&bare, 0, &page_answer(&format!("[{ITEM_2}]"))).expect("page");
    assert_eq!(
        page.events[0].repair,
        Repair::Store(ITEM_2.as_bytes().to_vec())
    );
}

#[test]
fn items_without_their_fields_fail_the_page_naming_item_and_pointer() {
    let config = reconciling(json!({
        "occurred_at": "/created",
        "resource_kind": "/object/type",
        "resource_id": "/object/id",
        "version": "/version",
    }));
    let cases = [
        ("nope", "page:"),
        (r#"{"items":[]}"#, "no array at /data"),
        (r#"{"data":{"id":"x"}}"#, "no array at /data"),
        (
            r#"{"data":[{"id":"a","type":"t"},{"type":"t"}]}"#,
            "item 1 (/data/1): no id at /id",
        ),
        (
            r#"{"data":[{"id":"","type":"t"}]}"#,
            "item 0 (/data/0): no id at /id",
        ),
        (
            r#"{"data":[{"id":"a","type":null}]}"#,
            "item 0 (/data/0): no type at /type",
        ),
        (r#"{"data":[{"id":{"n":1},"type":"t"}]}"#, "no id at /id"),
        (
            r#"{"data":[{"id":"a","type":"t","created":"yesterday"}]}"#,
            "item 0 (/data/0): /created is not unix seconds",
        ),
        (
            r#"{"data":[{"id":"a","type":"t","object":{"type":"o","id":1},"version":-1}]}"#,
            "/version is not a non-negative integer",
        ),
    ];
    for (body, wanted) in cases {
        let error = Generic::reconcile_page(&config, 0, &page_answer(body)).expect_err(body);
        assert!(error.contains(wanted), "{body}: {error}");
    }
    // Optional fields that are absent or null are simply not set.
    let page = Generic::reconcile_page(
        &config, 0,
        &page_answer(r#"{"data":[{"id":"a","type":"t","created":null,"object":{"type":"o"},"version":"x"}]}"#),
    )
    .expect("page");
    assert_eq!(page.events[0].event, Event::new("t").id("a"));
}

#[test]
fn reconcile_tables_are_checked_naming_the_key() {
    let cases: &[(Value, &str, &str)] = &[
        (json!({"api_base": null}), "reconcile.api_base", "required"),
        (
            json!({"api_base": "ftp://x"}),
            "reconcile.api_base",
            "https://",
        ),
        (
            json!({"api_base": "https://"}),
            "reconcile.api_base",
            "name a host",
        ),
        (
            json!({"api_base": "api.example.com"}),
            "reconcile.api_base",
            "https://",
        ),
        (json!({"hosts": null}), "reconcile.hosts", "at least one"),
        (json!({"hosts": []}), "reconcile.hosts", "at least one"),
        (
            json!({"hosts": ["https://api.example.com"]}),
            "reconcile.hosts",
            "not a host name",
        ),
        (
            json!({"hosts": ["api.example.com:443"]}),
            "reconcile.hosts",
            "not a host name",
        ),
        (json!({"hosts": [1]}), "reconcile.hosts", "list of strings"),
        (json!({"path": null}), "reconcile.path", "required"),
        (
            json!({"path": "v1/events"}),
            "reconcile.path",
            "starting with one /",
        ),
        (
            json!({"path": "//evil.example/x"}),
            "reconcile.path",
            "starting with one /",
        ),
        (
            json!({"path": "https://api.example.com/v1"}),
            "reconcile.path",
            "starting with one /",
        ),
        (
            json!({"path": "/v1/events?q=a b"}),
            "reconcile.path",
            "percent-encoded",
        ),
        (
            json!({"path": "/v1/events#x"}),
            "reconcile.path",
            "percent-encoded",
        ),
        (
            json!({"path": "/v1/events?after={cursor}"}),
            "reconcile.path",
            "only placeholder",
        ),
        (
            json!({"path": "/v1/events?since={since"}),
            "reconcile.path",
            "only placeholder",
        ),
        (json!({"items": null}), "reconcile.items", "required"),
        (
            json!({"items": "data"}),
            "reconcile.items",
            "not a JSON Pointer",
        ),
        (json!({"items": "/data/"}), "reconcile.items", "empty step"),
        (json!({"id": null}), "reconcile.id", "required"),
        (json!({"id": "/a~2"}), "reconcile.id", "~0"),
        (
            json!({"type": "{/type}"}),
            "reconcile.type",
            "not a JSON Pointer",
        ),
        (
            json!({"occurred_at": "created"}),
            "reconcile.occurred_at",
            "not a JSON Pointer",
        ),
        (json!({"cursor": "/"}), "reconcile.cursor", "empty step"),
        (json!({"cursor": 1}), "reconcile.cursor", "must be a string"),
        (
            json!({"resource_kind": "/object/type"}),
            "reconcile.resource_id",
            "required with resource_kind",
        ),
        (
            json!({"resource_id": "/object/id"}),
            "reconcile.resource_kind",
            "required with resource_id",
        ),
        (
            json!({"version": "/v"}),
            "reconcile.version",
            "resource_kind and resource_id",
        ),
        (
            json!({"cursor_param": "page"}),
            "reconcile.cursor_param",
            "only with cursor",
        ),
        (
            json!({"cursor": "/next", "cursor_param": "a&b"}),
            "reconcile.cursor_param",
            "not a query parameter name",
        ),
        (
            json!({"cursor": "/next", "cursor_param": ""}),
            "reconcile.cursor_param",
            "not a query parameter name",
        ),
        (
            json!({"cursor": "/next", "cursor_param": "page[after]"}),
            "reconcile.cursor_param",
            "%XX",
        ),
        (
            json!({"since": "/created"}),
            "reconcile.since",
            "unknown key",
        ),
    ];
    for (patch, key, says) in cases {
        refused(reconciling(patch.clone()), key, says);
    }
    refused(
        base(json!({"reconcile": "https://api.example.com"})),
        "reconcile",
        "must be a table",
    );
    // A push's id must be the provider's, or no listed event would ever match one.
    let mut no_event_id = reconciling(json!({}));
    no_event_id["event"]
        .as_object_mut()
        .expect("event table")
        .remove("id");
    refused(no_event_id, "event.id", "required with reconcile");
    // A listed item has no headers, and its id is read as it is: a push's id from a
    // header, a filter or text around the field would never match a listed one.
    for id in [
        "{header:X-Delivery}",
        "{/id|before:_}",
        "evt-{/id}",
        "{/type}:{/id}",
    ] {
        let mut config = reconciling(json!({}));
        config["event"]["id"] = json!(id);
        refused(
            config,
            "event.id",
            "a push's id must be one field of the body",
        );
    }
    let mut first = reconciling(json!({}));
    first["event"]["id"] = json!(["{header:X-Delivery}", "{/id}"]);
    refused(
        first,
        "event.id",
        "a push's id must be one field of the body",
    );
    facts(&reconciling(json!({}))).expect("{/id} matches a listed id");
}

#[test]
fn a_secret_prefix_hash_needs_the_json_check() {
    // SHA-256(secret || body) can be extended by anyone who saw one request; the
    // extension begins with 0x80, which only the JSON check refuses.
    let prefix = |body: &str| {
        base(
            json!({"algorithm": "sha256-secret-prefix", "secret": {"format": "raw"}, "body": body}),
        )
    };
    refused(prefix("any"), "body", "can be extended");
    facts(&prefix("json")).expect("with the JSON check");
}
