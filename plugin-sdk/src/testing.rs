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

/// A head that lets every built-in read a JSON body, as with [`wide_bodies`]: the
/// content type, and the event name GitHub's scheme reads from a header (every other
/// built-in finds what it needs in the body).
pub const WIDE_BODY_HEADERS: [(&str, &str); 2] = [
    ("content-type", "application/json"),
    ("x-github-event", "push"),
];

/// JSON bodies of about `size` bytes (each within 512 bytes under it) in the widest
/// shapes JSON has, named: what a plugin should read within its memory and time
/// limits at the receiver's body cap. Each is an event object (with the fields the
/// built-ins look for) whose `items` holds many small values, or a batch: an array
/// of many events, as SendGrid and HubSpot post.
pub fn wide_bodies(size: usize) -> Vec<(&'static str, String)> {
    // `head`, then items while they fit, then `tail`.
    let wide = |head: &str, item: &dyn Fn(usize) -> String, tail: &str| {
        let mut body = head.to_owned();
        for i in 0.. {
            let next = item(i);
            if body.len() + 1 + next.len() + tail.len() > size {
                break;
            }
            if i > 0 {
                body.push(',');
            }
            body.push_str(&next);
        }
        body.push_str(tail);
        body
    };
    let object = r#"{"id":"evt_1","type":"customer.updated","event":"push","created":1,"data":{"object":{"object":"customer","id":"cus_1"}},"items":"#;
    vec![
        (
            "small objects",
            wide(
                &format!("{object}["),
                &|_| r#"{"a":1,"b":"x"}"#.to_owned(),
                "]}",
            ),
        ),
        (
            "escaped strings",
            wide(&format!("{object}["), &|_| r#""a\"b""#.to_owned(), "]}"),
        ),
        (
            "numbers",
            wide(&format!("{object}["), &|i| (i % 10).to_string(), "]}"),
        ),
        (
            "members",
            wide(&format!("{object}{{"), &|i| format!(r#""k{i}":0"#), "}}"),
        ),
        (
            "a batch of small events",
            wide(
                "[",
                &|i| format!(r#"{{"event":"open","n":{}}}"#, i % 10),
                "]",
            ),
        ),
        (
            "a batch of events",
            wide(
                "[",
                &|i| {
                    format!(
                        r#"{{"event":"open","sg_event_id":"e{i}","sg_message_id":"m","timestamp":{i},"portalId":1,"subscriptionId":2,"eventId":{i},"subscriptionType":"contact.creation","objectId":3,"occurredAt":{i}}}"#
                    )
                },
                "]",
            ),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wide_bodies_are_json_just_under_the_size() {
        let size = 64 * 1024;
        let bodies = wide_bodies(size);
        assert_eq!(bodies.len(), 6);
        for (shape, body) in bodies {
            assert!(
                body.len() <= size && size - body.len() < 512,
                "{shape}: {}",
                body.len()
            );
            assert!(crate::Json::parse(body.as_bytes()).is_ok(), "{shape}");
        }
    }
}
