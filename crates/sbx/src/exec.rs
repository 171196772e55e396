//! `sbx exec`: run a command in a sandbox.
//!
//! Contract: without `--json`, the streaming route is used and the command's stdout/stderr bytes are
//! written to sbx's own stdout/stderr as they arrive; with `--json`, the collected route is used and the
//! `ExecResult` is printed. Either way sbx exits with the command's exit code ([`exit_code`] maps codes
//! outside 0–255 to 255). When sbx itself fails — an error answer, a broken or `error`-terminated
//! stream — the caller ([`crate::run`]) exits with [`EXEC_FAILURE`] = 255, like ssh, so a failure of sbx
//! is told apart from the command exiting 1.

use crate::cli::ExecArgs;
use crate::error::SbxError;
use crate::output::Output;
use futures::StreamExt;
use sandboxd_client::types::{ExecEvent, ExecRequest};
use sandboxd_client::{decode_data, Client};
use std::process::ExitCode;

/// Exit code of `sbx exec` when sbx itself fails.
pub const EXEC_FAILURE: u8 = 255;

/// The process exit code for a command's exit code.
pub fn exit_code(code: i32) -> u8 {
    u8::try_from(code).unwrap_or(EXEC_FAILURE)
}

/// Runs `sbx exec`.
pub async fn run(client: &Client, out: Output, args: ExecArgs) -> Result<ExitCode, SbxError> {
    if args.interactive {
        return Err(SbxError::Usage(
            "-i keeps stdin attached to a terminal: use it with -t (sbx exec -it)".into(),
        ));
    }
    let request = ExecRequest {
        cmd: args.cmd,
        env: (!args.env.is_empty()).then(|| args.env.into_iter().collect()),
        cwd: args.cwd,
        user: args.user,
        timeout_ms: args.timeout,
    };
    if out.json {
        let result = client.exec(&args.id, &request).await?;
        out.json(&result)?;
        return Ok(ExitCode::from(exit_code(result.exit_code)));
    }
    let mut events = std::pin::pin!(client.exec_stream(&args.id, &request));
    while let Some(event) = events.next().await {
        match event? {
            ExecEvent::Start { .. } => {}
            ExecEvent::Stdout { data } => out.stdout_bytes(&decode_data(&data)?)?,
            ExecEvent::Stderr { data } => out.stderr_bytes(&decode_data(&data)?)?,
            ExecEvent::Exit { exit_code: code } => return Ok(ExitCode::from(exit_code(code))),
            ExecEvent::Error { message } => return Err(SbxError::ExecStream(message)),
        }
    }
    // The client ends every stream with a terminal item; this is only a safety net.
    Err(SbxError::ExecStream(
        "stream ended without an exit event".into(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_outside_a_byte_become_the_failure_code() {
        assert_eq!(exit_code(0), 0);
        assert_eq!(exit_code(3), 3);
        assert_eq!(exit_code(255), 255);
        assert_eq!(exit_code(256), EXEC_FAILURE);
        assert_eq!(exit_code(-1), EXEC_FAILURE);
    }
}
