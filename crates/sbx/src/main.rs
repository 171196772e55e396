//! The `sbx` binary: parse the command line, run it, exit with its code.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    sandboxd_sbx::run(sandboxd_sbx::Cli::parse())
}
