//! `hookhost plugin test`: judge signature test vectors offline.
//!
//! Each vector runs through [`crate::verify::judge`], the same code the live ingest
//! path runs for steps 3–6, with the clock fixed at the vector's `now`. The format is
//! documented in `docs/vectors.md`.

use crate::config::EndpointConfig;
use crate::endpoints::Endpoint;
use crate::http::IngestError;
use crate::plugins::{Catalog, Plugin, PluginLimits};
use crate::verify::{self, Decision, MessageSource, Secret};
use base64::Engine as _;
use hookhost_plugin_sdk::{Disposition, Event};
use serde::Deserialize;
use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::collections::{HashMap, HashSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Vector {
    name: String,
    plugin: String,
    source: String,
    request: VectorRequest,
    secrets: Vec<String>,
    now: i64,
    tolerance_seconds: Option<u32>,
    #[serde(default)]
    plugin_config: Option<Value>,
    /// The endpoint's `handshake_token` (Meta's `hub.verify_token`), for GET handshakes.
    #[serde(default)]
    handshake_token: Option<String>,
    expect: Expect,
    /// Where the vector is, for errors found after parsing: `FILE:LINE: element I ("NAME")`.
    #[serde(skip)]
    at: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VectorRequest {
    method: String,
    url: String,
    headers: Vec<(String, String)>,
    body: Option<String>,
    body_base64: Option<String>,
    /// The body's bytes, from `body` or `body_base64`: decoded once, by [`check_shape`].
    #[serde(skip)]
    raw: Vec<u8>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Expect {
    outcome: String,
    secret_index: Option<usize>,
    event: Option<serde_json::Map<String, Value>>,
    status: Option<u16>,
    error: Option<String>,
    response: Option<ExpectResponse>,
}

/// `expect.response`: a handshake's answer, its status and its exact body text or the
/// JSON it parses to.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpectResponse {
    status: u16,
    body: Option<String>,
    json: Option<Value>,
}

/// What the receiver decided for one vector, and whether that is what was expected.
#[derive(Debug, Clone, PartialEq)]
pub struct Judged {
    pub name: String,
    pub pass: bool,
    /// Why it failed (empty when it passed).
    pub differences: Vec<String>,
    pub outcome: &'static str,
    pub status: u16,
    pub error: Option<String>,
    pub secret_index: Option<usize>,
    pub event: Option<Value>,
    /// A handshake's answer: status, content type, headers, body text.
    pub response: Option<Value>,
}

impl Judged {
    pub fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "pass": self.pass,
            "outcome": self.outcome,
            "status": self.status,
            "error": self.error,
            "secret_index": self.secret_index,
            "event": self.event,
            "response": self.response,
            "differences": self.differences,
        })
    }
}

/// One element of a vector file: its JSON text, and the line of the file it starts on
/// (none for an upload's vectors, which come in a request body).
struct Element<'a> {
    text: &'a str,
    line: Option<usize>,
}

/// Vectors from a file's elements; a malformed one is an error naming `shown`, the
/// line, the element and the field.
fn parse(elements: &[Element<'_>], shown: &str) -> Result<Vec<Vector>, String> {
    let mut vectors = Vec::new();
    let mut names = HashSet::new();
    for (i, element) in elements.iter().enumerate() {
        let name = serde_json::from_str::<Value>(element.text)
            .ok()
            .and_then(|v| v.get("name")?.as_str().map(str::to_string))
            .unwrap_or_else(|| "?".into());
        // `line` is 1-based within the element; the file's line is reckoned from it.
        let at = |line: usize| match element.line {
            Some(first) => format!("{shown}:{}: element {i} ({name:?})", first + line - 1),
            None => format!("{shown}: element {i} ({name:?})"),
        };
        // The error names the field: `expect.status: invalid type: …`. A key given
        // twice is refused first: its author reads one value, serde keeps the other.
        let located = |e: serde_path_to_error::Error<serde_json::Error>| {
            let field = match e.path().to_string() {
                dot if dot == "." => String::new(),
                path => format!("{path}: "),
            };
            let error = e.into_inner();
            let text = error.to_string();
            let position = format!(" at line {} column {}", error.line(), error.column());
            let message = text.strip_suffix(&position).unwrap_or(&text);
            format!("{}: {field}{message}", at(error.line().max(1)))
        };
        let from_text = || serde_json::Deserializer::from_str(element.text);
        serde_path_to_error::deserialize::<_, Unrepeated>(&mut from_text()).map_err(located)?;
        let mut vector: Vector =
            serde_path_to_error::deserialize(&mut from_text()).map_err(located)?;
        vector.at = at(1);
        vector.request.raw = check_shape(&vector).map_err(|e| format!("{}: {e}", vector.at))?;
        if !names.insert(vector.name.clone()) {
            return Err(format!("{}: name: not unique in the file", vector.at));
        }
        vectors.push(vector);
    }
    Ok(vectors)
}

/// Any JSON value, refused when one of its objects gives a key twice.
struct Unrepeated;

impl<'de> Deserialize<'de> for Unrepeated {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(Unrepeated)
    }
}

