//! Code for a sandbox's code interpreter (`/v1/sandboxes/{id}/code`): the request is handed to the
//! interpreter the sandbox runs on [`INTERPRETER_PORT`] (the agent's `interpreter` mode, started
//! by the `code-interpreter-v1` template), and its stream of output lines is passed back as it
//! comes, so the daemon holds none of it.
//!
//! Contract: a sandbox that runs no interpreter is a conflict naming the template that has one;
//! the interpreter's 400 and 404 stay the caller's errors; anything else it answers is a bad
//! gateway. A pause of the sandbox ends a run in flight ([`crate::in_flight`]): a conflict before
//! the interpreter answered, else an `error` line named `SandboxPaused` after the lines passed
//! back so far. The connection to the interpreter is dropped with it, so the interpreter
//! interrupts the code once the sandbox resumes (its next keepalive finds no one listening).

use crate::{Service, ServiceError};
use sandboxd_api_types as api;
use std::sync::OnceLock;
use std::time::Duration;

/// Where the code interpreter listens inside a sandbox (as the E2B Code Interpreter SDKs reach it).
pub const INTERPRETER_PORT: u16 = 49999;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The interpreter's output: one JSON object per line, ending with `end_of_execution`.
pub type CodeOutput = futures::stream::BoxStream<'static, Result<bytes::Bytes, std::io::Error>>;

/// The interpreter's output as JSON values, one per line, whatever the chunks the bytes came in
/// (a line that is not JSON ends the stream with an error).
pub fn code_lines(
    output: CodeOutput,
) -> futures::stream::BoxStream<'static, Result<serde_json::Value, ServiceError>> {
    use futures::StreamExt;
    let state = (
        output,
        Vec::<u8>::new(),
        std::collections::VecDeque::<Vec<u8>>::new(),
    );
    futures::stream::unfold(state, |(mut output, mut partial, mut ready)| async move {
        loop {
            if let Some(line) = ready.pop_front() {
                let parsed = serde_json::from_slice::<serde_json::Value>(&line).map_err(|e| {
                    ServiceError::Interpreter(format!("an output line that is not JSON: {e}"))
                });
                return Some((parsed, (output, partial, ready)));
            }
            match output.next().await {
                Some(Ok(chunk)) => {
                    partial.extend_from_slice(&chunk);
                    while let Some(pos) = partial.iter().position(|b| *b == b'\n') {
                        let line: Vec<u8> = partial.drain(..=pos).collect();
                        if !line.iter().all(u8::is_ascii_whitespace) {
                            ready.push_back(line);
                        }
                    }
                }
                Some(Err(e)) => {
                    let failed = Err(ServiceError::Interpreter(e.to_string()));
                    return Some((failed, (output, partial, ready)));
                }
                None => return None,
            }
        }
    })
    .boxed()
}

/// A failed call: a sandbox that listens on no interpreter port is a conflict.
fn no_interpreter(sandbox: &str, e: reqwest::Error) -> ServiceError {
    if e.is_connect() {
        ServiceError::Conflict(format!(
            "sandbox {sandbox} runs no code interpreter (sandboxes of the {} template do)",
            crate::builtin::CODE_INTERPRETER
        ))
    } else {
        ServiceError::Interpreter(e.to_string())
    }
}

/// The interpreter's 400 and 404 are the caller's errors; any other failure is its own.
/// What a run answers when its sandbox was paused before the interpreter answered.
fn paused_mid_code(id: &str) -> ServiceError {
    ServiceError::Conflict(paused_message(id))
}

fn paused_message(id: &str) -> String {
    format!(
        "sandbox {id} was paused while the code ran: its output from then on is not returned \
         here, and the interpreter interrupts it once the sandbox resumes"
    )
}

/// The `error` line that ends a run's output when its sandbox was paused under it, after a line
/// break unless the output stopped at the start of a line.
fn paused_line(id: &str, at_line_start: bool) -> bytes::Bytes {
    let error = serde_json::json!({
        "type": "error",
        "name": "SandboxPaused",
        "value": paused_message(id),
        "traceback": "",
    });
    let newline = if at_line_start { "" } else { "\n" };
    bytes::Bytes::from(format!("{newline}{error}\n"))
}

