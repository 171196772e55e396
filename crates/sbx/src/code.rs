//! `sbx code`: run code in a sandbox's code interpreter, reading it from stdin.
//!
//! Contract: without `--json`, stdout and stderr text go to sbx's stdout and stderr as they
//! arrive, each result's text (the main result's, and any display's that has no image) to stdout,
//! and an error's traceback to stderr; with `--json`, every output line is printed as compact JSON
//! as it arrives. Exits 0 when the code ran without an error, 1 when it raised (or sbx failed).

use crate::cli::CodeArgs;
use crate::error::SbxError;
use crate::output::Output;
use futures::StreamExt;
use sandboxd_client::types::RunCode;
use sandboxd_client::Client;
use serde_json::Value;
use std::io::Read;
use std::process::ExitCode;

/// Runs `sbx code`.
pub async fn run(client: &Client, out: Output, args: CodeArgs) -> Result<ExitCode, SbxError> {
    let mut code = String::new();
    std::io::stdin()
        .read_to_string(&mut code)
        .map_err(|source| SbxError::Local {
            path: "-".into(),
            source,
        })?;
    let request = RunCode {
        code,
        context_id: args.context,
        language: args.language,
        envs: (!args.env.is_empty()).then(|| args.env.into_iter().collect()),
    };
    let mut lines = std::pin::pin!(client.run_code(&args.id, &request));
    let mut raised = false;
    while let Some(line) = lines.next().await {
        let line = line?;
        raised |= line["type"] == "error";
        if out.json {
            out.line(&line.to_string())?;
        } else {
            print_line(&out, &line)?;
        }
    }
    Ok(if raised {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

fn print_line(out: &Output, line: &Value) -> Result<(), SbxError> {
    let text = |key: &str| line[key].as_str().unwrap_or_default().to_string();
    match line["type"].as_str() {
        Some("stdout") => out.stdout_bytes(text("text").as_bytes()),
        Some("stderr") => out.stderr_bytes(text("text").as_bytes()),
        Some("result") => {
            let has_image = ["png", "jpeg", "svg"]
                .iter()
                .any(|k| line.get(*k).is_some());
            let main = line["is_main_result"] == true;
            match line["text"].as_str() {
                Some(t) if main || !has_image => out.line(t),
                _ if has_image => out.line("[image]"),
                _ => Ok(()),
            }
        }
        Some("error") => {
            let report = format!(
                "{}: {}\n{}\n",
                text("name"),
                text("value"),
                text("traceback")
            );
            out.stderr_bytes(report.as_bytes())
        }
        _ => Ok(()),
    }
}
