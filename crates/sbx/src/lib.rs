//! `sbx`, the command-line client of sandboxd, as a library so it can be tested.
//!
//! Contract: [`run`] executes one parsed [`Cli`] against the daemon at `--api-url` / `SB_API_URL`
//! with the token from `--token` / `SB_PAT_TOKEN` — else the ones `sbx login` saved ([`login`]) —,
//! prints through [`output`] only, never panics on input, and returns the process exit code:
//! - 0 on success; 1 on any error (`error: <message> (<code>)` on stderr, or the ApiError JSON with
//!   `--json`); 2 on a usage error (clap's own, or arguments that make no sense together, e.g. `cp`
//!   with two local paths);
//! - `exec` and `shell`: the command's exit code, or 255 when sbx itself fails (see [`exec`]);
//! - `rm`: 1 when any id failed, after trying all of them.

pub mod api_keys;
pub mod cli;
pub mod cluster;
pub mod code;
pub mod cp;
mod error;
pub mod exec;
pub mod git;
pub mod images;
pub mod login;
pub mod output;
pub mod sandboxes;
pub mod secrets;
pub mod shell;
pub mod templates;
pub mod volumes;
pub mod warm_pools;

pub use cli::{Cli, Command};
pub use error::SbxError;

use output::Output;
use sandboxd_client::types::PauseMode;
use sandboxd_client::Client;
use std::process::ExitCode;

/// Runs one invocation; see the crate docs for the exit codes.
pub fn run(cli: Cli) -> ExitCode {
    let out = Output { json: cli.json };
    let failure = match cli.command {
        Command::Exec(_) | Command::Shell(_) => exec::EXEC_FAILURE,
        _ => 1,
    };
    let result = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(SbxError::Runtime)
        .and_then(|runtime| runtime.block_on(dispatch(cli, out)));
    match result {
        Ok(code) => code,
        Err(error) => {
            out.error(&error);
            ExitCode::from(if error.is_usage() { 2 } else { failure })
        }
    }
}

async fn dispatch(cli: Cli, out: Output) -> Result<ExitCode, SbxError> {
    let Cli {
        api_url,
        token,
        config,
        command,
        ..
    } = cli;
    let config = config.or_else(login::default_path);
    // Every command but login and logout talks to a daemon with a key.
    let client = || {
        let (url, token) = login::resolve(api_url.clone(), token.clone(), config.as_deref())?;
        Client::new(&url, token).map_err(SbxError::from)
    };
    match command {
        Command::Login => {
            login::login(out, api_url.clone(), token.clone(), config.as_deref()).await
        }
        Command::Logout => login::logout(out, config.as_deref()),
        Command::ApiKeys(cmd) => api_keys::run(&client()?, out, cmd).await,
        Command::Cluster(cmd) => cluster::run(&client()?, out, cmd).await,
        Command::Create(args) => sandboxes::create(&client()?, out, args).await,
        Command::Ls(args) => sandboxes::ls(&client()?, out, args).await,
        Command::Get { id } => sandboxes::get(&client()?, out, &id).await,
        Command::Pause { id, filesystem, .. } => {
            let mode = match filesystem {
                true => PauseMode::Filesystem,
                false => PauseMode::Memory,
            };
            sandboxes::print(out, client()?.pause(&id, mode).await?)
        }
        Command::Resume { id } => sandboxes::print(out, client()?.resume(&id).await?),
        Command::Fork { id, count, timeout } => {
            let body = sandboxd_client::types::ForkRequest {
                count: Some(count),
                timeout_sec: timeout,
            };
            sandboxes::print_forks(out, client()?.fork(&id, &body).await?)
        }
        Command::Stop { id } => sandboxes::print(out, client()?.stop(&id).await?),
        Command::Start { id } => sandboxes::print(out, client()?.start(&id).await?),
        Command::Exec(args) if args.tty => shell::run(&client()?, shell::from_exec(args)?).await,
        Command::Exec(args) => exec::run(&client()?, out, args).await,
        Command::Shell(args) => shell::run(&client()?, args).await,
        Command::Code(args) => code::run(&client()?, out, args).await,
        Command::Cp { src, dst } => cp::run(&client()?, out, &src, &dst).await,
        Command::Expose { id, port, protocol } => {
            sandboxes::expose(&client()?, out, &id, port, &protocol).await
        }
        Command::Rm { ids } => sandboxes::rm(&client()?, out, &ids).await,
        Command::Images(cmd) => images::run(&client()?, out, cmd).await,
        Command::Templates(cmd) => templates::run(&client()?, out, cmd).await,
        Command::Volumes(cmd) => volumes::run(&client()?, out, cmd).await,
        Command::Secrets(cmd) => secrets::run(&client()?, out, cmd).await,
        Command::WarmPools(cmd) => warm_pools::run(&client()?, out, cmd).await,
        Command::Snapshot { id, name } => templates::snapshot(&client()?, out, &id, &name).await,
        Command::Git(args) => git::run(&client()?, out, args).await,
    }
}
