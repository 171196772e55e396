//! `sbx images ls|pull|rm|prune`.
//!
//! Contract: text output is for people (a table, a digest, removed names, what a prune freed);
//! `--json` prints the API's bodies (`Image`, an array of `Image`, `PruneImages`; for `rm`, an array
//! of removed names). `rm` tries every name and exits 1 at the end if any failed.

use crate::cli::ImagesCommand;
use crate::error::SbxError;
use crate::output::Output;
use sandboxd_client::types::{PullImage, RegistryAuth};
use sandboxd_client::Client;
use std::process::ExitCode;

/// `sbx images …`.
pub async fn run(client: &Client, out: Output, cmd: ImagesCommand) -> Result<ExitCode, SbxError> {
    match cmd {
        ImagesCommand::Ls => {
            let images = client.images().await?.images;
            if out.json {
                out.json(&images)?;
            } else {
                let rows: Vec<Vec<String>> = images
                    .into_iter()
                    .map(|i| {
                        let name = i.tags.first().cloned().unwrap_or(i.reference);
                        vec![name, short(&i.digest), i.state, human(i.size), i.created_at]
                    })
                    .collect();
                out.table(&["REFERENCE", "DIGEST", "STATE", "SIZE", "PULLED"], &rows)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        ImagesCommand::Pull {
            reference,
            username,
            password_stdin,
        } => {
            let registry_auth = match username {
                Some(username) => Some(RegistryAuth {
                    username,
                    password: read_password(password_stdin)?,
                }),
                None => None,
            };
            if !out.json {
                out.note(&format!("pulling {reference} …"));
            }
            let image = client
                .pull_image(&PullImage {
                    reference,
                    registry_auth,
                })
                .await?;
            if out.json {
                out.json(&image)?;
            } else {
                out.line(&image.digest)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        ImagesCommand::Rm { images } => {
            let mut removed = Vec::new();
            let mut failed = false;
            for name in &images {
                match client.remove_image(name).await {
                    Ok(()) => {
                        if !out.json {
                            out.line(name)?;
                        }
                        removed.push(name);
                    }
                    Err(e) => {
                        failed = true;
                        out.error(&SbxError::from(e));
                    }
                }
            }
            if out.json {
                out.json(&removed)?;
            }
            Ok(if failed {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            })
        }
        ImagesCommand::Prune => {
            let report = client.prune_images().await?;
            if out.json {
                out.json(&report)?;
            } else {
                out.line(&format!(
                    "removed {} layers, {} freed",
                    report.layers,
                    human(report.bytes)
                ))?;
            }
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// The first line of stdin, without its line end: a password given with `--password-stdin`.
pub(crate) fn password_from_stdin() -> Result<String, SbxError> {
    let mut line = String::new();
    std::io::stdin()
        .read_line(&mut line)
        .map_err(|e| SbxError::Usage(format!("reading the password from stdin: {e}")))?;
    Ok(line.trim_end_matches(['\n', '\r']).to_string())
}

/// The password for `--username`: from stdin with `--password-stdin`, else `SB_REGISTRY_PASSWORD`.
fn read_password(from_stdin: bool) -> Result<String, SbxError> {
    if from_stdin {
        return password_from_stdin();
    }
    std::env::var("SB_REGISTRY_PASSWORD").map_err(|_| {
        SbxError::Usage("--username needs --password-stdin or SB_REGISTRY_PASSWORD".into())
    })
}

/// `sha256:0123456789ab…` → `0123456789ab`.
fn short(digest: &str) -> String {
    digest
        .strip_prefix("sha256:")
        .unwrap_or(digest)
        .chars()
        .take(12)
        .collect()
}

/// Bytes in the largest unit that keeps a number ≥ 1 (`12.3 MB`).
fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "kB", "MB", "GB", "TB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1000.0 && unit < UNITS.len() - 1 {
        value /= 1000.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_digests_read_as_people_expect() {
        assert_eq!(human(0), "0 B");
        assert_eq!(human(999), "999 B");
        assert_eq!(human(1_500), "1.5 kB");
        assert_eq!(human(123_400_000), "123.4 MB");
        assert_eq!(
            short(&format!("sha256:{}", "ab".repeat(32))),
            "abababababab"
        );
    }
}
