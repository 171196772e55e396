//! `process.Process` messages (envd's `process/process.proto`) in canonical protobuf JSON.
//!
//! Field names follow the proto's JSON names (camelCase); inputs also accept the proto field names
//! where they differ. A `oneof` is a Rust enum serialized externally tagged, which is exactly the
//! protobuf JSON shape: `{"event":{"data":{"stdout":"<base64>"}}}`.

use crate::json;
use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::HashMap;

/// The Connect service name.
pub const SERVICE: &str = "process.Process";

/// URL path of a `process.Process` method, e.g. `path("Start")` = `/process.Process/Start`.
pub fn path(method: &str) -> String {
    format!("/{SERVICE}/{method}")
}

/// What to run: `cmd` with `args`, extra `envs`, in `cwd` (default: the user's home).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProcessConfig {
    pub cmd: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(skip_serializing_if = "HashMap::is_empty")]
    pub envs: HashMap<String, String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cwd: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PtySize {
    #[serde(deserialize_with = "json::num::deserialize")]
    pub cols: u32,
    #[serde(deserialize_with = "json::num::deserialize")]
    pub rows: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Pty {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<PtySize>,
}

/// `process.Process/Start` request.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct StartRequest {
    pub process: ProcessConfig,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pty: Option<Pty>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// Whether the process gets a stdin pipe; envd defaults to `true` when absent.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdin: Option<bool>,
}

/// One message of a `Start` / `Connect` stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartResponse {
    pub event: ProcessEvent,
}

/// The `ProcessEvent.event` oneof.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProcessEvent {
    Start(StartEvent),
    Data(DataEvent),
    End(EndEvent),
    Keepalive(KeepAlive),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct StartEvent {
    #[serde(deserialize_with = "json::num::deserialize")]
    pub pid: u32,
}

