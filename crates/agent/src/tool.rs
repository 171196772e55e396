//! The few file operations the daemon's session machinery needs inside a sandbox, done by the agent's
//! own binary (`/.sandboxd/agent tool …`), so that nothing of it depends on the image: a sandbox made
//! from an image without `mkfifo`, `rm`, `mv` or `cat` runs Daytona's sessions all the same.
//!
//! Contract (each operation is one call; exit 0 when done, 1 with a message on stderr when not):
//! - `fifo PATH`: makes a FIFO at `PATH` (mode 0600), which must not exist.
//! - `ended BASE CODE`: a session command has ended with `CODE`: removes its FIFO `BASE.in` (gone or
//!   not), then writes `CODE` to `BASE.exit` whole (written aside, renamed into place), so a reader
//!   that sees an exit code sees no stdin left.
//! - `feed PATH`: copies standard input into the FIFO at `PATH` while the command that reads it runs;
//!   exit 3 when `PATH` is no FIFO or the command ended before it took the input, never creating a
//!   file there.

use nix::sys::stat::Mode;
use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// Exit code of `feed` when there is no FIFO to feed.
pub const NO_FIFO: i32 = 3;

/// One operation, as the `tool` subcommand names it.
#[derive(Debug, Clone, PartialEq, Eq, clap::Subcommand)]
pub enum Op {
    /// Make a FIFO.
    Fifo { path: String },
    /// Record a command's end: remove its FIFO, write its exit code whole.
    Ended { base: String, code: i32 },
    /// Copy standard input into a FIFO.
    Feed { path: String },
}

/// Runs `op`; the process's exit code.
pub fn run(op: &Op) -> i32 {
    let done = match op {
        Op::Fifo { path } => nix::unistd::mkfifo(Path::new(path), Mode::from_bits_truncate(0o600))
            .map_err(|e| format!("mkfifo {path}: {e}")),
        Op::Ended { base, code } => ended(base, *code),
        Op::Feed { path } => return feed(path),
    };
    match done {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("sandboxd-agent tool: {message}");
            1
        }
    }
}

fn ended(base: &str, code: i32) -> Result<(), String> {
    let fifo = format!("{base}.in");
    match std::fs::remove_file(&fifo) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("remove {fifo}: {e}")),
    }
    let (aside, exit) = (format!("{base}.exit.tmp"), format!("{base}.exit"));
    std::fs::write(&aside, format!("{code}\n")).map_err(|e| format!("write {aside}: {e}"))?;
    std::fs::rename(&aside, &exit).map_err(|e| format!("rename {aside} to {exit}: {e}"))
}

fn feed(path: &str) -> i32 {
    let is_fifo = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_fifo());
    if !is_fifo {
        return NO_FIFO;
    }
    // No O_CREAT: a FIFO removed since the look above is an error, never a new file.
    let mut fifo = match std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
    {
        Ok(f) => f,
        Err(_) => return NO_FIFO,
    };
    // The agent hands its children the ends of non-blocking pipes: a read that found nothing yet
    // would fail instead of waiting for the rest of the input.
    blocking_stdin();
    // A plain read-and-write loop, not `io::copy`: its splice fails at once once the command has
    // closed the FIFO, even when all there was to give had reached it.
    let mut stdin = std::io::stdin().lock();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match stdin.read(&mut buf) {
            Ok(0) => return 0,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => {
                eprintln!("sandboxd-agent tool: feed {path}: reading the input: {e}");
                return 1;
            }
        };
        match fifo.write_all(&buf[..n]) {
            Ok(()) => {}
            // The command ended before it took this.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return NO_FIFO,
            Err(e) => {
                eprintln!("sandboxd-agent tool: feed {path}: {e}");
                return 1;
            }
        }
    }
}

/// Clears `O_NONBLOCK` on standard input.
fn blocking_stdin() {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let stdin = std::io::stdin();
    if let Ok(flags) = fcntl(&stdin, FcntlArg::F_GETFL) {
        let flags = OFlag::from_bits_truncate(flags);
        if flags.contains(OFlag::O_NONBLOCK) {
            let _ = fcntl(&stdin, FcntlArg::F_SETFL(flags - OFlag::O_NONBLOCK));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_ends_with_its_fifo_gone_and_its_exit_code_whole() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().join("c1").to_str().unwrap().to_string();
        let fifo = format!("{base}.in");
        assert_eq!(run(&Op::Fifo { path: fifo.clone() }), 0);
        assert!(std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo());
        assert_eq!(
            run(&Op::Fifo { path: fifo.clone() }),
            1,
            "it exists already"
        );
        assert_eq!(
            run(&Op::Ended {
                base: base.clone(),
                code: 42
            }),
            0
        );
        assert!(!Path::new(&fifo).exists());
        assert_eq!(
            std::fs::read_to_string(format!("{base}.exit")).unwrap(),
            "42\n"
        );
        assert!(!Path::new(&format!("{base}.exit.tmp")).exists());
        // Again (a retried end): the FIFO is gone already, the code is written again.
        assert_eq!(
            run(&Op::Ended {
                base: base.clone(),
                code: 42
            }),
            0
        );
    }

    #[test]
    fn feeding_what_is_no_fifo_creates_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("gone.in");
        let path = path.to_str().unwrap();
        assert_eq!(run(&Op::Feed { path: path.into() }), NO_FIFO);
        assert!(!Path::new(path).exists());
        let plain = dir.path().join("plain.in");
        std::fs::write(&plain, b"").unwrap();
        assert_eq!(
            run(&Op::Feed {
                path: plain.to_str().unwrap().into()
            }),
            NO_FIFO
        );
    }
}
