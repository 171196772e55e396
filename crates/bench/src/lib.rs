//! `bench`: how fast sandboxd is, measured rather than asserted in timed tests.
//!
//! - `bench runtime` ([`runtime`]): create→first-exec and exec round trip through the namespace
//!   runtime library, next to the bare `unshare` floor, and a sandbox's cgroup made vs a spare
//!   renamed ([`cgroups`]).
//! - `bench http` ([`http`]): the proxy's throughput and latency against the same server reached
//!   directly, API create→first-exec, cold and from a warm pool ([`warm_pool`]), delete, the
//!   exec round trip ([`api_exec`]), and pause and resume→first exec ([`resume`]), against a
//!   running daemon.
//! - `bench images` ([`images`], its quota figure in [`quota`]): create→first-exec from a cached
//!   image vs `base`, a cold pull vs `skopeo copy`, and create with the disk quota on vs off; with a
//!   daemon and a registry of its own.
//! - `bench interpreter` ([`interpreter`]): the code interpreter's first `run_code` after create
//!   and its `run_code("1+1")` round trip, against a running daemon (its template needs egress to
//!   build, so `bench all` leaves it out).
//! - `bench daytona` ([`daytona`]): Daytona create→first exec and toolbox exec, beside `/v1`'s,
//!   against a running daemon.
//! - `bench cluster` ([`cluster`]): a name claim through the replicated log, create→first exec
//!   local vs forwarded, and creates per second, on a three-node loopback cluster of its own.
//! - `bench all`: `runtime`, `http` and `images`, with one daemon of its own ([`daemon`]) for `http` and `images`.
//!
//! Figures go to stdout, as lines for people or, with `--json`, as one JSON document; progress and
//! warnings go to stderr. Every bench cleans up what it created on success, error and Ctrl-C (a second
//! Ctrl-C, a second or more later, exits at once and may leave sandboxes behind). Targets are printed with a verdict; an unmet target does not fail the run.

pub mod api_exec;
pub mod cgroups;
pub mod cluster;
pub mod conn;
pub mod daemon;
pub mod daytona;
pub mod density;
pub mod egress;
pub mod gvisor;
pub mod http;
pub mod images;
pub mod interpreter;
pub mod load;
pub mod quota;
pub mod report;
pub mod resume;
pub mod runtime;
pub mod slabs;
pub mod stats;
pub mod steps;
pub mod volume_files;
pub mod volumes;
pub mod warm_pool;

use anyhow::{bail, Context};
use clap::{Parser, Subcommand};
use serde::Serialize;
use std::path::PathBuf;
use std::process::{ExitCode, Stdio};
use tokio::sync::watch;

/// bench: sandboxd benchmarks (run as root).
#[derive(Debug, Parser)]
#[command(name = "bench", version)]
pub struct Cli {
    /// Print one JSON document instead of lines.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Sandbox create→first-exec and exec round trip, through the runtime library.
    Runtime(runtime::RuntimeArgs),
    /// Proxy vs direct HTTP load, and API create→first-exec, against a running daemon.
    Http(http::HttpArgs),
    /// Image create→first-exec vs base, cold pull vs skopeo, create with quota on vs off.
    Images(images::ImagesCmd),
    /// The Daytona API: create→first exec and toolbox exec beside /v1's, against a running daemon.
    Daytona(daytona::DaytonaArgs),
    /// The code interpreter: first run_code after create and its round trip, against a running daemon.
    Interpreter(interpreter::InterpreterArgs),
    /// Cluster mode on three loopback nodes of its own: name claims through the log, create→first
    /// exec local vs forwarded, creates per second.
    Cluster(cluster::ClusterArgs),
    /// HTTPS through the egress gateway to a host it rewrites for, against direct, on loopback.
    Egress(egress::EgressArgs),
    /// How many idle sandboxes one host holds, against a daemon this command starts and stops:
    /// memory and tasks per sandbox, creates per second as the count grows, exec and list at the
    /// top.
    Density(density::DensityArgs),
    /// `runtime`, then `http` and `images` against a daemon this command starts and stops, then
    /// `egress`.
    All(AllArgs),
}

/// Options of `bench all`.
#[derive(Debug, Clone, clap::Args)]
pub struct AllArgs {
    #[command(flatten)]
    pub runtime: runtime::RuntimeArgs,
    #[command(flatten)]
    pub load: http::LoadArgs,
    #[command(flatten)]
    pub images: images::ImageArgs,
    #[command(flatten)]
    pub egress: egress::EgressArgs,
    /// The sandboxd binary (default: beside this executable, else target/release/sandboxd).
    #[arg(long)]
    pub daemon: Option<PathBuf>,
}

/// Becomes `true` on SIGINT or SIGTERM.
pub type Interrupt = watch::Receiver<bool>;

/// Resolves once the run was interrupted.
pub async fn interrupted(mut rx: Interrupt) {
    if rx.wait_for(|v| *v).await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Runs a parsed command line.
pub fn run(cli: Cli) -> ExitCode {
    let outcome = tokio::runtime::Runtime::new()
        .context("starting the async runtime")
        .and_then(|rt| rt.block_on(dispatch(cli)));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn dispatch(cli: Cli) -> anyhow::Result<()> {
    let interrupt = watch_signals()?;
    match &cli.command {
        Command::Runtime(args) => {
            let report = runtime::run(args, interrupt).await?;
            emit(cli.json, &report, || report.print())
        }
        Command::Http(args) => {
            let report = http::run(args, interrupt).await?;
            emit(cli.json, &report, || report.print())
        }
        Command::Images(args) => {
            let report = images::run(args, interrupt).await?;
            emit(cli.json, &report, || report.print())
        }
        Command::Daytona(args) => {
            let report = daytona::run(args, interrupt).await?;
            emit(cli.json, &report, || report.print())
        }
        Command::Interpreter(args) => {
            let report = interpreter::run(args, interrupt).await?;
            emit(cli.json, &report, || report.print())
        }
        Command::Cluster(args) => {
            let report = cluster::run(args, interrupt).await?;
            emit(cli.json, &report, || report.print())
        }
        Command::Egress(args) => {
            let report = egress::run(args).await?;
            emit(cli.json, &report, || report.print())
        }
        Command::Density(args) => {
            let report = density::run(args, interrupt).await?;
            emit(cli.json, &report, || report.print())
        }
        Command::All(args) => all(args, cli.json, interrupt).await,
    }
}

fn emit<T: Serialize>(json: bool, report: &T, print: impl FnOnce()) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string_pretty(report)?);
    } else {
        print();
    }
    Ok(())
}

