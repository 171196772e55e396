//! `bench daytona`: the Daytona surface against a running daemon (`--api`/`SB_API_URL`,
//! `--token`/`SB_PAT_TOKEN`), each figure beside the same work over `/v1` in the same run.
//!
//! 1. **create→first exec over the SDK's path**: `POST /api/sandbox {snapshot: "base"}` (the SDK's
//!    create answers once the sandbox is `started`), then `POST /api/toolbox/{id}/process/execute
//!    {command: "true"}`; against `POST /v1/sandboxes` (with egress, as Daytona's default has it) +
//!    `POST /v1/sandboxes/{id}/exec ["true"]`.
//!    N of each, alternating, one untimed of each first, each sandbox deleted (untimed) after.
//! 2. **toolbox exec round trip**: M `process/execute "true"` calls on one keep-alive connection,
//!    against M `/v1` exec calls on another.
//!
//! Guarantees: every sandbox carries [`ApiFleet`]'s label (Daytona's labels are sandboxd's
//! metadata), so the fleet's teardown deletes them all, on success, error and Ctrl-C alike.

use crate::conn::KeepAlive;
use crate::http::{with_fleet, ApiFleet};
use crate::report::Latency;
use crate::Interrupt;
use anyhow::{bail, Context};
use sandboxd_client::types::{CreateSandbox, NetworkPolicy};
use serde::Serialize;
use serde_json::json;
use std::sync::Arc;
use std::time::Instant;

/// Options of `bench daytona`.
#[derive(Debug, Clone, clap::Args)]
pub struct DaytonaArgs {
    /// Sandboxes of each kind (Daytona, /v1) for create→first exec.
    #[arg(long, default_value_t = 20)]
    pub creates: usize,
    /// Exec calls of each kind for the round trip.
    #[arg(long, default_value_t = 200)]
    pub calls: usize,
    /// The daemon's URL.
    #[arg(long, env = "SB_API_URL", default_value = "http://127.0.0.1:21212")]
    pub api: String,
    /// The daemon's admin token.
    #[arg(long, env = "SB_PAT_TOKEN", hide_env_values = true)]
    pub token: String,
}

/// Figures of `bench daytona`.
#[derive(Debug, Clone, Serialize)]
pub struct DaytonaReport {
    pub create_to_first_exec: Latency,
    pub v1_create_to_first_exec: Latency,
    pub toolbox_exec: Latency,
    pub v1_exec: Latency,
}

impl DaytonaReport {
    /// Lines for people.
    pub fn print(&self) {
        println!("== Daytona API (snapshot base), beside /v1 in the same run");
        println!("{}", self.create_to_first_exec.line("create→exec Daytona"));
        println!("{}", self.v1_create_to_first_exec.line("create→exec /v1"));
        println!("{}", self.toolbox_exec.line("toolbox exec"));
        println!("{}", self.v1_exec.line("/v1 exec"));
        let ratio = |a: &Latency, b: &Latency| a.summary.p50_ms / b.summary.p50_ms;
        println!(
            "Daytona/v1 p50 ratios: create→exec {:.2}, exec {:.2}",
            ratio(&self.create_to_first_exec, &self.v1_create_to_first_exec),
            ratio(&self.toolbox_exec, &self.v1_exec)
        );
    }
}

/// Runs `bench daytona`.
pub async fn run(args: &DaytonaArgs, interrupt: Interrupt) -> anyhow::Result<DaytonaReport> {
    if args.creates == 0 || args.calls == 0 {
        bail!("--creates and --calls must be at least 1");
    }
    let owned = args.clone();
    with_fleet(&args.api, &args.token, interrupt, move |fleet| {
        measure(fleet, owned)
    })
    .await
}

/// The Daytona API as the SDK calls it, over one keep-alive connection.
struct Daytona {
    conn: KeepAlive,
    bearer: String,
}

impl Daytona {
    async fn post(&self, path: &str, body: serde_json::Value) -> anyhow::Result<serde_json::Value> {
        let headers = [("authorization", self.bearer.as_str())];
        let answer = self.conn.post_json(path, &headers, &body).await?;
        serde_json::from_slice(&answer).with_context(|| format!("the answer of {path}"))
    }

    async fn exec_true(&self, id: &str) -> anyhow::Result<()> {
        let path = format!("/api/toolbox/{id}/process/execute");
        let answer = self.post(&path, json!({ "command": "true" })).await?;
        if answer["exitCode"] != 0 {
            bail!("process/execute of `true` answered {answer}");
        }
        Ok(())
    }
}

async fn measure(fleet: Arc<ApiFleet>, args: DaytonaArgs) -> anyhow::Result<DaytonaReport> {
    let daytona = Daytona {
        conn: KeepAlive::connect(&args.api).await?,
        bearer: format!("Bearer {}", args.token),
    };
    let (label, run) = fleet.label();
    let (mut ours, mut peer) = (Vec::new(), Vec::new());
    for i in 0..=args.creates {
        for k in 0..2 {
            let t = Instant::now();
            let id = if (i + k) % 2 == 0 {
                let body = json!({ "snapshot": "base", "labels": { label.clone(): run.clone() } });
                let made = daytona.post("/api/sandbox", body).await?;
                let id = made["id"]
                    .as_str()
                    .context("a created sandbox's id")?
                    .to_string();
                daytona.exec_true(&id).await?;
                id
            } else {
                // With egress, as Daytona's sandboxes have it unless `networkBlockAll`.
                let made = fleet
                    .create_with(CreateSandbox {
                        network: Some(NetworkPolicy {
                            egress: true,
                            ..NetworkPolicy::default()
                        }),
                        ..CreateSandbox::default()
                    })
                    .await?;
                crate::http::run_ok(&fleet.client, &made.id, &["true"]).await?;
                made.id
            };
            let took = t.elapsed();
            fleet.delete(&id).await?;
            match (i > 0, (i + k) % 2 == 0) {
                (false, _) => {}
                (true, true) => ours.push(took),
                (true, false) => peer.push(took),
            }
        }
    }
    let sandbox = fleet.create().await?;
    let (mut toolbox, mut v1) = (Vec::new(), Vec::new());
    daytona.exec_true(&sandbox.id).await?;
    for _ in 0..args.calls {
        let t = Instant::now();
        daytona.exec_true(&sandbox.id).await?;
        toolbox.push(t.elapsed());
        let t = Instant::now();
        crate::http::run_ok(&fleet.client, &sandbox.id, &["true"]).await?;
        v1.push(t.elapsed());
    }
    Ok(DaytonaReport {
        create_to_first_exec: Latency::new("Daytona create→exec", &ours, None)?,
        v1_create_to_first_exec: Latency::new("/v1 create→exec", &peer, None)?,
        toolbox_exec: Latency::new("toolbox exec", &toolbox, None)?,
        v1_exec: Latency::new("/v1 exec", &v1, None)?,
    })
}