async fn check(response: reqwest::Response) -> Result<reqwest::Response, ServiceError> {
    let status = response.status();
    if status.is_success() {
        return Ok(response);
    }
    let message = response.text().await.unwrap_or_default();
    Err(match status.as_u16() {
        400 => ServiceError::InvalidRequest(message),
        404 => ServiceError::NotFound(message),
        _ => ServiceError::Interpreter(format!("{status}: {message}")),
    })
}

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
    /// Calls the code interpreter of sandbox `key` (`method path`, with `body` as JSON) and returns
    /// its JSON answer (`null` for an empty one): its contexts API (`/contexts…`).
    pub async fn interpreter_call(
        &self,
        key: &str,
        method: reqwest::Method,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> Result<serde_json::Value, ServiceError> {
        let (sandbox, url) = self.interpreter_url(key, path).await?;
        let mut request = client().request(method, &url);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .map_err(|e| no_interpreter(&sandbox, e))?;
        let response = check(response).await?;
        let bytes = response
            .bytes()
            .await
            .map_err(|e| ServiceError::Interpreter(e.to_string()))?;
        if bytes.is_empty() {
            return Ok(serde_json::Value::Null);
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| ServiceError::Interpreter(format!("an answer that is not JSON: {e}")))
    }

    /// The running sandbox `key` and the URL of `path` on its interpreter.
    async fn interpreter_url(
        &self,
        key: &str,
        path: &str,
    ) -> Result<(String, String), ServiceError> {
        let sandbox = self.awake(key).await?;
        let endpoint = self.endpoint(&sandbox.id).await?;
        let url = format!("http://{}:{INTERPRETER_PORT}{path}", endpoint.address);
        Ok((sandbox.id, url))
    }

    /// Runs `req` in the code interpreter of sandbox `key` (resuming it when paused with
    /// auto-resume) and streams the interpreter's output lines.
    pub async fn run_code(&self, key: &str, req: api::RunCode) -> Result<CodeOutput, ServiceError> {
        if req.context_id.is_some() && req.language.is_some() {
            return Err(ServiceError::InvalidRequest(
                "give contextId or language, not both".into(),
            ));
        }
        // Before the sandbox's state is read: a pause from then on ends this request
        // ([`crate::in_flight`]).
        let in_flight = self.inner.in_flight.subscribe();
        let (sandbox, url) = self.interpreter_url(key, "/execute").await?;
        let mut paused = Box::pin(in_flight.until_paused(sandbox.clone()));
        let body = serde_json::json!({
            "code": req.code,
            "context_id": req.context_id,
            "language": req.language,
            "env_vars": req.envs,
        });
        let sent = client().post(&url).json(&body).send();
        let response = tokio::select! {
            sent = sent => sent.map_err(|e| no_interpreter(&sandbox, e))?,
            () = &mut paused => return Err(paused_mid_code(&sandbox)),
        };
        let response = check(response).await?;
        use futures::StreamExt;
        let chunks = response
            .bytes_stream()
            .map(|chunk| chunk.map_err(std::io::Error::other))
            .boxed();
        // The interpreter's lines until the sandbox is paused, then an `error` line saying so, on
        // a line of its own.
        let state = Some((chunks, paused, true));
        Ok(futures::stream::unfold(state, move |state| {
            let sandbox = sandbox.clone();
            async move {
                let (mut chunks, mut paused, at_line_start) = state?;
                tokio::select! {
                    chunk = chunks.next() => {
                        let chunk = chunk?;
                        let ends_line = match &chunk {
                            Ok(bytes) => bytes.last().map_or(at_line_start, |b| *b == b'\n'),
                            Err(_) => at_line_start,
                        };
                        Some((chunk, Some((chunks, paused, ends_line))))
                    }
                    () = &mut paused => {
                        let line = paused_line(&sandbox, at_line_start);
                        Some((Ok(line), None))
                    }
                }
            }
        })
        .boxed())
    }
}
