//! `sbx shell` (and `sbx exec -t`): a terminal in a sandbox.
//!
//! Contract: when stdin is a terminal it is put in raw mode for the session and restored on every way
//! out, so every key (Ctrl-C included) goes to the sandbox's PTY, and the window size is sent at the
//! start and on every SIGWINCH. From a pipe, nothing is changed locally: the input is typed into the
//! terminal as it comes and its end is a Ctrl-D. The terminal's output is written to stdout as it
//! arrives. sbx exits with the remote exit code (see [`crate::exec::exit_code`]), or 255 when the
//! terminal broke.

use crate::cli::{ExecArgs, ShellArgs};
use crate::error::SbxError;
use nix::sys::termios::{self, SetArg, Termios};
use sandboxd_client::terminal::{TerminalEvent, TerminalOptions};
use sandboxd_client::types::TerminalNotice;
use sandboxd_client::Client;
use std::io::{IsTerminal, Read, Write};
use std::process::ExitCode;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;

/// What a terminal gets when stdin ends in pipe mode: Ctrl-D, end of input on a PTY at the start of
/// a line; after a partial line, the first Ctrl-D only hands that line over.
fn end_of_input(after_newline: bool) -> &'static [u8] {
    if after_newline {
        b"\x04"
    } else {
        b"\x04\x04"
    }
}

/// `sbx exec -t ID CMD…` is `sbx shell ID CMD…`.
pub fn from_exec(args: ExecArgs) -> Result<ShellArgs, SbxError> {
    if !args.env.is_empty() || args.timeout.is_some() {
        return Err(SbxError::Usage(
            "--env and --timeout do not apply with -t (a terminal)".into(),
        ));
    }
    Ok(ShellArgs {
        user: args.user,
        cwd: args.cwd,
        id: args.id,
        cmd: args.cmd,
    })
}

/// Runs the terminal session.
pub async fn run(client: &Client, args: ShellArgs) -> Result<ExitCode, SbxError> {
    let interactive = std::io::stdin().is_terminal();
    let (cols, rows) = window_size().unwrap_or((80, 24));
    let opts = TerminalOptions {
        cmd: args.cmd,
        cols,
        rows,
        user: args.user,
        cwd: args.cwd,
    };
    let (mut writer, mut reader) = client.terminal(&args.id, &opts).await?;
    let _raw = interactive.then(RawMode::enter).transpose()?;
    let mut input = read_stdin();
    let mut winch = signal(SignalKind::window_change()).map_err(SbxError::Terminal)?;
    let mut stdout = std::io::stdout();
    let (mut after_newline, mut stdin_open) = (true, true);
    loop {
        tokio::select! {
            event = reader.next() => match event? {
                TerminalEvent::Output(bytes) => {
                    stdout.write_all(&bytes).and_then(|()| stdout.flush()).map_err(SbxError::Output)?;
                }
                TerminalEvent::Ended(TerminalNotice::Exit { exit_code }) => {
                    return Ok(ExitCode::from(crate::exec::exit_code(exit_code)));
                }
                TerminalEvent::Ended(TerminalNotice::Error { message }) => {
                    return Err(SbxError::TerminalStream(message));
                }
            },
            chunk = input.recv(), if stdin_open => match chunk {
                Some(bytes) => {
                    after_newline = bytes.last() == Some(&b'\n');
                    writer.write(bytes).await?;
                }
                None => {
                    stdin_open = false;
                    if !interactive {
                        writer.write(end_of_input(after_newline)).await?;
                    }
                }
            },
            _ = winch.recv() => {
                if let Some((cols, rows)) = window_size() {
                    writer.resize(cols, rows).await?;
                }
            }
        }
    }
}

/// Reads stdin on a thread of its own (a blocked read must not hold up sbx's exit), chunk by chunk;
/// the channel closes at its end.
fn read_stdin() -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel(16);
    std::thread::spawn(move || {
        let mut stdin = std::io::stdin().lock();
        let mut buf = [0u8; 4096];
        loop {
            match stdin.read(&mut buf) {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if tx.blocking_send(buf[..n].to_vec()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    rx
}

nix::ioctl_read_bad!(tiocgwinsz, libc::TIOCGWINSZ, libc::winsize);

/// The local terminal's size, from stdout or stdin; `None` when neither is a terminal.
fn window_size() -> Option<(u16, u16)> {
    [libc::STDOUT_FILENO, libc::STDIN_FILENO]
        .into_iter()
        .find_map(|fd| {
            let mut ws = libc::winsize {
                ws_row: 0,
                ws_col: 0,
                ws_xpixel: 0,
                ws_ypixel: 0,
            };
            // SAFETY: TIOCGWINSZ writes one `winsize` into the valid struct we pass.
            let ok = unsafe { tiocgwinsz(fd, &mut ws) }.is_ok();
            (ok && ws.ws_col > 0 && ws.ws_row > 0).then_some((ws.ws_col, ws.ws_row))
        })
}

/// Raw mode on stdin for as long as it lives.
struct RawMode(Termios);

impl RawMode {
    fn enter() -> Result<RawMode, SbxError> {
        let stdin = std::io::stdin();
        let saved = termios::tcgetattr(&stdin).map_err(|e| SbxError::Terminal(e.into()))?;
        let mut raw = saved.clone();
        termios::cfmakeraw(&mut raw);
        termios::tcsetattr(&stdin, SetArg::TCSANOW, &raw)
            .map_err(|e| SbxError::Terminal(e.into()))?;
        Ok(RawMode(saved))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(std::io::stdin(), SetArg::TCSANOW, &self.0);
    }
}