impl<'de> Visitor<'de> for Unrepeated {
    type Value = Unrepeated;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E>(self, _: bool) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_i64<E>(self, _: i64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_u64<E>(self, _: u64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_f64<E>(self, _: f64) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_str<E>(self, _: &str) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_unit<E>(self) -> Result<Self, E> {
        Ok(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self, A::Error> {
        while seq.next_element::<Unrepeated>()?.is_some() {}
        Ok(self)
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self, A::Error> {
        let mut keys = HashSet::new();
        while let Some(key) = map.next_key::<String>()? {
            if !keys.insert(key.clone()) {
                return Err(de::Error::custom(format!("key {key:?} is given twice")));
            }
            map.next_value::<Unrepeated>()?;
        }
        Ok(self)
    }
}

/// Most vectors an upload may carry.
pub const MAX_UPLOAD_VECTORS: usize = 100;
/// How long an upload's vectors may take to judge, in all. Judging holds a plugin
/// thread, which every endpoint's requests share.
pub const UPLOAD_JUDGING: Duration = Duration::from_secs(10);

/// Judge vectors (the elements of a vector file) with one given plugin, whatever
/// plugin each names: how an uploaded plugin proves itself before it is accepted.
/// Judging stops at the first vector that fails (it alone refuses the upload), and
/// an upload's vectors are bounded in number and in time, so a hostile upload holds
/// a plugin thread for seconds at most. A malformed vector, or one describing an
/// endpoint the plugin refuses, is an error.
pub fn judge_with(plugin: &Arc<Plugin>, vectors: &UploadVectors) -> Result<Vec<Judged>, String> {
    let elements: Vec<Element<'_>> = vectors
        .0
        .iter()
        .map(|raw| Element {
            text: raw.get(),
            line: None,
        })
        .collect();
    let vectors = parse(&elements, "vectors")?;
    let started = Instant::now();
    let mut judged = Vec::with_capacity(vectors.len());
    for vector in &vectors {
        if started.elapsed() > UPLOAD_JUDGING {
            return Err(format!(
                "vectors: judging took more than {} s; send fewer",
                UPLOAD_JUDGING.as_secs()
            ));
        }
        let one =
            endpoint(plugin, vector)?.map_or_else(|failed| failed, |e| judge_vector(&e, vector));
        let failed = !one.pass;
        judged.push(one);
        if failed {
            break;
        }
    }
    Ok(judged)
}

/// An upload's vectors, as given: refused past [`MAX_UPLOAD_VECTORS`] as the request
/// body is parsed (it is read whole first, within the route's limit), so no more of
/// them than that are ever held parsed, and nothing is compiled for an upload with
/// more. Each is parsed as it is judged.
pub struct UploadVectors(Vec<Box<RawValue>>);

impl UploadVectors {
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl<'de> Deserialize<'de> for UploadVectors {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Bounded;
        impl<'de> Visitor<'de> for Bounded {
            type Value = UploadVectors;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                write!(f, "an array of at most {MAX_UPLOAD_VECTORS} vectors")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<UploadVectors, A::Error> {
                let mut vectors = Vec::new();
                while let Some(vector) = seq.next_element::<Box<RawValue>>()? {
                    if vectors.len() == MAX_UPLOAD_VECTORS {
                        return Err(de::Error::custom(format!(
                            "more than {MAX_UPLOAD_VECTORS} given"
                        )));
                    }
                    vectors.push(vector);
                }
                Ok(UploadVectors(vectors))
            }
        }
        deserializer.deserialize_seq(Bounded)
    }
}

/// Run every vector of every file; print one line per vector and the totals.
pub fn main(files: &[PathBuf], as_json: bool) -> ExitCode {
    let mut passed = 0usize;
    let mut failed = 0usize;
    let mut runner = Runner::default();
    let mut malformed = false;
    // Written, not printed: a reader gone (`| head`) must not end the run in a panic;
    // the exit code still says whether every vector passed.
    let mut out = std::io::stdout().lock();
    for file in files {
        match runner.run_file(file) {
            Ok(results) => {
                for judged in results {
                    let _ = if as_json {
                        writeln!(out, "{}", judged.to_json())
                    } else if judged.pass {
                        writeln!(out, "ok   {}", judged.name)
                    } else {
                        let differences = judged.differences.join("; ");
                        writeln!(out, "FAIL {}: {differences}", judged.name)
                    };
                    if judged.pass {
                        passed += 1;
                    } else {
                        failed += 1;
                    }
                }
            }
            Err(message) => {
                eprintln!("hookhost: {message}");
                malformed = true;
            }
        }
    }
    if !as_json {
        let _ = writeln!(out, "{passed} passed, {failed} failed");
    }
    if failed > 0 || malformed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Loads plugins once per name or file and judges vectors.
#[derive(Default)]
pub struct Runner {
    builtins: Option<Catalog>,
    files: HashMap<PathBuf, Arc<Plugin>>,
}

impl Runner {
    /// Judge every vector in a file. A malformed file is an error naming the file,
    /// the element and the field.
    pub fn run_file(&mut self, path: &Path) -> Result<Vec<Judged>, String> {
        let shown = path.display();
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("{shown}: cannot read: {e}"))?;
        let elements: Vec<&RawValue> = serde_json::from_str(&text)
            .map_err(|e| format!("{shown}: not a JSON array of vectors: {e}"))?;
        // An element's line: the lines before where its text starts in the file's.
        let elements: Vec<Element<'_>> = elements
            .iter()
            .map(|raw| {
                let offset = raw.get().as_ptr().addr() - text.as_ptr().addr();
                let line = text
                    .get(..offset)
                    .map_or(0, |before| before.matches('\n').count());
                Element {
                    text: raw.get(),
                    line: Some(line + 1),
                }
            })
            .collect();
        let vectors = parse(&elements, &shown.to_string())?;
        if vectors.is_empty() {
            // Passing with nothing checked would pass a check built on it.
            return Err(format!("{shown}: no vectors: the array is empty"));
        }
        let base = path.parent().unwrap_or(Path::new("."));
        let mut results = Vec::new();
        for vector in &vectors {
            let plugin = self
                .plugin(base, &vector.plugin)
                .map_err(|e| format!("{}: plugin: {e}", vector.at))?;
            results.push(
                endpoint(&plugin, vector)?
                    .map_or_else(|failed| failed, |e| judge_vector(&e, vector)),
            );
        }
        Ok(results)
    }

    fn plugin(&mut self, base: &Path, name: &str) -> Result<Arc<Plugin>, String> {
        if name.ends_with(".wasm") {
            let path = base.join(name);
            if let Some(p) = self.files.get(&path) {
                return Ok(p.clone());
            }
            let plugin = Arc::new(
                Plugin::load_file(&path, PluginLimits::default()).map_err(|e| e.to_string())?,
            );
            self.files.insert(path, plugin.clone());
            return Ok(plugin);
        }
        if self.builtins.is_none() {
            self.builtins =
                Some(Catalog::load(None, PluginLimits::default()).map_err(|e| e.to_string())?);
        }
        let catalog = self.builtins.as_ref().ok_or("no catalog")?;
        catalog.get(name).ok_or_else(|| {
            format!(
                "{name:?} is not a built-in plugin ({})",
                catalog.names().join(", ")
            )
        })
    }
}

/// What serde cannot check of a vector; the request's body bytes when it is sound.
fn check_shape(vector: &Vector) -> Result<Vec<u8>, String> {
    if vector.source.trim().is_empty() {
        return Err("source: must say where the vector comes from".into());
    }
    if vector.request.body.is_some() == vector.request.body_base64.is_some() {
        return Err("request: exactly one of body and body_base64".into());
    }
    // Without a secret nothing verifies: a rejection would pass whatever the plugin
    // planned, and an endpoint needs one (as the configuration says).
    if vector.secrets.is_empty() {
        return Err("secrets: at least one is required".into());
    }
    // What an endpoint cannot be configured with, or the receiver never lets through,
    // would judge a request no live endpoint sees.
    if vector
        .handshake_token
        .as_ref()
        .is_some_and(String::is_empty)
    {
        return Err("handshake_token: empty".into());
    }
    if !matches!(vector.request.method.as_str(), "POST" | "GET") {
        return Err(format!(
            "request.method: {:?}: the receiver answers only POST and GET \
             (anything else is 405 method_not_allowed, before the plugin sees it)",
            vector.request.method
        ));
    }
    let raw = match (&vector.request.body, &vector.request.body_base64) {
        (Some(text), _) => text.as_bytes().to_vec(),
        (None, Some(b64)) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| format!("request.body_base64: {e}"))?,
        (None, None) => Vec::new(), // refused above
    };
    let expect = &vector.expect;
    if let Some(response) = &expect.response
        && response.body.is_some() == response.json.is_some()
    {
        return Err("expect.response: exactly one of body and json".into());
    }
    // What only one outcome has: a check that could never be made is refused, not
    // passed over.
    let only = |field: &str, outcome: &str| Err(format!("expect.{field}: only for \"{outcome}\""));
    // A handshake answer is not stored: it has no event or matching secret to compare.
    let answered = |field: &str| {
        Err(format!(
            "expect.{field}: not with expect.response (a handshake answer is not stored as an event)"
        ))
    };
    match expect.outcome.as_str() {
        "accept" if expect.error.is_some() => only("error", "reject"),
        "accept" if expect.response.is_some() && expect.event.is_some() => answered("event"),
        "accept" if expect.response.is_some() && expect.secret_index.is_some() => {
            answered("secret_index")
        }
        "accept" => Ok(raw),
        "reject" if expect.secret_index.is_some() => only("secret_index", "accept"),
        "reject" if expect.event.is_some() => only("event", "accept"),
        "reject" if expect.response.is_some() => only("response", "accept"),
        "reject" => Ok(raw),
        other => Err(format!(
            "expect.outcome: {other:?} is neither \"accept\" nor \"reject\""
        )),
    }
}

/// The endpoint a vector describes: its secrets, window, plugin configuration and
/// handshake token. One the plugin refuses is an error of the file, naming the
/// vector's field; a plugin that fails checking it (traps, runs out of time) is the
/// vector's `failed` outcome, its judgement inside.
fn endpoint(plugin: &Arc<Plugin>, vector: &Vector) -> Result<Result<Endpoint, Judged>, String> {
    let config = EndpointConfig {
        id: "vector".into(),
        plugin: plugin.info.name.clone(),
        secrets: vector.secrets.iter().map(Secret::new).collect(),
        tolerance: vector.tolerance_seconds,
        handshake_token: vector.handshake_token.as_ref().map(Secret::new),
        plugin_config: vector.plugin_config.clone().unwrap_or_else(|| json!({})),
        ..Default::default()
    };
    // The configuration is checked once, here: its refusal is the file's, its failure
    // the vector's.
    let checked = plugin.check_config(&config.plugin_config.to_string());
    let checked = match checked {
        Ok(Ok(facts)) => Ok(facts),
        Ok(Err(refused)) => Err(Endpoint::config_refused(&config, plugin, &refused)),
        Err(failure) => {
            let (status, code) = IngestError::PluginFailed.status_and_code();
            return Ok(Err(Judged {
                name: vector.name.clone(),
                pass: false,
                differences: vec![format!(
                    "plugin_config: plugin {} failed checking it: {failure}",
                    plugin.name()
                )],
                outcome: "failed",
                status: status.as_u16(),
                error: Some(code.to_string()),
                secret_index: None,
                event: None,
                response: None,
            }));
        }
    };
    checked
        .and_then(|facts| Endpoint::assemble(&config, plugin.clone(), &facts))
        .map(Ok)
        .map_err(|e| {
            // The message names the endpoint's key (`config.<key>`, `tolerance`,
            // `secrets[i]`): the vector's own names for them are shown instead.
            let e = e.strip_prefix("endpoint \"vector\": ").unwrap_or(&e);
            let e = if let Some(rest) = e.strip_prefix("config") {
                format!("plugin_config{rest}")
            } else if let Some(rest) = e.strip_prefix("tolerance:") {
                format!("tolerance_seconds:{rest}")
            } else {
                e.to_string()
            };
            format!("{}: {e}", vector.at)
        })
}

fn judge_vector(endpoint: &Endpoint, vector: &Vector) -> Judged {
    let mut judged = Judged {
        name: vector.name.clone(),
        pass: false,
        differences: Vec::new(),
        outcome: "reject",
        status: 0,
        error: None,
        secret_index: None,
        event: None,
        response: None,
    };
    let headers = verify::owned_headers(
        vector
            .request
            .headers
            .iter()
            .map(|(n, v)| (n.to_ascii_lowercase(), v)),
    );
    let source = MessageSource {
        method: &vector.request.method,
        url: &vector.request.url,
        headers: &headers,
        body: &vector.request.raw,
    };
    let expect = &vector.expect;
    let diffs = &mut judged.differences;
    match verify::decide(endpoint, &source, vector.now, &mut verify::Trail::default()) {
        Ok(Decision::Answer(answer)) => {
            judged.outcome = "accept";
            judged.status = answer.status;
            let body = String::from_utf8_lossy(&answer.body).into_owned();
            judged.response = Some(json!({
                "status": answer.status,
                "content_type": answer.content_type,
                "headers": answer.headers,
                "body": body,
            }));
            match &expect.response {
                None => diffs.push(format!("response: the endpoint answered a handshake ({body:?}) where an event was expected")),
                Some(want) => compare_response(want, answer.status, &body, diffs),
            }
        }
        Ok(Decision::Store(verified)) => {
            if expect.response.is_some() {
                diffs.push(
                    "response: expected a handshake answer, the request was stored as an event"
                        .into(),
                );
            }
            judged.outcome = "accept";
            judged.status = 200;
            judged.secret_index = Some(verified.secret_index);
            let event = event_json(&verified.event_id, &verified.event);
            if let Some(wanted) = &expect.event {
                for (field, value) in wanted {
                    if event.get(field) != Some(value) {
                        diffs.push(format!(
                            "event.{field}: expected {value}, got {}",
                            event.get(field).unwrap_or(&Value::Null)
                        ));
                    }
                }
            }
            judged.event = Some(event);
        }
        Err(error) => {
            let (status, code) = error.status_and_code();
            judged.status = status.as_u16();
            judged.error = Some(code.to_string());
            // The plugin failed (trapped, ran out of time), or the receiver could not
            // judge: not a refusal of the request, which a sender would retry. No
            // vector expects it.
            if status.is_server_error() || status == axum::http::StatusCode::TOO_MANY_REQUESTS {
                judged.outcome = "failed";
            }
            if let IngestError::Rejected(reason) = &error {
                judged.event = Some(json!({ "disposition": "reject", "reason": reason }));
            }
        }
    }
    if judged.outcome != expect.outcome {
        diffs.push(format!(
            "outcome: expected {}, got {} ({} {})",
            expect.outcome,
            judged.outcome,
            judged.status,
            judged.error.as_deref().unwrap_or("")
        ));
    }
    if let (Some(want), Some(got)) = (expect.secret_index, judged.secret_index)
        && want != got
    {
        diffs.push(format!("secret_index: expected {want}, got {got}"));
    }
    if let Some(want) = expect.status
        && want != judged.status
    {
        diffs.push(format!("status: expected {want}, got {}", judged.status));
    }
    if let Some(want) = &expect.error
        && Some(want) != judged.error.as_ref()
    {
        let got = judged.error.as_deref().unwrap_or("none");
        diffs.push(format!("error: expected {want}, got {got}"));
    }
    judged.pass = judged.differences.is_empty();
    judged
}

/// `expect.response`: `status`, and the exact `body` text or the `json` it parses to.
fn compare_response(want: &ExpectResponse, status: u16, body: &str, diffs: &mut Vec<String>) {
    if want.status != status {
        diffs.push(format!(
            "response.status: expected {}, got {status}",
            want.status
        ));
    }
    if let Some(text) = &want.body
        && text != body
    {
        diffs.push(format!("response.body: expected {text:?}, got {body:?}"));
    }
    if let Some(json) = &want.json {
        match serde_json::from_str::<Value>(body) {
            Ok(got) if &got == json => {}
            Ok(got) => diffs.push(format!("response.json: expected {json}, got {got}")),
            Err(_) => diffs.push(format!(
                "response.json: expected {json}, got non-JSON {body:?}"
            )),
        }
    }
}

/// The described event as vectors name its fields.
fn event_json(event_id: &str, event: &Event) -> Value {
    let (disposition, reason) = match &event.disposition {
        Disposition::Process => ("process", None),
        Disposition::Ignore(r) => ("ignore", Some(r)),
        Disposition::Reject(r) => ("reject", Some(r)),
        Disposition::Answer(_) => ("answer", None),
    };
    json!({
        "id": event_id,
        "type": event.event_type,
        "occurred_at": event.occurred_at,
        "resource_kind": event.resource_kind,
        "resource_id": event.resource_id,
        "version": event.resource_version,
        "deleted": event.deleted,
        "disposition": disposition,
        "reason": reason,
    })
}