/// The `DataEvent.output` oneof: a chunk of output, base64 on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DataEvent {
    Stdout(#[serde(with = "json::b64")] Bytes),
    Stderr(#[serde(with = "json::b64")] Bytes),
    Pty(#[serde(with = "json::b64")] Bytes),
}

/// How the process ended, shaped like Go's `os.ProcessState` the way envd reports it: `exitCode` is -1
/// and `exited` false when a signal ended it; `status` is `"exit status 3"` or `"signal: killed"`;
/// `error` repeats `status` whenever the process did not exit 0.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct EndEvent {
    #[serde(alias = "exit_code", deserialize_with = "json::num::deserialize")]
    pub exit_code: i32,
    pub exited: bool,
    pub status: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeepAlive {}

/// The `ProcessSelector.selector` oneof.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProcessSelector {
    Pid(#[serde(deserialize_with = "json::num::deserialize")] u32),
    Tag(String),
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListRequest {}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ListResponse {
    pub processes: Vec<ProcessInfo>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct ProcessInfo {
    pub config: ProcessConfig,
    #[serde(deserialize_with = "json::num::deserialize")]
    pub pid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// The `process.Signal` enum; serialized by name, accepted by name or number.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Signal {
    #[default]
    Unspecified,
    Sigterm,
    Sigkill,
}

impl Signal {
    pub fn name(self) -> &'static str {
        match self {
            Signal::Unspecified => "SIGNAL_UNSPECIFIED",
            Signal::Sigterm => "SIGNAL_SIGTERM",
            Signal::Sigkill => "SIGNAL_SIGKILL",
        }
    }

    /// The proto number, which is also the Linux signal number.
    pub fn number(self) -> i32 {
        match self {
            Signal::Unspecified => 0,
            Signal::Sigterm => 15,
            Signal::Sigkill => 9,
        }
    }
}

impl Serialize for Signal {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.name())
    }
}

impl<'de> Deserialize<'de> for Signal {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Either {
            N(i64),
            S(String),
        }
        match Either::deserialize(d)? {
            Either::N(0) => Ok(Signal::Unspecified),
            Either::N(15) => Ok(Signal::Sigterm),
            Either::N(9) => Ok(Signal::Sigkill),
            Either::S(s) if s == "SIGNAL_UNSPECIFIED" => Ok(Signal::Unspecified),
            Either::S(s) if s == "SIGNAL_SIGTERM" => Ok(Signal::Sigterm),
            Either::S(s) if s == "SIGNAL_SIGKILL" => Ok(Signal::Sigkill),
            _ => Err(serde::de::Error::custom("unknown process.Signal value")),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendSignalRequest {
    pub process: ProcessSelector,
    #[serde(default)]
    pub signal: Signal,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendSignalResponse {}

/// The `ProcessInput.input` oneof.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProcessInput {
    Stdin(#[serde(with = "json::b64")] Bytes),
    Pty(#[serde(with = "json::b64")] Bytes),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendInputRequest {
    pub process: ProcessSelector,
    pub input: ProcessInput,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SendInputResponse {}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloseStdinRequest {
    pub process: ProcessSelector,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CloseStdinResponse {}

/// `process.Process/Connect` request: attach to a running process. Its stream is shaped like `Start`'s:
/// `start` (with the pid), output from now on, `end`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectRequest {
    pub process: ProcessSelector,
}

/// One message of a `Connect` stream (the same shape as [`StartResponse`]).
pub type ConnectResponse = StartResponse;

/// `process.Process/Update` request: today only a PTY resize.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateRequest {
    pub process: ProcessSelector,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pty: Option<Pty>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateResponse {}

/// One message of the `process.Process/StreamInput` client stream: `start` (which process) first, then
/// `data` messages, with optional `keepalive`s anywhere. The message is nothing but its `event` oneof,
/// whose member protobuf JSON puts at the top level: `{"data":{"input":{"stdin":"..."}}}`.
pub type StreamInputRequest = StreamInputEvent;

/// The `StreamInputRequest.event` oneof.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StreamInputEvent {
    Start(StreamInputStart),
    Data(StreamInputData),
    Keepalive(KeepAlive),
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamInputStart {
    pub process: ProcessSelector,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamInputData {
    pub input: ProcessInput,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamInputResponse {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_use_protobuf_json_shape() {
        let data = StartResponse {
            event: ProcessEvent::Data(DataEvent::Stdout(Bytes::from_static(b"2\n"))),
        };
        assert_eq!(
            serde_json::to_string(&data).unwrap(),
            r#"{"event":{"data":{"stdout":"Mgo="}}}"#
        );
        let end = StartResponse {
            event: ProcessEvent::End(EndEvent {
                exit_code: 3,
                exited: true,
                status: "exit status 3".into(),
                error: Some("exit status 3".into()),
            }),
        };
        assert_eq!(
            serde_json::to_string(&end).unwrap(),
            r#"{"event":{"end":{"exitCode":3,"exited":true,"status":"exit status 3","error":"exit status 3"}}}"#
        );
        let ka = StartResponse {
            event: ProcessEvent::Keepalive(KeepAlive {}),
        };
        assert_eq!(
            serde_json::to_string(&ka).unwrap(),
            r#"{"event":{"keepalive":{}}}"#
        );
        // Defaults omitted by a proto3 encoder must still parse.
        let sparse: StartResponse =
            serde_json::from_str(r#"{"event":{"end":{"status":"exit status 0"}}}"#).unwrap();
        assert!(matches!(
            sparse.event,
            ProcessEvent::End(EndEvent { exit_code: 0, .. })
        ));
    }

    #[test]
    fn start_request_parses_sdk_shape() {
        let req: StartRequest = serde_json::from_str(
            r#"{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"],"envs":{"A":"b"},"cwd":"/tmp"},"stdin":false,"tag":"t"}"#,
        )
        .unwrap();
        assert_eq!(req.process.cmd, "/bin/bash");
        assert_eq!(req.process.args.len(), 3);
        assert_eq!(req.process.envs.get("A").map(String::as_str), Some("b"));
        assert_eq!(req.stdin, Some(false));
        assert_eq!(req.tag.as_deref(), Some("t"));
        let empty: StartRequest = serde_json::from_str("{}").unwrap();
        assert_eq!(empty.stdin, None);
    }

    #[test]
    fn signal_accepts_names_and_numbers() {
        let by_name: SendSignalRequest =
            serde_json::from_str(r#"{"process":{"pid":12},"signal":"SIGNAL_SIGKILL"}"#).unwrap();
        assert_eq!(by_name.signal, Signal::Sigkill);
        assert_eq!(by_name.process, ProcessSelector::Pid(12));
        let by_num: SendSignalRequest =
            serde_json::from_str(r#"{"process":{"tag":"x"},"signal":15}"#).unwrap();
        assert_eq!(by_num.signal, Signal::Sigterm);
        assert!(serde_json::from_str::<SendSignalRequest>(
            r#"{"process":{"pid":1},"signal":"SIGHUP"}"#
        )
        .is_err());
        assert_eq!(
            serde_json::to_string(&by_name).unwrap(),
            r#"{"process":{"pid":12},"signal":"SIGNAL_SIGKILL"}"#
        );
    }

    #[test]
    fn connect_update_and_stream_input_use_sdk_shapes() {
        let c: ConnectRequest = serde_json::from_str(r#"{"process":{"tag":"srv"}}"#).unwrap();
        assert_eq!(c.process, ProcessSelector::Tag("srv".into()));
        let u: UpdateRequest =
            serde_json::from_str(r#"{"process":{"pid":7},"pty":{"size":{"cols":120,"rows":40}}}"#)
                .unwrap();
        assert_eq!(
            u.pty.and_then(|p| p.size),
            Some(PtySize {
                cols: 120,
                rows: 40
            })
        );
        // As the E2B SDK sends them (protobuf JSON puts oneof members in the message itself).
        let start: StreamInputRequest = StreamInputEvent::Start(StreamInputStart {
            process: ProcessSelector::Pid(7),
        });
        assert_eq!(
            serde_json::to_string(&start).unwrap(),
            r#"{"start":{"process":{"pid":7}}}"#
        );
        let data: StreamInputRequest =
            serde_json::from_str(r#"{"data":{"input":{"pty":"aGk="}}}"#).unwrap();
        assert_eq!(
            data,
            StreamInputEvent::Data(StreamInputData {
                input: ProcessInput::Pty(Bytes::from_static(b"hi"))
            })
        );
        let ka: StreamInputRequest = serde_json::from_str(r#"{"keepalive":{}}"#).unwrap();
        assert!(matches!(ka, StreamInputEvent::Keepalive(_)));
        assert!(
            serde_json::from_str::<StreamInputRequest>(r#"{"event":{"keepalive":{}}}"#).is_err()
        );
    }
}
