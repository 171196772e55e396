//! Code for a sandbox's code interpreter (`/v1/sandboxes/{id}/code`): the request is handed to the
//! interpreter the sandbox runs on [`INTERPRETER_PORT`] (the agent's `interpreter` mode, started
//! by the `code-interpreter-v1` template), and its stream of output lines is passed back as it
//! comes, so the daemon holds none of it.
//!
//! Contract: a sandbox that runs no interpreter is a conflict naming the template that has one;
//! the interpreter's 400 and 404 stay the caller's errors; anything else it answers is a bad
//! gateway.

use crate::{Service, ServiceError};
use sandboxd_api_types as api;
use std::sync::OnceLock;
use std::time::Duration;

/// Where the code interpreter listens inside a sandbox (as the E2B Code Interpreter SDKs reach it).
pub const INTERPRETER_PORT: u16 = 49999;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The interpreter's output: one JSON object per line, ending with `end_of_execution`.
pub type CodeOutput = futures::stream::BoxStream<'static, Result<bytes::Bytes, std::io::Error>>;

fn client() -> &'static reqwest::Client {
    static CLIENT: OnceLock<reqwest::Client> = OnceLock::new();
    CLIENT.get_or_init(|| {
        reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true)
            .build()
            .expect("a client without TLS builds")
    })
}

impl Service {
    /// Runs `req` in the code interpreter of sandbox `key` (resuming it when paused with
    /// auto-resume) and streams the interpreter's output lines.
    pub async fn run_code(&self, key: &str, req: api::RunCode) -> Result<CodeOutput, ServiceError> {
        if req.context_id.is_some() && req.language.is_some() {
            return Err(ServiceError::InvalidRequest(
                "give contextId or language, not both".into(),
            ));
        }
        let sandbox = self.awake(key).await?;
        let endpoint = self.endpoint(&sandbox.id).await?;
        let url = format!("http://{}:{INTERPRETER_PORT}/execute", endpoint.address);
        let body = serde_json::json!({
            "code": req.code,
            "context_id": req.context_id,
            "language": req.language,
            "env_vars": req.envs,
        });
        let response = client().post(&url).json(&body).send().await.map_err(|e| {
            if e.is_connect() {
                ServiceError::Conflict(format!(
                    "sandbox {} runs no code interpreter (sandboxes of the {} template do)",
                    sandbox.id,
                    crate::builtin::CODE_INTERPRETER
                ))
            } else {
                ServiceError::Interpreter(e.to_string())
            }
        })?;
        let status = response.status();
        if !status.is_success() {
            let message = response.text().await.unwrap_or_default();
            return Err(match status.as_u16() {
                400 => ServiceError::InvalidRequest(message),
                404 => ServiceError::NotFound(message),
                _ => ServiceError::Interpreter(format!("{status}: {message}")),
            });
        }
        use futures::StreamExt;
        Ok(response
            .bytes_stream()
            .map(|chunk| chunk.map_err(std::io::Error::other))
            .boxed())
    }
}
