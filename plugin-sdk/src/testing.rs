//! A native test harness: build a [`Request`] and call a [`crate::Provider`] directly
//! under `cargo test`, no wasm involved.
//!
//! ```
//! use hookhost_plugin_sdk::testing::RequestBuilder;
//! let req = RequestBuilder::post("https://hooks.example.com/webhooks/main")
//!     .header("Stripe-Signature", "t=1,v1=00")
//!     .body(r#"{"id":"evt_1"}"#)
//!     .build();
//! assert_eq!(req.header_str("stripe-signature"), Some("t=1,v1=00"));
//! ```

use crate::Request;
use crate::prelude::*;

/// Builds a [`Request`] the way the host would hand it to a plugin
/// (header names lower-cased, values raw).
#[derive(Debug, Clone)]
pub struct RequestBuilder {
    request: Request,
}

impl RequestBuilder {
    pub fn new(method: &str, url: &str) -> Self {
        Self {
            request: Request {
                method: method.to_ascii_uppercase(),
                url: url.to_owned(),
                headers: Vec::new(),
                body: Vec::new(),
                config: serde_json::Value::Object(Default::default()),
            },
        }
    }

    pub fn post(url: &str) -> Self {
        Self::new("POST", url)
    }

    pub fn header(mut self, name: &str, value: impl AsRef<[u8]>) -> Self {
        self.request
            .headers
            .push((name.to_ascii_lowercase(), value.as_ref().to_vec()));
        self
    }

    pub fn body(mut self, body: impl AsRef<[u8]>) -> Self {
        self.request.body = body.as_ref().to_vec();
        self
    }

    pub fn config(mut self, config: serde_json::Value) -> Self {
        self.request.config = config;
        self
    }

    pub fn build(self) -> Request {
        self.request
    }
}
