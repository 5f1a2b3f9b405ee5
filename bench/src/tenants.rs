//! `--tenant-plugins N`: a restart with N uploaded tenant plugins, each pinned by an
//! endpoint. The first server receives the uploads (each compiled once, its code
//! cached on disk by digest); the second is timed from spawn until every endpoint
//! answers a signed request with 200 (each plugin's code loads on its first request,
//! mapped from the disk cache), with `--resident-plugin-mib` as its budget for
//! uploaded plugins' code. Then every endpoint is asked once more, and the server's
//! memory and its load and eviction counts are printed.

use crate::{load, usage};
use anyhow::{Context as _, bail};
use base64::Engine as _;
use hmac::{Hmac, Mac};
use hookhost::config;
use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

/// The target: serving again in under this after a restart.
const TARGET: Duration = Duration::from_secs(2);
const OPERATOR: &str = "bench-operator-token";
const ADMIN_TOKEN: &str = "bench-admin-token";
const SECRET: &str = "whsec_bench_tenant";
/// The signed timestamp of the upload vectors.
const VECTOR_NOW: i64 = 1_700_000_000;

pub async fn restart(binary: &Path, dir: &Path, n: usize, resident: usize) -> anyhow::Result<()> {
    let stripe = hookhost::plugins::builtin_component("stripe").context("no stripe built-in")?;
    let cache = dir.join("compile-cache");
    let key = base64::engine::general_purpose::STANDARD.encode([7u8; 32]);
    let config = move |resident: usize| -> String {
        format!(
            "listen = \"{any}\"\nstore = \"hookhost.db\"\n\
             admin_listen = \"{any}\"\nadmin_token = \"{ADMIN_TOKEN}\"\n\
             [tenancy]\noperator_token = \"{OPERATOR}\"\nmaster_key = \"{key}\"\n\
             requests_per_second = 1000000\nmax_endpoints = {limit}\nmax_plugins = {limit}\n\
             resident_plugin_bytes = {resident}\n",
            any = load::LOOPBACK_ANY_PORT,
            limit = n + 1
        )
    };
    let first = load::Server::start_config(
        binary,
        dir,
        Some(&cache),
        &config(config::DEFAULT_RESIDENT_PLUGIN_BYTES),
    )
    .await?;
    let admin = first
        .admin
        .context("the first server logged no admin address")?;
    call(
        admin,
        "POST",
        "/v1/tenants",
        OPERATOR,
        json!({"id": "bench", "name": "Bench"}),
    )
    .await?;
    let (_, issued) = call(
        admin,
        "POST",
        "/v1/tenants/bench/tokens",
        OPERATOR,
        Value::Null,
    )
    .await?;
    let token = issued["token"]
        .as_str()
        .context("no token issued")?
        .to_string();
    let uploading = Instant::now();
    for i in 0..n {
        let wasm = distinct(stripe, i);
        let upload = json!({
            "wasm_base64": base64::engine::general_purpose::STANDARD.encode(&wasm),
            "vectors": [vector()],
        });
        let (status, uploaded) = call(admin, "POST", "/v1/plugins", &token, upload).await?;
        if status != 201 {
            bail!("upload {i}: {status} {uploaded}");
        }
        let endpoint =
            json!({"name": format!("e{i}"), "plugin": uploaded["digest"], "secret": SECRET});
        let (status, created) = call(admin, "POST", "/v1/endpoints", &token, endpoint).await?;
        if status != 201 {
            bail!("endpoint {i}: {status} {created}");
        }
        if (i + 1) % 50 == 0 {
            eprintln!(
                "  {} plugins uploaded and pinned ({:.1} s)",
                i + 1,
                uploading.elapsed().as_secs_f64()
            );
        }
    }
    let uploaded_in = uploading.elapsed();
    drop(first); // killed here

    let started = Instant::now();
    let second = load::Server::start_config(binary, dir, Some(&cache), &config(resident)).await?;
    let healthy = started.elapsed();
    let mut waiting: Vec<usize> = (0..n).collect();
    let mut round = 0u64;
    while !waiting.is_empty() {
        round += 1;
        let mut still = Vec::new();
        for &i in &waiting {
            if signed_post(
                second.addr,
                &format!("bench.e{i}"),
                &format!("evt_r{round}_{i}"),
            )
            .await?
                != 200
            {
                still.push(i);
            }
        }
        waiting = still;
        if started.elapsed() > Duration::from_secs(120) {
            bail!(
                "{} endpoints still not serving after 120 s; the log ends:\n{}",
                waiting.len(),
                second.log_tail()
            );
        }
        if !waiting.is_empty() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let serving = started.elapsed();
    let rss_serving = usage::rss_bytes(second.pid())?;
    // Once more, every endpoint: within the budget, nothing loads again.
    let again = Instant::now();
    for i in 0..n {
        let status = signed_post(
            second.addr,
            &format!("bench.e{i}"),
            &format!("evt_again_{i}"),
        )
        .await?;
        if status != 200 {
            bail!("bench.e{i} answered {status} on the second round");
        }
    }
    let again = again.elapsed();
    let admin = second
        .admin
        .context("the second server logged no admin address")?;
    let metrics = scrape(admin).await?;
    println!(
        "tenant plugins: {n} uploaded and pinned in {:.1} s (each compiled once); restart: healthy in {} ms, all {n} endpoints serving in {} ms (target < {} ms) {}",
        uploaded_in.as_secs_f64(),
        healthy.as_millis(),
        serving.as_millis(),
        TARGET.as_millis(),
        if serving < TARGET { "PASS" } else { "FAIL" }
    );
    println!(
        "  budget {}: RSS {} once all served; a second round of {n} requests took {} ms; \
         uploaded plugins' code: {} loads, {} evictions, {} resident ({})",
        usage::mib(resident as u64),
        usage::mib(rss_serving),
        again.as_millis(),
        sample(&metrics, "hookhost_uploaded_plugin_loads_total"),
        sample(&metrics, "hookhost_uploaded_plugin_evictions_total"),
        sample(&metrics, "hookhost_uploaded_plugins_resident"),
        usage::mib(
            sample(&metrics, "hookhost_uploaded_plugin_resident_bytes")
                .parse()
                .unwrap_or(0)
        ),
    );
    Ok(())
}

/// The admin listener's `/metrics` text.
async fn scrape(admin: SocketAddr) -> anyhow::Result<String> {
    let headers = [("authorization", format!("Bearer {ADMIN_TOKEN}"))];
    let (status, body) = request(admin, "GET", "/metrics", &headers, Bytes::new()).await?;
    if status != 200 {
        bail!("/metrics answered {status}");
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// One sample's value as exposed ("?" when it is missing).
fn sample<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .unwrap_or("?")
}

/// The component with a custom section naming `i`: the same code, another digest.
fn distinct(component: &[u8], i: usize) -> Vec<u8> {
    let name = b"hookhost-bench";
    let payload = u32::try_from(i).unwrap_or(u32::MAX).to_le_bytes();
    let size = 1 + name.len() + payload.len();
    let mut wasm = component.to_vec();
    // Custom section: id 0, size, name (length-prefixed), payload; every length < 128.
    wasm.extend([0, size as u8, name.len() as u8]);
    wasm.extend(name);
    wasm.extend(payload);
    wasm
}

fn sign(t: i64, body: &str) -> anyhow::Result<String> {
    let mut mac = <Hmac<sha2::Sha256> as Mac>::new_from_slice(SECRET.as_bytes())?;
    mac.update(format!("{t}.{body}").as_bytes());
    Ok(format!(
        "t={t},v1={}",
        hex::encode(mac.finalize().into_bytes())
    ))
}

fn event_body(id: &str, t: i64) -> String {
    json!({"id": id, "object": "event", "type": "invoice.paid", "created": t,
           "data": {"object": {"id": "in_bench", "object": "invoice"}}})
    .to_string()
}

fn vector() -> Value {
    let body = event_body("evt_vector", VECTOR_NOW);
    json!({
        "name": "stripe: valid v1 signature",
        "plugin": "stripe",
        "source": "computed",
        "request": {
            "method": "POST",
            "url": "https://hooks.example.com/webhooks/bench",
            "headers": [["Stripe-Signature", sign(VECTOR_NOW, &body).unwrap_or_default()]],
            "body": body
        },
        "secrets": [SECRET],
        "now": VECTOR_NOW,
        "tolerance_seconds": 300,
        "expect": {"outcome": "accept", "secret_index": 0, "event": {"id": "evt_vector", "type": "invoice.paid"}}
    })
}

async fn signed_post(addr: SocketAddr, endpoint: &str, id: &str) -> anyhow::Result<u16> {
    let t = crate::unix_now();
    let body = event_body(id, t);
    let headers = [
        ("stripe-signature", sign(t, &body)?),
        ("content-type", "application/json".into()),
    ];
    let (status, _) = request(
        addr,
        "POST",
        &format!("/webhooks/{endpoint}"),
        &headers,
        body.into(),
    )
    .await?;
    Ok(status)
}

async fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: &str,
    body: Value,
) -> anyhow::Result<(u16, Value)> {
    let headers = [
        ("authorization", format!("Bearer {token}")),
        ("content-type", "application/json".to_string()),
    ];
    let body = if body.is_null() {
        Bytes::new()
    } else {
        body.to_string().into()
    };
    let (status, answer) = request(addr, method, path, &headers, body).await?;
    Ok((
        status,
        serde_json::from_slice(&answer).unwrap_or(Value::Null),
    ))
}

async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: Bytes,
) -> anyhow::Result<(u16, Bytes)> {
    let stream = tokio::net::TcpStream::connect(addr).await?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let mut builder = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string());
    for (name, value) in headers {
        builder = builder.header(*name, value);
    }
    let response = sender.send_request(builder.body(Full::new(body))?).await?;
    let status = response.status().as_u16();
    Ok((status, response.into_body().collect().await?.to_bytes()))
}
