//! JSON-RPC 2.0 messages as LSP uses them.
//!
//! Requests carry an id the caller chooses (a string, so callers that share one server without
//! talking to each other pick random ones and never collide); an answer is matched to its request
//! by that id alone. The server may send requests of its own (`workspace/configuration`,
//! `client/registerCapability`, …): whoever reads one answers it with `null`, which the
//! specification allows for each of them, so the server never waits on a client that is gone.

use crate::framing::encode;
use crate::Error;
use bytes::Bytes;
use serde_json::{json, Value};

/// The framed bytes of request `method` with `params`, id `id`.
pub fn request(id: &str, method: &str, params: Value) -> Bytes {
    encode(
        json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
            .to_string()
            .as_bytes(),
    )
}

/// The framed bytes of notification `method` with `params`.
pub fn notification(method: &str, params: Value) -> Bytes {
    encode(
        json!({"jsonrpc": "2.0", "method": method, "params": params})
            .to_string()
            .as_bytes(),
    )
}

/// The framed bytes of a `null` result for the server's own request `id`.
pub fn answer_null(id: &Value) -> Bytes {
    encode(
        json!({"jsonrpc": "2.0", "id": id, "result": null})
            .to_string()
            .as_bytes(),
    )
}

/// One message from the server.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    /// The answer to request `id`: its result, or the server's error.
    Answer {
        id: Value,
        result: Result<Value, Error>,
    },
    /// A request of the server's, to be answered ([`answer_null`]).
    Request { id: Value, method: String },
    /// A notification (diagnostics, log messages, progress).
    Notification { method: String },
}

impl Incoming {
    /// Sorts the body of one message.
    pub fn parse(body: &[u8]) -> Result<Incoming, Error> {
        let v: Value = serde_json::from_slice(body).map_err(|e| Error::Malformed(e.to_string()))?;
        let Value::Object(mut m) = v else {
            return Err(Error::Malformed("not an object".into()));
        };
        let method = m.get("method").and_then(Value::as_str).map(str::to_string);
        match (m.remove("id"), method) {
            (Some(id), Some(method)) => Ok(Incoming::Request { id, method }),
            (None, Some(method)) => Ok(Incoming::Notification { method }),
            (Some(id), None) => {
                let result = match m.remove("error") {
                    Some(e) => Err(Error::Server {
                        code: e.get("code").and_then(Value::as_i64).unwrap_or(0),
                        message: e
                            .get("message")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_string(),
                    }),
                    None => Ok(m.remove("result").unwrap_or(Value::Null)),
                };
                Ok(Incoming::Answer { id, result })
            }
            (None, None) => Err(Error::Malformed("neither a method nor an id".into())),
        }
    }

    /// Whether this is the answer to request `id`.
    pub fn answers(&self, id: &str) -> bool {
        matches!(self, Incoming::Answer { id: v, .. } if v.as_str() == Some(id))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framing::Decoder;

    fn body(framed: &Bytes) -> Value {
        let mut d = Decoder::from_start();
        d.feed(framed);
        serde_json::from_slice(&d.next_message().unwrap().unwrap()).unwrap()
    }

    #[test]
    fn requests_and_notifications_are_framed_json_rpc() {
        let r = body(&request(
            "a1",
            "initialize",
            json!({"rootUri": "file:///p"}),
        ));
        assert_eq!(r["jsonrpc"], "2.0");
        assert_eq!(r["id"], "a1");
        assert_eq!(r["params"]["rootUri"], "file:///p");
        let n = body(&notification("initialized", json!({})));
        assert!(n.get("id").is_none());
        assert_eq!(body(&answer_null(&json!(4)))["result"], Value::Null);
    }

    #[test]
    fn answers_requests_and_notifications_are_told_apart() {
        let a = Incoming::parse(br#"{"jsonrpc":"2.0","id":"x","result":[1]}"#).unwrap();
        assert!(a.answers("x") && !a.answers("y"));
        assert_eq!(
            a,
            Incoming::Answer {
                id: json!("x"),
                result: Ok(json!([1]))
            }
        );
        let e = Incoming::parse(
            br#"{"jsonrpc":"2.0","id":"x","error":{"code":-32601,"message":"nope"}}"#,
        )
        .unwrap();
        assert!(matches!(
            e,
            Incoming::Answer {
                result: Err(Error::Server { code: -32601, .. }),
                ..
            }
        ));
        let r = Incoming::parse(br#"{"jsonrpc":"2.0","id":3,"method":"workspace/configuration"}"#)
            .unwrap();
        assert_eq!(
            r,
            Incoming::Request {
                id: json!(3),
                method: "workspace/configuration".into()
            }
        );
        assert!(!r.answers("3"));
        let n = Incoming::parse(br#"{"jsonrpc":"2.0","method":"window/logMessage"}"#).unwrap();
        assert!(matches!(n, Incoming::Notification { .. }));
    }

    #[test]
    fn malformed_messages_are_errors() {
        for bad in [&b"[]"[..], b"{}", b"not json", b"{\"id\""] {
            assert!(
                matches!(Incoming::parse(bad), Err(Error::Malformed(_))),
                "{bad:?}"
            );
        }
    }
}
