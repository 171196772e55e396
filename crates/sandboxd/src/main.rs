//! `sandboxd`: read the command line and its config file, then hand over to [`sandboxd::run`].

fn main() -> std::process::ExitCode {
    sandboxd::main(std::env::args_os().collect())
}
