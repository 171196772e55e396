//! The built-in code interpreter template, built once for all the daemons of a test build that
//! need it ready, instead of once per daemon (a build is about a minute: pip's install, then the
//! commit of a 390 MB layer).
//!
//! Contract: [`code_interpreter_seed`] returns a seed kept in the build's target dir. The first
//! caller (in any test process: a `flock` orders them) makes it in a daemon of its own, through
//! `POST /v1/templates` (the built-in path), then keeps a backup of that data dir with its layers
//! by reference and a copy of those layers beside it; the seed is remade when the `sandboxd` or
//! agent binary changes. [`Seed::restore_into`] puts it into a fresh data dir with `sandboxd
//! restore`, as an operator would, and drops what makes a data dir one daemon's (its id, which names
//! its veths, and its egress gateway's port and CA), which each daemon then makes anew. `code_interpreter.rs` still builds the template on a create's first need, the path a
//! user's first create takes.

use super::{built_within, Daemon, Setup};
use sandboxd_test_support::{agent_binary, target_dir};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

const TEMPLATE: &str = "code-interpreter-v1";
/// How long the seed's build may take.
const BUILD: Duration = Duration::from_secs(600);
/// What makes a restored data dir one daemon's, dropped from each copy.
const IDENTITY: &[&str] = &[
    sandboxd::identity::FILE,
    sandboxd::gateway::PORT_FILE,
    sandboxd::gateway::CA_FILE,
    "egress-ca.key",
    "certs",
];

/// A data dir's backup holding `code-interpreter-v1` ready, with the layers it names.
pub struct Seed {
    dir: PathBuf,
}

fn sandboxd() -> PathBuf {
    env!("CARGO_BIN_EXE_sandboxd").into()
}

/// What the seed was made by: the daemon's and the agent's binaries, by size and time.
fn key() -> String {
    [sandboxd(), agent_binary()]
        .iter()
        .map(|path| {
            let meta =
                std::fs::metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            format!(
                "{} {} {:?}",
                path.display(),
                meta.len(),
                meta.modified().ok()
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `sandboxd SUBCOMMAND --flag path...`, which must succeed.
fn sandboxd_run(subcommand: &str, flags: &[(&str, &Path)]) -> Output {
    let mut cmd = Command::new(sandboxd());
    cmd.arg(subcommand);
    for (flag, path) in flags {
        cmd.arg(flag).arg(path);
    }
    run(&format!("sandboxd {subcommand}"), &mut cmd)
}

fn run(what: &str, cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The seed, made first if this build has none (waiting, meanwhile, for another process making it).
pub async fn code_interpreter_seed() -> Seed {
    let dir = target_dir().join("test-seeds").join(TEMPLATE);
    std::fs::create_dir_all(&dir).expect("create the seed dir");
    let lock = std::fs::File::create(dir.join("lock")).expect("open the seed's lock");
    // SAFETY: flock on a descriptor we own; held until `lock` is dropped at the end.
    let locked = unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) };
    assert_eq!(locked, 0, "flock the seed's lock");
    let seed = Seed { dir };
    let key = key();
    if std::fs::read_to_string(seed.dir.join("key"))
        .ok()
        .as_deref()
        != Some(key.as_str())
    {
        seed.make().await;
        std::fs::write(seed.dir.join("key"), key).expect("write the seed's key");
    }
    drop(lock);
    seed
}

impl Seed {
    fn archive(&self) -> PathBuf {
        self.dir.join("seed.tar")
    }

    fn layers(&self) -> PathBuf {
        self.dir.join("layers")
    }

    async fn make(&self) {
        let _ = std::fs::remove_file(self.dir.join("key"));
        let _ = std::fs::remove_file(self.archive());
        let _ = std::fs::remove_dir_all(self.layers());
        let daemon = Daemon::start_setup(Setup::default()).await;
        let begun = daemon
            .post_json("/v1/templates", &serde_json::json!({ "name": TEMPLATE }))
            .await;
        assert!(
            begun.status().is_success(),
            "building {TEMPLATE}: {}",
            begun.status()
        );
        let template = built_within(&daemon, TEMPLATE, BUILD).await;
        assert_eq!(
            template["state"], "ready",
            "{TEMPLATE} did not build: {template}"
        );
        let data = daemon.data_dir();
        sandboxd_run(
            "backup",
            &[("--to", &self.archive()), ("--data-dir", &data)],
        );
        std::fs::create_dir_all(self.layers().join("runtime")).expect("create the seed's layers");
        for item in ["images", "runtime/templates"] {
            run(
                "cp",
                Command::new("cp")
                    .args(["-a", "--reflink=auto", "--no-target-directory"])
                    .arg(data.join(item))
                    .arg(self.layers().join(item)),
            );
        }
    }

    /// Restores the seed into `data_dir` (empty or absent), less the files of the seed's identity.
    pub fn restore_into(&self, data_dir: &Path) {
        sandboxd_run(
            "restore",
            &[
                ("--from", &self.archive()),
                ("--data-dir", data_dir),
                ("--layers-from", &self.layers()),
            ],
        );
        for item in IDENTITY {
            let path = data_dir.join(item);
            let _ = std::fs::remove_file(&path).or_else(|_| std::fs::remove_dir_all(&path));
        }
    }
}
