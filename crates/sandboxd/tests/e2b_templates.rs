//! E2B templates and snapshots through the real, unmodified SDKs against the real daemon: each test
//! starts `sandboxd serve` and runs one script: `tests/e2b/test_templates.py` (interpreter from
//! `E2B_PYTHON`, default `.venv-e2b/bin/python`) or `tests/e2b/test_templates.mjs` (`node`, the SDK
//! in `tests/e2b/node_modules`); `scripts/e2b-sdks` installs both.
//!
//! What the Python script proves, each through the SDK's own calls:
//! - `Template().from_template("base").copy(dir).copy(file, mode=0o755).run_cmd(.., user="root")
//!   .run_cmd(..).set_envs(..)` built with `Template.build` (its file uploads through the signed
//!   URL, the build log followed to the end) makes sandboxes (`Sandbox.create(alias)`) that hold
//!   the copied files and RUN's output, run steps as `user` unless told, and carry the ENV values
//!   verbatim; a second build of the same files skips the upload (`present`); `Template.exists`.
//! - a build whose RUN fails raises `BuildException` naming the E2B step and the exit code;
//!   building a ready name again is refused.
//! - `create_snapshot()` (generated name) and `create_snapshot(name)`, `Sandbox.create(snapshot)`
//!   sees a file written before; `mode="full"` is refused; `list_snapshots` (by sandbox, by name,
//!   paged by `x-next-token`); `delete_snapshot` is refused while a sandbox uses it, then `True`,
//!   then `False`; a snapshot of an unknown sandbox is `SandboxNotFoundException`.

mod common;
mod e2b_support;

use common::Daemon;
use e2b_support::{e2b_test, API_KEY};
use sandboxd_test_support::workspace_root;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Longest the script may run.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(600);

fn python() -> PathBuf {
    let path = std::env::var_os("E2B_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".venv-e2b/bin/python"));
    assert!(
        path.exists(),
        "the E2B Python SDK is not installed ({} is missing): run scripts/e2b-sdks",
        path.display()
    );
    path
}

/// Runs `program args` in the repository root against `daemon`; panics (with the output) unless it
/// exits 0 and left no sandbox behind.
async fn run_script(daemon: &Daemon, program: &Path, args: &[&str]) {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .current_dir(workspace_root())
        .env("E2B_API_URL", daemon.url())
        .env("E2B_SANDBOX_URL", daemon.url())
        .env("E2B_API_KEY", API_KEY)
        .env_remove("E2B_DOMAIN")
        .env_remove("E2B_DEBUG")
        .env_remove("E2B_ACCESS_TOKEN")
        .env("PYTHONUNBUFFERED", "1")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(SCRIPT_TIMEOUT, cmd.output())
        .await
        .unwrap_or_else(|_| {
            panic!(
                "{} {args:?} ran longer than {SCRIPT_TIMEOUT:?}",
                program.display()
            )
        })
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", program.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    println!("{stdout}");
    assert!(
        output.status.success(),
        "{} {args:?} exited {:?}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}\n--- daemon ---\n{}",
        program.display(),
        output.status.code(),
        daemon.log_tail(60)
    );
    let left = daemon.list_all().await;
    assert!(
        left.is_empty(),
        "the script left sandboxes behind: {left:?}"
    );
}

/// The Python SDK: template builds with uploads, failures, snapshots (see the module doc).
#[test]
fn python_sdk_builds_templates_and_snapshots_sandboxes() {
    e2b_test(async {
        let python = python();
        let daemon = e2b_support::start().await;
        run_script(&daemon, &python, &["tests/e2b/test_templates.py"]).await;
    });
}

/// The JS SDK (`tests/e2b/test_templates.mjs`): `createSnapshot` → `Sandbox.create(snapshotId)` sees
/// a file written before, `listSnapshots`, `deleteSnapshot` (`true`, then `false`); and a
/// `Template.build` with a COPY upload and a RUN as root.
#[test]
fn js_sdk_snapshots_and_builds_templates() {
    e2b_test(async {
        let sdk = workspace_root().join("tests/e2b/node_modules/e2b/package.json");
        assert!(
            sdk.is_file(),
            "the E2B JS SDK is not installed ({} is missing): run scripts/e2b-sdks",
            sdk.display()
        );
        let node = std::env::var_os("E2B_NODE")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("node"));
        let daemon = e2b_support::start().await;
        run_script(&daemon, &node, &["tests/e2b/test_templates.mjs"]).await;
    });
}
