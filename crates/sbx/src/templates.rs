//! `sbx templates ls|build|logs|rm` and `sbx snapshot`.
//!
//! Contract: `build` creates the template, then follows its build log until it ends, printing each
//! line as it arrives (on stderr with `--json`, whose stdout is the final `Template`); it exits 0
//! when the template is `ready` and 1 when it `failed`. A context directory is sent as a tar of its
//! regular files, directories and symlinks (nothing outside it is followed).

use crate::cli::TemplatesCommand;
use crate::error::SbxError;
use crate::output::Output;
use base64::Engine;
use sandboxd_client::types::{CreateTemplate, Template};
use sandboxd_client::Client;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

/// How often `build` asks for new log lines.
const POLL: Duration = Duration::from_millis(300);

/// `sbx templates …`.
pub async fn run(
    client: &Client,
    out: Output,
    cmd: TemplatesCommand,
) -> Result<ExitCode, SbxError> {
    match cmd {
        TemplatesCommand::Ls => {
            let templates = client.templates().await?.templates;
            if out.json {
                out.json(&templates)?;
            } else {
                let rows: Vec<Vec<String>> = templates
                    .into_iter()
                    .map(|t| {
                        vec![
                            t.name,
                            t.state,
                            t.image
                                .map(|d| d.chars().skip(7).take(12).collect())
                                .unwrap_or_default(),
                            t.isolation.unwrap_or_else(|| "default".into()),
                            t.updated_at,
                        ]
                    })
                    .collect();
                out.table(&["NAME", "STATE", "IMAGE", "ISOLATION", "UPDATED"], &rows)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        TemplatesCommand::Build {
            name,
            image,
            file,
            context,
            build_arg,
            start_cmd,
            ready_cmd,
            isolation,
        } => {
            let dockerfile = match &file {
                Some(path) => {
                    Some(
                        std::fs::read_to_string(path).map_err(|source| SbxError::Local {
                            path: path.display().to_string(),
                            source,
                        })?,
                    )
                }
                None => None,
            };
            let context = match (&context, &dockerfile) {
                (Some(dir), Some(_)) => {
                    Some(base64::engine::general_purpose::STANDARD.encode(tar_dir(dir)?))
                }
                (Some(_), None) => {
                    return Err(SbxError::Usage("--context goes with --file".into()))
                }
                _ => None,
            };
            let body = CreateTemplate {
                name: name.clone(),
                image,
                dockerfile,
                context,
                build_args: (!build_arg.is_empty()).then(|| build_arg.into_iter().collect()),
                registry_auth: None,
                start_cmd,
                ready_cmd,
                isolation,
            };
            client.create_template(&body).await?;
            let done = follow(client, out, &name).await?;
            if out.json {
                out.json(&done)?;
            }
            Ok(if done.state == "ready" {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            })
        }
        TemplatesCommand::Logs { name } => {
            for line in client.template_log(&name, 0).await? {
                if out.json {
                    out.json(&line)?;
                } else {
                    out.line(&line.line)?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        TemplatesCommand::Rm { names } => {
            out.delete_each(
                &names,
                |name| async move { client.delete_template(&name).await },
            )
            .await
        }
    }
}

/// `sbx snapshot ID NAME`: prints the template's name (or the `Template` with `--json`).
pub async fn snapshot(
    client: &Client,
    out: Output,
    id: &str,
    name: &str,
) -> Result<ExitCode, SbxError> {
    let template = client.snapshot(id, name).await?;
    if out.json {
        out.json(&template)?;
    } else {
        out.line(&template.name)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints the build log of `name` as it grows; returns the template once it is not building.
async fn follow(client: &Client, out: Output, name: &str) -> Result<Template, SbxError> {
    let mut offset = 0;
    loop {
        // The state first: every line of an ended build is in the log by then.
        let template = client.template(name).await?;
        for line in client.template_log(name, offset).await? {
            offset = line.seq + 1;
            if out.json {
                out.note(&line.line);
            } else {
                out.line(&line.line)?;
            }
        }
        if template.state != "building" {
            return Ok(template);
        }
        tokio::time::sleep(POLL).await;
    }
}

/// A tar of `dir`'s regular files, directories and symlinks, paths relative to it.
fn tar_dir(dir: &Path) -> Result<Vec<u8>, SbxError> {
    let local = |source| SbxError::Local {
        path: dir.display().to_string(),
        source,
    };
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    builder.append_dir_all(".", dir).map_err(local)?;
    builder.into_inner().map_err(local)
}
