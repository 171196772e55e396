//! The text messages of `GET /v1/sandboxes/{id}/terminal`, a WebSocket to a PTY in the sandbox.
//!
//! Binary messages carry the terminal's bytes both ways (keystrokes in, output out). Text messages are
//! JSON: the client sends [`TerminalControl`]s; the server's last message is one [`TerminalNotice`],
//! then it closes the socket.

use serde::{Deserialize, Serialize};

/// Client → server.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "type", rename_all = "camelCase", deny_unknown_fields)]
pub enum TerminalControl {
    /// The window changed size (1–1000 each way).
    Resize { cols: u16, rows: u16 },
}

/// Server → client, once, last.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "type", rename_all = "camelCase")]
pub enum TerminalNotice {
    /// The terminal's process exited (128 + signal when killed by one).
    Exit {
        #[serde(rename = "exitCode")]
        exit_code: i32,
    },
    /// The terminal broke before its process's end was known.
    Error { message: String },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_are_tagged_by_type() {
        let c: TerminalControl =
            serde_json::from_str(r#"{"type":"resize","cols":120,"rows":40}"#).unwrap();
        assert_eq!(
            c,
            TerminalControl::Resize {
                cols: 120,
                rows: 40
            }
        );
        assert!(
            serde_json::from_str::<TerminalControl>(r#"{"type":"resize","cols":-1,"rows":1}"#)
                .is_err()
        );
        let n = serde_json::to_string(&TerminalNotice::Exit { exit_code: 3 }).unwrap();
        assert_eq!(n, r#"{"type":"exit","exitCode":3}"#);
    }
}
