//! `sandboxd`: parse the configuration, then hand over to [`sandboxd::serve`].

use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = sandboxd::config::Cli::parse();
    sandboxd::run(cli)
}
