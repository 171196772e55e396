//! `sbx volumes ls|create|get|rm|cp|files`: named storage that outlives sandboxes.
//!
//! Contract: text output is for people (a table, a name, `key: value` lines); `--json` prints the
//! API's bodies unchanged (`Volume`, an array of `Volume`, an array of `VolumeEntry`; for `rm`, an
//! array of deleted names). `rm` tries every name, reports each failure on stderr as it happens, and
//! exits 1 at the end if any failed. `cp` is `sbx cp` with a volume name where the sandbox id goes.

use crate::cli::VolumesCommand;
use crate::cp::{self, Remote};
use crate::error::SbxError;
use crate::output::Output;
use sandboxd_client::types::CreateVolume;
use sandboxd_client::Client;
use std::process::ExitCode;

fn size(mb: u64) -> String {
    if mb == 0 {
        "unlimited".into()
    } else {
        format!("{mb} MiB")
    }
}

/// `sbx volumes …`.
pub async fn run(client: &Client, out: Output, cmd: VolumesCommand) -> Result<ExitCode, SbxError> {
    match cmd {
        VolumesCommand::Ls => {
            let volumes = client.volumes().await?.volumes;
            if out.json {
                out.json(&volumes)?;
            } else {
                let rows: Vec<Vec<String>> = volumes
                    .into_iter()
                    .map(|v| vec![v.name, v.id, size(v.size_mb), v.created_at])
                    .collect();
                out.table(&["NAME", "ID", "SIZE", "CREATED"], &rows)?;
            }
        }
        VolumesCommand::Create { name, size, label } => {
            let body = CreateVolume {
                name,
                size_mb: size,
                labels: (!label.is_empty()).then(|| label.into_iter().collect()),
            };
            let volume = client.create_volume(&body).await?;
            if out.json {
                out.json(&volume)?;
            } else {
                out.line(&volume.name)?;
            }
        }
        VolumesCommand::Get { name } => {
            let v = client.volume(&name).await?;
            if out.json {
                out.json(&v)?;
            } else {
                let used = v
                    .used_bytes
                    .map(|b| format!("{b} bytes"))
                    .unwrap_or_else(|| "not measured on this host".into());
                for (key, value) in [
                    ("name", v.name.clone()),
                    ("id", v.id.clone()),
                    ("size", size(v.size_mb)),
                    ("used", used),
                    ("created", v.created_at.clone()),
                ] {
                    out.line(&format!("{key}: {value}"))?;
                }
                for m in v.mounts.unwrap_or_default() {
                    let mode = if m.read_only { "ro" } else { "rw" };
                    out.line(&format!("mounted: {} at {} ({mode})", m.sandbox_id, m.path))?;
                }
            }
        }
        VolumesCommand::Rm { names } => {
            let mut deleted = Vec::new();
            let mut failed = false;
            for name in names {
                match client.delete_volume(&name).await {
                    Ok(()) => deleted.push(name),
                    Err(e) => {
                        failed = true;
                        eprintln!("sbx: {name}: {}", SbxError::from(e).message());
                    }
                }
            }
            if out.json {
                out.json(&deleted)?;
            }
            if failed {
                return Ok(ExitCode::FAILURE);
            }
        }
        VolumesCommand::Cp { src, dst } => {
            return cp::run_on(client, out, &src, &dst, Remote::Volume).await
        }
        VolumesCommand::Files { target, depth } => {
            let (name, path) = target.split_once(':').unwrap_or((target.as_str(), "/"));
            let entries = client.volume_entries(name, path, depth).await?.entries;
            if out.json {
                out.json(&entries)?;
            } else {
                let rows: Vec<Vec<String>> = entries
                    .into_iter()
                    .map(|e| {
                        vec![
                            e.kind,
                            format!("{:o}", e.mode),
                            format!("{}:{}", e.uid, e.gid),
                            e.size.to_string(),
                            e.modified_at,
                            match e.target {
                                Some(t) => format!("{} -> {t}", e.path),
                                None => e.path,
                            },
                        ]
                    })
                    .collect();
                out.table(
                    &["TYPE", "MODE", "OWNER", "SIZE", "MODIFIED", "PATH"],
                    &rows,
                )?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}
