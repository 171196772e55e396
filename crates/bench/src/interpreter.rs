//! `bench interpreter`: the code interpreter of `code-interpreter-v1`, against a running daemon
//! (`--api`/`SB_API_URL`, `--token`/`SB_PAT_TOKEN`). It is not part of `bench all`: the template's
//! first build installs its kernels with `pip`, which needs the daemon's egress, and `bench all`'s
//! daemon lives in a private network namespace without any.
//!
//! 1. **first `run_code` after create**: N sandboxes of the template (one untimed first, which also
//!    builds the template when the daemon has none — its build time is printed), each created over
//!    the API (timed: the create answers once the interpreter's kernel is warm) and then asked
//!    `1+1`; printed: create, and the first `run_code` (goal p50 ≤ [`FIRST_RUN_TARGET_MS`] ms).
//! 2. **`run_code("1+1")` round trip**: M calls on one keep-alive HTTP/1.1 connection to the daemon
//!    as the E2B Code Interpreter SDK makes them (`POST /execute` with `E2b-Sandbox-Id` and
//!    `E2b-Sandbox-Port: 49999`, through the daemon's proxy), each read to `end_of_execution`; goal
//!    p50 ≤ [`ROUND_TRIP_TARGET_MS`] ms.
//! 3. The same through `/v1/sandboxes/{id}/code` (no goal; the API's own route).
//!
//! Guarantees: sandboxes are [`ApiFleet`]'s (labelled, with a lifetime, all deleted at the end, on
//! success, error and Ctrl-C alike); the template is left in place (it is the daemon's built-in).

use crate::conn::KeepAlive;
use crate::http::{with_fleet, ApiFleet};
use crate::report::{Latency, Target};
use crate::Interrupt;
use anyhow::{bail, Context};
use sandboxd_client::types::{CreateSandbox, CreateTemplate, RunCode};
use sandboxd_client::{Client, ClientError};
use serde::Serialize;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The template measured.
pub const TEMPLATE: &str = "code-interpreter-v1";
/// The goal for the first `run_code` after create, ms (p50).
pub const FIRST_RUN_TARGET_MS: f64 = 1000.0;
/// The goal for a `run_code("1+1")` round trip, ms (p50).
pub const ROUND_TRIP_TARGET_MS: f64 = 5.0;
/// Longest the template's build may take.
const BUILD_TIMEOUT: Duration = Duration::from_secs(20 * 60);

/// Options of `bench interpreter`.
#[derive(Debug, Clone, clap::Args)]
pub struct InterpreterArgs {
    /// Sandboxes created for the first-`run_code` figure.
    #[arg(long, default_value_t = 10)]
    pub creates: usize,
    /// `run_code("1+1")` calls for each round-trip figure.
    #[arg(long, default_value_t = 300)]
    pub calls: usize,
    /// The daemon's URL.
    #[arg(long, env = "SB_API_URL", default_value = "http://127.0.0.1:21212")]
    pub api: String,
    /// The daemon's admin token.
    #[arg(long, env = "SB_PAT_TOKEN", hide_env_values = true)]
    pub token: String,
}

/// Figures of `bench interpreter`.
#[derive(Debug, Clone, Serialize)]
pub struct InterpreterReport {
    /// How long the template took to build in this run (`None`: it was built already).
    pub build_secs: Option<f64>,
    pub create: Latency,
    pub first_run_code: Latency,
    pub round_trip_proxy: Latency,
    pub round_trip_v1: Latency,
}

impl InterpreterReport {
    /// Lines for people.
    pub fn print(&self) {
        println!("== code interpreter ({TEMPLATE}, real Jupyter kernels)");
        match self.build_secs {
            Some(s) => println!("template built in this run in {s:.1} s"),
            None => println!("template was built already"),
        }
        println!("{}", self.create.line("create (kernel warm)"));
        println!("{}", self.first_run_code.line("first run_code(1+1)"));
        println!("{}", self.round_trip_proxy.line("run_code(1+1) via proxy"));
        println!("{}", self.round_trip_v1.line("run_code(1+1) via /v1"));
    }
}

/// Runs `bench interpreter`.
pub async fn run(
    args: &InterpreterArgs,
    interrupt: Interrupt,
) -> anyhow::Result<InterpreterReport> {
    if args.creates == 0 || args.calls == 0 {
        bail!("--creates and --calls must be at least 1");
    }
    let owned = args.clone();
    with_fleet(&args.api, &args.token, interrupt, move |fleet| {
        measure(fleet, owned)
    })
    .await
}

