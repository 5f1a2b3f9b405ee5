//! The contract is versioned: a plugin built against 0.1.0 keeps loading and working
//! beside 0.2.0 plugins, and only 0.2.0 plugins answer handshakes. A 0.2.0 plugin
//! without the optional `session` interface works as one with it.

use crate::support::*;
use hookhost::plugins::{Origin, Plugin, PluginLimits};

/// A temp dir whose `plugins/` holds the 0.1.0 guest as a drop-in.
fn with_legacy_plugin() -> tempfile::TempDir {
    with_guest("contract_v0_1", "contract-v0-1.wasm")
}

#[test]
fn a_plugin_built_against_0_1_loads_and_says_so() {
    let bytes = std::fs::read(guest("contract_v0_1")).expect("guest");
    let plugin = Plugin::load(&bytes, Origin::Builtin, PluginLimits::default()).expect("loads");
    assert_eq!(plugin.contract(), "0.1.0");
    assert_eq!(plugin.info.name, "contract-v0-1");
    // 0.1.0 has no configuration check: any configuration is taken as is.
    let facts = plugin
        .check_config(r#"{"anything":1}"#)
        .expect("no plugin failure")
        .expect("accepted");
    assert!(facts.key_formats.is_empty());
    let stripe = std::fs::read(guest("stripe")).expect("guest");
    let current = Plugin::load(&stripe, Origin::Builtin, PluginLimits::default()).expect("loads");
    assert_eq!(current.contract(), "0.2.0");
}

/// A 0.2.0 plugin that exports only `plugin` (built before the optional `session`
/// interface) is given the head and body again for `describe-event`, and the ingest
/// path accepts its events as any other's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0_2_plugin_without_session_is_given_the_request_again() {
    let bytes = std::fs::read(guest("contract_v0_2")).expect("guest");
    let plugin = Plugin::load(&bytes, Origin::Builtin, PluginLimits::default()).expect("loads");
    assert_eq!(plugin.contract(), "0.2.0");
    let body = br#"{"plain":true}"#;
    let headers: Vec<(String, Vec<u8>)> = guest_headers("secret", "evt-plain-1", body)
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value.into_bytes()))
        .collect();
    let source = hookhost::verify::MessageSource {
        method: "POST",
        url: "http://127.0.0.1/webhooks/plain",
        headers: &headers,
        body,
    };
    let mut session = plugin.session("{}", &source).expect("instance");
    assert!(matches!(session.plan_verification(), Ok(Ok(_))));
    let event = session
        .describe_event()
        .expect("no failure")
        .expect("described");
    assert_eq!(event.id.as_deref(), Some("evt-plain-1"));
    assert_eq!(event.resource_id.as_deref(), Some(r#"{"plain":true}"#));
    drop(session);

    let config = stripe_config(
        "plugins_dir = \"plugins\"\n[[endpoint]]\nid = \"plain\"\nplugin = \"contract-v0-2\"\nsecrets = [\"secret\"]\n",
    );
    let server = Server::start_in(with_guest("contract_v0_2", "contract-v0-2.wasm"), &config)
        .await
        .expect("starts");
    let (status, answer) = server
        .post(
            "plain",
            &guest_headers("secret", "evt-plain-2", body),
            &body[..],
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["event_id"], "evt-plain-2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0_1_plugin_verifies_and_stores_events_beside_0_2_plugins() {
    let config = stripe_config(
        "plugins_dir = \"plugins\"\n[[endpoint]]\nid = \"legacy\"\nplugin = \"contract-v0-1\"\nsecrets = [\"new-secret\", \"old-secret\"]\n",
    );
    // `stripe_config` puts `top` first, so the legacy endpoint comes before Stripe's.
    let server = Server::start_in(with_legacy_plugin(), &config)
        .await
        .expect("starts");
    let body = br#"{"legacy":true}"#;
    let mut headers = guest_headers("old-secret", "evt-legacy-1", body);
    headers.push(("x-test-type", "legacy.created".into()));
    let (status, answer) = server.post("legacy", &headers, &body[..]).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["status"], "accepted");
    assert_eq!(answer["event_id"], "evt-legacy-1");

    let forged = guest_headers("not-a-secret", "evt-legacy-2", body);
    let (status, answer) = server.post("legacy", &forged, &body[..]).await;
    assert_eq!(
        (status, answer["error"].as_str()),
        (400, Some("invalid_signature"))
    );

    // A 0.1.0 plugin has no handshake: GET is 405, as for any plugin without one.
    let (status, _, _) = request_raw(
        server.addr,
        "GET",
        "/webhooks/legacy",
        &[],
        Default::default(),
    )
    .await;
    assert_eq!(status, 405);

    // The 0.2.0 built-in beside it works as before.
    let t = now();
    let event = stripe_event("evt_beside", "customer.updated", "cus_1", t);
    let (status, answer) = server.post_stripe(&[STRIPE_SECRET], t, &event).await;
    assert_eq!((status, answer["status"].as_str()), (200, Some("accepted")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_configuration_the_plugin_refuses_stops_the_start_naming_the_key() {
    let config = "[[endpoint]]\nid = \"ledger\"\nplugin = \"generic\"\nsecrets = [\"k\"]\n\
                  [endpoint.config]\nalgorithm = \"hmac-sha256\"\nsigned = \"{body}\"\n\
                  [endpoint.config.signature]\nheader = \"x-sig\"\nencoding = \"b64\"\n\
                  [endpoint.config.event]\ntype = \"{/type}\"\n";
    let error = match Server::start_in(tempfile::tempdir().expect("dir"), config).await {
        Ok(_) => panic!("a bad mapping was accepted"),
        Err(e) => format!("{e:#}"),
    };
    assert!(
        error.contains("endpoint \"ledger\": config.signature.encoding:"),
        "{error}"
    );
    assert!(error.ends_with("(plugin generic) (line 10)"), "{error}");
}

/// A key the plugin does not read is a mistake, not a setting: a plugin that reads no
/// configuration (stripe) refuses any key, and one that reads some (square) refuses
/// a misspelling of it, each naming the endpoint and the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configuration_key_the_plugin_does_not_read_stops_the_start() {
    for (config, says) in [
        (
            "[[endpoint]]\nid = \"pay\"\nplugin = \"stripe\"\nsecrets = [\"whsec_k\"]\n\
             [endpoint.config]\ntolerence = 600\n",
            "endpoint \"pay\": config.tolerence: unknown key: this plugin takes no configuration \
             (plugin stripe) (line 6)",
        ),
        (
            "[[endpoint]]\nid = \"sq\"\nplugin = \"square\"\nsecrets = [\"k\"]\n\
             [endpoint.config]\nnotification_uri = \"https://a.example/sq\"\n",
            "endpoint \"sq\": config.notification_uri: unknown key; expected one of \
             notification_url (plugin square) (line 6)",
        ),
    ] {
        let error = match Server::start_in(tempfile::tempdir().expect("dir"), config).await {
            Ok(_) => panic!("a stray key was accepted: {config}"),
            Err(e) => format!("{e:#}"),
        };
        assert!(error.contains(says), "{error}");
    }
}
