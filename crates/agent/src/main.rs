//! `sandboxd-agent`: the binary the runtime bind-mounts into every sandbox and runs as its init.
//!
//! - `sandboxd-agent boot` is what the runtime executes as PID 1 of a new sandbox; it is not for people.
//! - `sandboxd-agent serve --socket PATH` serves the envd protocol on a plain unix socket outside any
//!   sandbox (for tests and debugging); the token is read from `SANDBOXD_AGENT_TOKEN`.
//! - `sandboxd-agent interpreter` serves the code interpreter (port 49999) inside a sandbox; with
//!   `--probe` it only checks that one answers (a template's ready command).
//!
//! - `sandboxd-agent tool OP …` is a file operation of the daemon's session machinery inside a sandbox
//!   (`sandboxd_agent::tool`); it is not for people.
//!
//! Logs go to stderr (the sandbox's boot log under `boot`), filtered by `RUST_LOG` (default `info`;
//! the runtime sets it from `SANDBOXD_AGENT_LOG`).

use clap::{Parser, Subcommand};
use std::path::PathBuf;

#[derive(Parser)]
#[command(name = "sandboxd-agent", version, about = "sandboxd in-sandbox agent")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Boot a sandbox as its PID 1 (run by the runtime only).
    Boot,
    /// Serve as PID 1 of a sandbox the runtime built whole (gVisor tier; run by the runtime only).
    #[command(hide = true)]
    Init,
    /// Serve the envd protocol on a unix socket, outside any sandbox.
    Serve {
        /// Path of the unix socket to listen on.
        #[arg(long)]
        socket: PathBuf,
        /// Access token every call must carry.
        #[arg(long, env = "SANDBOXD_AGENT_TOKEN", hide_env_values = true)]
        token: String,
        /// User commands run as when the caller names none.
        #[arg(long, default_value = "user")]
        default_user: String,
    },
    /// Serve the code interpreter on Jupyter kernels (inside a sandbox).
    Interpreter {
        /// Address to listen on.
        #[arg(long, default_value_t = std::net::SocketAddr::from(([0, 0, 0, 0], sandboxd_agent::interpreter::PORT)))]
        listen: std::net::SocketAddr,
        /// Only check that an interpreter answers on --listen (its port on loopback); exit 0 if so.
        #[arg(long)]
        probe: bool,
    },
    /// A file operation of the daemon's session machinery (run inside a sandbox by the daemon).
    #[command(hide = true)]
    Tool {
        #[command(subcommand)]
        op: sandboxd_agent::tool::Op,
    },
}

fn main() {
    // A sandbox's PID 1 restarting small (`init::resume`): before anything else allocates.
    let mut args = std::env::args_os().skip(1);
    let first = args.next();
    let first = first.as_deref().map(std::os::unix::ffi::OsStrExt::as_bytes);
    if first == Some(sandboxd_agent::init::SUPERVISE.to_bytes()) {
        let (server, name) = (args.next(), args.next());
        sandboxd_agent::init::resume(server.as_deref(), name.as_deref());
    }
    let cli = Cli::parse();
    if let Command::Tool { op } = &cli.command {
        std::process::exit(sandboxd_agent::tool::run(op));
    }
    init_logging();
    match cli.command {
        Command::Tool { .. } => unreachable!("handled above"),
        Command::Boot => sandboxd_agent::boot::run(),
        Command::Init => sandboxd_agent::prebuilt::run(),
        Command::Interpreter { listen, probe } => {
            let code = if probe {
                let local = std::net::SocketAddr::from(([127, 0, 0, 1], listen.port()));
                sandboxd_agent::interpreter::probe(local)
            } else {
                sandboxd_agent::interpreter::run(listen)
            };
            std::process::exit(code);
        }
        Command::Serve {
            socket,
            token,
            default_user,
        } => {
            let _ = std::fs::remove_file(&socket);
            let listener = match std::os::unix::net::UnixListener::bind(&socket) {
                Ok(l) => l,
                Err(e) => {
                    eprintln!("sandboxd-agent: cannot listen on {}: {e}", socket.display());
                    std::process::exit(1);
                }
            };
            let config = sandboxd_agent::server::AgentConfig {
                token,
                default_user,
                envs: Default::default(),
                workdir: None,
                callback: None,
                identity_file: None,
            };
            std::process::exit(sandboxd_agent::server::run_blocking(listener, config));
        }
    }
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("warn,sandboxd_agent::callhome=info")
    });
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .try_init();
}