async fn measure(fleet: Arc<ApiFleet>, args: InterpreterArgs) -> anyhow::Result<InterpreterReport> {
    let build_secs = ensure_template(&fleet.client).await?;
    let body = || CreateSandbox {
        template: Some(TEMPLATE.to_string()),
        ..CreateSandbox::default()
    };
    let (mut creates, mut firsts) = (Vec::new(), Vec::new());
    for i in 0..=args.creates {
        let t = Instant::now();
        let sandbox = fleet.create_with(body()).await?;
        let created = t.elapsed();
        let t = Instant::now();
        expect_two(v1_run(&fleet.client, &sandbox.id).await?)?;
        let first = t.elapsed();
        fleet.delete(&sandbox.id).await?;
        if i > 0 {
            creates.push(created);
            firsts.push(first);
        }
    }
    let sandbox = fleet.create_with(body()).await?;
    let proxy = ProxyPath::connect(&args.api, &args.token, &sandbox.id).await?;
    expect_two(proxy.run("1+1").await?)?;
    let mut via_proxy = Vec::with_capacity(args.calls);
    for _ in 0..args.calls {
        let t = Instant::now();
        expect_two(proxy.run("1+1").await?)?;
        via_proxy.push(t.elapsed());
    }
    let mut via_v1 = Vec::with_capacity(args.calls);
    for _ in 0..args.calls {
        let t = Instant::now();
        expect_two(v1_run(&fleet.client, &sandbox.id).await?)?;
        via_v1.push(t.elapsed());
    }
    let p50 = |ms| {
        Some(Target {
            p50_ms: Some(ms),
            p99_ms: None,
        })
    };
    Ok(InterpreterReport {
        build_secs,
        create: Latency::new("create", &creates, None)?,
        first_run_code: Latency::new("first run_code", &firsts, p50(FIRST_RUN_TARGET_MS))?,
        round_trip_proxy: Latency::new(
            "run_code via proxy",
            &via_proxy,
            p50(ROUND_TRIP_TARGET_MS),
        )?,
        round_trip_v1: Latency::new("run_code via /v1", &via_v1, None)?,
    })
}

/// Builds the template when the daemon has none (following it to the end); its build time.
async fn ensure_template(client: &Client) -> anyhow::Result<Option<f64>> {
    match client.template(TEMPLATE).await {
        Ok(t) if t.state == "ready" => return Ok(None),
        Ok(t) if t.state == "building" => {}
        Ok(_) | Err(ClientError::Api { status: 404, .. }) => {
            if client.template(TEMPLATE).await.is_ok() {
                client.delete_template(TEMPLATE).await?;
            }
            let body = CreateTemplate {
                name: TEMPLATE.to_string(),
                ..CreateTemplate::default()
            };
            client.create_template(&body).await?;
        }
        Err(e) => return Err(e.into()),
    }
    eprintln!("bench: building {TEMPLATE} (pip installs its kernels; this takes a while)");
    let took =
        crate::http::template_ready(client, TEMPLATE, BUILD_TIMEOUT, Duration::from_millis(500))
            .await?;
    Ok(Some(took.as_secs_f64()))
}

/// The main result's text of an execution's lines must be `2`.
fn expect_two(lines: Vec<serde_json::Value>) -> anyhow::Result<()> {
    let text = lines
        .iter()
        .find(|l| l["type"] == "result" && l["is_main_result"] == true)
        .and_then(|l| l["text"].as_str());
    if text != Some("2") {
        bail!("run_code(1+1) answered {lines:?}");
    }
    Ok(())
}

async fn v1_run(client: &Client, id: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    use futures::StreamExt;
    let request = RunCode {
        code: "1+1".into(),
        ..RunCode::default()
    };
    let mut lines = std::pin::pin!(client.run_code(id, &request));
    let mut out = Vec::new();
    while let Some(line) = lines.next().await {
        out.push(line.context("run_code over /v1")?);
    }
    Ok(out)
}

/// The interpreter as the E2B SDK addresses it, over one keep-alive connection to the daemon.
struct ProxyPath {
    conn: KeepAlive,
    token: String,
    sandbox: String,
}

impl ProxyPath {
    async fn connect(api: &str, token: &str, sandbox: &str) -> anyhow::Result<ProxyPath> {
        Ok(ProxyPath {
            conn: KeepAlive::connect(api).await?,
            token: token.to_string(),
            sandbox: sandbox.to_string(),
        })
    }

    async fn run(&self, code: &str) -> anyhow::Result<Vec<serde_json::Value>> {
        let headers = [
            ("x-api-key", self.token.as_str()),
            ("e2b-sandbox-id", self.sandbox.as_str()),
            ("e2b-sandbox-port", "49999"),
        ];
        let body = self
            .conn
            .post_json("/execute", &headers, &serde_json::json!({ "code": code }))
            .await?;
        body.split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).context("an output line"))
            .collect()
    }
}