/// The first SIGINT/SIGTERM sets the [`Interrupt`]; another one at least [`FORCE_AFTER`] later exits
/// at once. (Closer repeats are the same Ctrl-C delivered twice, e.g. to the process group and again
/// by a wrapper such as `timeout`, and are ignored.)
fn watch_signals() -> anyhow::Result<Interrupt> {
    use tokio::signal::unix::{signal, SignalKind};
    let (tx, rx) = watch::channel(false);
    let mut int = signal(SignalKind::interrupt())?;
    let mut term = signal(SignalKind::terminate())?;
    tokio::spawn(async move {
        let mut first: Option<std::time::Instant> = None;
        loop {
            tokio::select! {
                _ = int.recv() => {}
                _ = term.recv() => {}
            }
            match first {
                None => {
                    first = Some(std::time::Instant::now());
                    eprintln!("bench: interrupted, cleaning up (interrupt again to exit at once)");
                    let _ = tx.send(true);
                }
                Some(at) if at.elapsed() >= FORCE_AFTER => {
                    eprintln!("bench: interrupted again, exiting without cleaning up");
                    std::process::exit(130);
                }
                Some(_) => {}
            }
        }
    });
    Ok(rx)
}

/// How long after the first interrupt a second one forces an exit.
const FORCE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

#[derive(Serialize)]
struct AllReport {
    runtime: runtime::RuntimeReport,
    http: serde_json::Value,
    images: images::ImagesReport,
    egress: egress::EgressReport,
    daemon: DaemonFacts,
}

#[derive(Serialize)]
struct DaemonFacts {
    binary: PathBuf,
    /// Sandboxes still present when the daemon was killed (destroyed by the bench).
    left_behind: usize,
}

async fn all(args: &AllArgs, json: bool, interrupt: Interrupt) -> anyhow::Result<()> {
    let agent = runtime::agent_binary(args.runtime.agent.as_deref())?;
    let binary = daemon::daemon_binary(args.daemon.as_deref())?;
    images::check(&args.images)?;
    let runtime = runtime::run(&args.runtime, interrupt.clone()).await?;
    if !json {
        runtime.print();
        println!();
    }
    if *interrupt.borrow() {
        bail!("interrupted");
    }
    let daemon = daemon::Daemon::start(&binary, &agent).await?;
    let http = http_child(&daemon, &args.load, json, interrupt.clone()).await;
    let image_figures = match &http {
        Ok(_) if !*interrupt.borrow() => {
            Some(images::daemon_part(&daemon, &args.images, interrupt.clone()).await)
        }
        _ => None,
    };
    let failed = http.is_err() || image_figures.as_ref().is_none_or(|f| f.is_err());
    let left_behind = daemon.stop(failed).await;
    let http = http?;
    let image_figures = image_figures.context("interrupted")??;
    let left_behind = left_behind?;
    if !json {
        println!(
            "daemon {} stopped; {left_behind} sandboxes it still had were destroyed",
            binary.display()
        );
        println!();
    }
    let images = images::ImagesReport {
        daemon: image_figures,
        quota: quota::quota_part(&agent, &args.images, interrupt).await?,
    };
    let egress = egress::run(&args.egress).await?;
    if json {
        let report = AllReport {
            runtime,
            http: http.unwrap_or_default(),
            images,
            egress,
            daemon: DaemonFacts {
                binary,
                left_behind,
            },
        };
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        images.print();
        println!();
        egress.print();
    }
    Ok(())
}

/// Runs `bench http` as a child inside the daemon's network namespace; with `json`, returns its
/// report.
async fn http_child(
    daemon: &daemon::Daemon,
    load: &http::LoadArgs,
    json: bool,
    interrupt: Interrupt,
) -> anyhow::Result<Option<serde_json::Value>> {
    let exe = std::env::current_exe()?;
    let mut cmd = daemon.command(&exe);
    if json {
        cmd.arg("--json").stdout(Stdio::piped());
    }
    // Its own process group: a Ctrl-C reaches only this process, which forwards it exactly once.
    cmd.arg("http").args(load.to_args()).process_group(0);
    let child = cmd.spawn().context("starting bench http")?;
    let pid = child.id();
    let mut waiting = tokio::spawn(child.wait_with_output());
    let out = tokio::select! {
        out = &mut waiting => out,
        _ = interrupted(interrupt) => {
            if let Some(pid) = pid {
                // SAFETY: kill(2) on our own child, which cleans up and exits on its first SIGINT.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGINT) };
            }
            waiting.await
        }
    }
    .context("waiting for bench http")??;
    if !out.status.success() {
        bail!("bench http failed ({})", out.status);
    }
    if !json {
        return Ok(None);
    }
    Ok(Some(
        serde_json::from_slice(&out.stdout).context("bench http's JSON report")?,
    ))
}
