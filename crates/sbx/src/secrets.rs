//! `sbx secrets ls|create|get|update|rm`: values a sandbox holds only a placeholder of.
//!
//! Contract: a value is read from `--value-file` or stdin, never from an argument, without one
//! final newline (`echo` adds one), and is never printed. Text output is for people (a table, a
//! placeholder, `key: value` lines); `--json` prints the API's bodies unchanged (`SecretInfo`, an
//! array of `SecretInfo`; for `rm`, an array of deleted names). `rm` tries every name, reports each
//! failure on stderr as it happens, and exits 1 at the end if any failed
//! ([`Output::delete_each`]).

use crate::cli::SecretsCommand;
use crate::error::SbxError;
use crate::output::Output;
use sandboxd_client::types::{CreateSecret, Secret, SecretInfo, UpdateSecret};
use sandboxd_client::Client;
use std::io::Read;
use std::path::Path;
use std::process::ExitCode;

/// The value in `file`, else on stdin, without one final newline.
fn read_value(file: Option<&Path>) -> Result<Secret, SbxError> {
    let mut bytes = Vec::new();
    let (path, read) = match file {
        Some(path) => (
            path.display().to_string(),
            std::fs::File::open(path).and_then(|mut f| f.read_to_end(&mut bytes)),
        ),
        None => (
            "stdin".to_string(),
            std::io::stdin().read_to_end(&mut bytes),
        ),
    };
    read.map_err(|source| SbxError::Local {
        path: path.clone(),
        source,
    })?;
    if bytes.last() == Some(&b'\n') {
        bytes.pop();
        if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
    }
    let value = String::from_utf8(bytes)
        .map_err(|_| SbxError::Usage(format!("the value in {path} is not UTF-8 text")))?;
    Ok(Secret(value))
}

fn hosts(s: &SecretInfo) -> String {
    if s.hosts.is_empty() {
        "-".into()
    } else {
        s.hosts.join(",")
    }
}

/// `sbx secrets …`.
pub async fn run(client: &Client, out: Output, cmd: SecretsCommand) -> Result<ExitCode, SbxError> {
    match cmd {
        SecretsCommand::Ls => {
            let secrets = client.secrets().await?.secrets;
            if out.json {
                out.json(&secrets)?;
            } else {
                let rows: Vec<Vec<String>> = secrets
                    .iter()
                    .map(|s| {
                        vec![
                            s.name.clone(),
                            hosts(s),
                            s.version.to_string(),
                            s.updated_at.clone(),
                        ]
                    })
                    .collect();
                out.table(&["NAME", "HOSTS", "VERSION", "UPDATED"], &rows)?;
            }
        }
        SecretsCommand::Create {
            name,
            value_file,
            hosts,
            description,
            label,
        } => {
            let body = CreateSecret {
                name,
                value: read_value(value_file.as_deref())?,
                hosts: (!hosts.is_empty()).then_some(hosts),
                description,
                metadata: (!label.is_empty()).then(|| label.into_iter().collect()),
            };
            let made = client.create_secret(&body).await?;
            if out.json {
                out.json(&made)?;
            } else {
                out.line(&made.placeholder)?;
            }
        }
        SecretsCommand::Get { name } => {
            let s = client.secret(&name).await?;
            if out.json {
                out.json(&s)?;
            } else {
                for (key, value) in [
                    ("name", s.name.clone()),
                    ("id", s.id.clone()),
                    ("placeholder", s.placeholder.clone()),
                    ("hosts", hosts(&s)),
                    ("description", s.description.clone()),
                    ("version", s.version.to_string()),
                    ("created", s.created_at.clone()),
                    ("updated", s.updated_at.clone()),
                ] {
                    out.line(&format!("{key}: {value}"))?;
                }
            }
        }
        SecretsCommand::Update {
            name,
            value_stdin,
            value_file,
            hosts,
            clear_hosts,
            description,
        } => {
            let value = match (value_stdin, value_file) {
                (false, None) => None,
                (_, file) => Some(read_value(file.as_deref())?),
            };
            let hosts = match (clear_hosts, hosts.is_empty()) {
                (true, _) => Some(Vec::new()),
                (false, false) => Some(hosts),
                (false, true) => None,
            };
            if value.is_none() && hosts.is_none() && description.is_none() {
                return Err(SbxError::Usage(
                    "nothing to change: give --value-stdin, --value-file, --host, --clear-hosts \
                     or --description"
                        .into(),
                ));
            }
            let body = UpdateSecret {
                value,
                hosts,
                description,
                metadata: None,
            };
            let changed = client.update_secret(&name, &body).await?;
            if out.json {
                out.json(&changed)?;
            } else {
                out.line(&format!("{} version {}", changed.name, changed.version))?;
            }
        }
        SecretsCommand::Rm { names } => {
            return out
                .delete_each(
                    &names,
                    |name| async move { client.delete_secret(&name).await },
                )
                .await
        }
    }
    Ok(ExitCode::SUCCESS)
}
