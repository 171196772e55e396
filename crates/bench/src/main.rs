//! The `bench` binary: parse the command line, run the benchmark, exit with its code.

use clap::Parser;
use std::process::ExitCode;

fn main() -> ExitCode {
    sandboxd_bench::run(sandboxd_bench::Cli::parse())
}
