//! `sbx cluster status`.
//!
//! Contract: prints the leader, then one row per member (id, API address, role, health, free
//! capacity), the answering node marked `*`; with `--json`, the `ClusterStatus`. Exits 1 on a single
//! node (the daemon's `not_clustered` error).

use crate::cli::ClusterCommand;
use crate::error::SbxError;
use crate::output::Output;
use sandboxd_client::Client;
use std::process::ExitCode;

/// `sbx cluster …`.
pub async fn run(client: &Client, out: Output, cmd: ClusterCommand) -> Result<ExitCode, SbxError> {
    match cmd {
        ClusterCommand::Status => {
            let status = client.cluster_status().await?;
            if out.json {
                out.json(&status)?;
                return Ok(ExitCode::SUCCESS);
            }
            let leader = status
                .leader_id
                .clone()
                .unwrap_or_else(|| "none (election running)".into());
            out.line(&format!(
                "leader {leader}, term {}, {} sandboxes placed",
                status.term, status.placements
            ))?;
            let rows: Vec<Vec<String>> = status
                .members
                .iter()
                .map(|m| {
                    let mut id = m.id.clone();
                    if m.id == status.node_id {
                        id.push('*');
                    }
                    vec![
                        id,
                        m.api_addr.clone(),
                        if m.leader {
                            format!("{} (leader)", m.role)
                        } else {
                            m.role.clone()
                        },
                        m.health.clone(),
                        m.slots_free.to_string(),
                        format!("{:.1}", m.cpu_millis_free as f64 / 1000.0),
                        m.memory_mb_free.to_string(),
                        m.disk_mb_free.to_string(),
                    ]
                })
                .collect();
            out.table(
                &[
                    "NODE", "API", "ROLE", "HEALTH", "SLOTS", "CPUS", "MEM_MB", "DISK_MB",
                ],
                &rows,
            )?;
            Ok(ExitCode::SUCCESS)
        }
    }
}
