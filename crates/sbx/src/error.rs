//! The CLI's one error type, and how it is shown.
//!
//! Contract: every failure is an [`SbxError`] with a stable `code` and a one-line `message` (the
//! daemon's own code and message for an API error; otherwise the error and its `#[source]` chain
//! joined by `: `). [`SbxError::to_api_error`] gives the `--json` form, in the API's error shape.

use sandboxd_client::types::ApiError;
use sandboxd_client::ClientError;

/// What can go wrong in a command.
#[derive(Debug, thiserror::Error)]
pub enum SbxError {
    /// No token was configured.
    #[error("no API token: pass --token, set SB_PAT_TOKEN or run `sbx login`")]
    MissingToken,
    /// There is nowhere to keep a login.
    #[error("no place for the saved login: pass --config, or set SBX_CONFIG or HOME")]
    NoConfigPath,
    /// The saved login cannot be read.
    #[error("the saved login {path} is not valid (run `sbx login` again)")]
    Config {
        /// The file.
        path: String,
        /// Why it does not parse.
        #[source]
        source: serde_json::Error,
    },
    /// The arguments make no sense together (beyond what clap checks).
    #[error("{0}")]
    Usage(String),
    /// A call to the daemon failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The daemon reported that an exec stream broke.
    #[error("exec stream failed: {0}")]
    ExecStream(String),
    /// A local file could not be read or written.
    #[error("{path}")]
    Local {
        /// The local path.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Writing to our own stdout failed.
    #[error("writing output failed")]
    Output(#[source] std::io::Error),
    /// The async runtime could not be started.
    #[error("cannot start the async runtime")]
    Runtime(#[source] std::io::Error),
    /// The local terminal could not be put into (or out of) raw mode.
    #[error("cannot set up the local terminal")]
    Terminal(#[source] std::io::Error),
    /// The daemon reported that a terminal broke.
    #[error("terminal failed: {0}")]
    TerminalStream(String),
}

impl SbxError {
    /// A stable machine-readable code.
    pub fn code(&self) -> &str {
        match self {
            SbxError::MissingToken => "missing_token",
            SbxError::NoConfigPath | SbxError::Config { .. } => "config",
            SbxError::Usage(_) => "usage",
            SbxError::Client(e) => e.code(),
            SbxError::ExecStream(_) => "exec_stream",
            SbxError::Local { .. }
            | SbxError::Output(_)
            | SbxError::Runtime(_)
            | SbxError::Terminal(_) => "io",
            SbxError::TerminalStream(_) => "terminal",
        }
    }

    /// A one-line explanation: the daemon's message, or this error and its causes.
    pub fn message(&self) -> String {
        if let SbxError::Client(ClientError::Api { message, .. }) = self {
            return message.clone();
        }
        sandboxd_errors::chain(self)
    }

    /// The `--json` form.
    pub fn to_api_error(&self) -> ApiError {
        ApiError {
            code: self.code().to_string(),
            message: self.message(),
        }
    }

    /// Whether this is a usage error (exit code 2).
    pub fn is_usage(&self) -> bool {
        matches!(self, SbxError::Usage(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_errors_keep_the_daemon_code_and_message() {
        let e = SbxError::from(ClientError::from_error_body(
            401,
            br#"{"code":"unauthorized","message":"bad token"}"#,
        ));
        assert_eq!(
            (e.code(), e.message().as_str()),
            ("unauthorized", "bad token")
        );
    }

    #[test]
    fn other_errors_show_their_cause_chain_once() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let e = SbxError::Local {
            path: "./x".into(),
            source: io,
        };
        assert_eq!(e.message(), "./x: gone");
        assert_eq!(e.code(), "io");
        let e = SbxError::from(ClientError::Io(std::io::Error::other("disk full")));
        assert_eq!(e.message(), "local I/O failed: disk full");
    }
}
