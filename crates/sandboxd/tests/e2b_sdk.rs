//! The real, unmodified E2B SDKs against the real daemon: each test starts `sandboxd serve` and runs one
//! acceptance script from `tests/e2b/` with `E2B_API_URL` and `E2B_SANDBOX_URL` pointed at it.
//!
//! - Python, latest `e2b` (`tests/e2b/test_sdk.py`): interpreter from `E2B_PYTHON`, default
//!   `.venv-e2b/bin/python` at the repository root.
//! - JS, `e2b` from npm (`tests/e2b/test_sdk.mjs`): `node`, with the SDK in `tests/e2b/node_modules`.
//! - Python, latest `e2b`, a subset of `test_sdk.py` on the gVisor tier (`E2B_CHECKS`).
//! - Python, latest `e2b`, with a key minted by `POST /v1/api-keys` (`tests/e2b/test_api_key.py`).
//! - Python, latest `e2b`, its whole surface (`tests/e2b/test_surface.py`): every public method of
//!   its classes, found by introspection, works or is refused with the SDK's own error, as the
//!   checked-in tables `tests/e2b/surface/python.md` and (its async classes) `python-async.md` say.
//! - JS, `e2b` from npm, its whole surface (`tests/e2b/test_surface.mjs`, table
//!   `tests/e2b/surface/js.md`).
//! - Python, `e2b==2.20.0` (`tests/e2b/test_sdk_old.py`, the older `POST /sandboxes` create):
//!   interpreter from `E2B_OLD_PYTHON`, default `.venv-e2b-old/bin/python`.
//!
//! A missing SDK fails the test (it is not skipped), saying how to install it.

mod common;
mod e2b_support;

use e2b_support::{e2b_test, run_script};
use sandboxd_test_support::workspace_root;
use std::path::PathBuf;

const PY_INSTALL: &str = "run .ci/run, or: python3 -m venv .venv-e2b && \
    .venv-e2b/bin/pip install e2b pytest requests";
const OLD_PY_INSTALL: &str = "run .ci/run, or: python3 -m venv .venv-e2b-old && \
    .venv-e2b-old/bin/pip install e2b==2.20.0 requests";
const JS_INSTALL: &str = "run .ci/run, or: npm install --prefix tests/e2b e2b";

/// The interpreter named by `env_var`, else `default` under the repository root; panics with `install`
/// unless it exists and can import the SDK.
fn interpreter(env_var: &str, default: &str, install: &str) -> PathBuf {
    let path = std::env::var_os(env_var)
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(default));
    assert!(
        path.exists(),
        "the E2B Python SDK is not installed: {} does not exist ({env_var} unset or wrong). To install it, {install}",
        path.display()
    );
    let probe = std::process::Command::new(&path)
        .args(["-c", "import e2b, requests"])
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", path.display()));
    assert!(
        probe.status.success(),
        "{} cannot import the E2B SDK ({}). To install it, {install}",
        path.display(),
        String::from_utf8_lossy(&probe.stderr).trim()
    );
    path
}

/// The latest Python SDK: create, commands, files, ports, timeouts, listing, pause/resume, kill.
#[test]
fn python_sdk_acceptance() {
    e2b_test(async {
        let python = interpreter("E2B_PYTHON", ".venv-e2b/bin/python", PY_INSTALL);
        let daemon = e2b_support::start().await;
        run_script(&daemon, &python, &["tests/e2b/test_sdk.py"], &[]).await;
    });
}

/// Every public method and property of the latest Python SDK's sandbox, filesystem, commands, pty,
/// git, template, volume and secret classes (found by introspection; one the script does not know
/// fails it) is called under a deadline and either works, its result asserted, or is refused at
/// once with the SDK's own exception naming what is not supported; the regenerated table must equal
/// `tests/e2b/surface/python.md` (`SURFACE_UPDATE=1` rewrites it, else `python.md.new` is written).
/// Then the same for its async classes (`AsyncSandbox`, …), table `python-async.md`.
#[test]
fn python_sdk_surface_matches_its_table() {
    e2b_test(async {
        let python = interpreter("E2B_PYTHON", ".venv-e2b/bin/python", PY_INSTALL);
        let daemon = e2b_support::start().await;
        run_script(&daemon, &python, &["tests/e2b/test_surface.py"], &[]).await;
        run_script(
            &daemon,
            &python,
            &["tests/e2b/test_surface.py", "async"],
            &[],
        )
        .await;
    });
}

/// A representative subset of the Python acceptance list on the gVisor tier (a daemon whose
/// creates default to it): create, commands, files, a server reached through the daemon, and pause
/// and resume keeping a process (a checkpoint to disk and a restore, on this tier), a pause to the
/// files only, and fork ×3.
#[test]
fn python_sdk_on_the_gvisor_tier() {
    e2b_test(async {
        let python = interpreter("E2B_PYTHON", ".venv-e2b/bin/python", PY_INSTALL);
        let mut setup = e2b_support::setup();
        setup.args = vec!["--default-isolation=gvisor".to_string()];
        let daemon = common::Daemon::start_setup(setup).await;
        let checks = [
            "test_create_with_metadata_and_envs",
            "test_commands_run_foreground",
            "test_files",
            "test_get_host_reaches_a_server_in_the_sandbox",
            "test_pause_and_resume_keep_processes",
            "test_filesystem_pause_reboots_from_files",
            "test_fork",
        ]
        .join(",");
        run_script(
            &daemon,
            &python,
            &["tests/e2b/test_sdk.py"],
            &[("E2B_CHECKS", &checks), ("E2B_TIER", "gvisor")],
        )
        .await;
    });
}

/// The latest Python SDK takes a key minted by `POST /v1/api-keys` (a user key, `e2b_` + 40 hex
/// digits) as `E2B_API_KEY`, and is refused on its next call once the key is revoked
/// (`tests/e2b/test_api_key.py`).
#[test]
fn python_sdk_with_a_minted_key() {
    e2b_test(async {
        let python = interpreter("E2B_PYTHON", ".venv-e2b/bin/python", PY_INSTALL);
        let daemon = e2b_support::start().await;
        let (key, id) = daemon.mint_key("sdk", "user").await;
        let (key, id) = (key.as_str(), id.as_str());
        run_script(
            &daemon,
            &python,
            &["tests/e2b/test_api_key.py"],
            &[
                ("E2B_API_KEY", key),
                ("SBX_ADMIN_KEY", e2b_support::API_KEY),
                ("SBX_KEY_ID", id),
            ],
        )
        .await;
    });
}

/// The node that runs the JS SDK's scripts (`E2B_NODE`, or `node`); panics, saying how to install
/// the SDK, when it is missing.
fn js_sdk_node() -> PathBuf {
    let sdk = workspace_root().join("tests/e2b/node_modules/e2b/package.json");
    assert!(
        sdk.is_file(),
        "the E2B JS SDK is not installed ({} is missing). To install it, {JS_INSTALL}",
        sdk.display()
    );
    std::env::var_os("E2B_NODE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("node"))
}

/// The JS SDK, through the same list as the Python one (`tests/e2b/test_sdk.mjs`).
#[test]
fn js_sdk_acceptance() {
    e2b_test(async {
        let node = js_sdk_node();
        let daemon = e2b_support::start().await;
        run_script(&daemon, &node, &["tests/e2b/test_sdk.mjs"], &[]).await;
    });
}

/// Every public method of the JS SDK's classes (static and prototype, less what its type
/// declarations mark private; the unexported ones reached through a sandbox's objects) works or is
/// refused at once with the SDK's own error, as `tests/e2b/surface/js.md` says.
#[test]
fn js_sdk_surface_matches_its_table() {
    e2b_test(async {
        let node = js_sdk_node();
        let daemon = e2b_support::start().await;
        run_script(&daemon, &node, &["tests/e2b/test_surface.mjs"], &[]).await;
    });
}

/// The older Python SDK (2.20.0) creates through `POST /sandboxes`, runs a command, and drives envd
/// through a `connect`ed instance (routed by its access token alone).
#[test]
fn old_python_sdk_creates_and_runs_a_command() {
    e2b_test(async {
        let python = interpreter("E2B_OLD_PYTHON", ".venv-e2b-old/bin/python", OLD_PY_INSTALL);
        let version = std::process::Command::new(&python)
            .args([
                "-c",
                "from importlib.metadata import version; print(version('e2b'))",
            ])
            .output()
            .expect("query the SDK version");
        assert_eq!(
            String::from_utf8_lossy(&version.stdout).trim(),
            "2.20.0",
            "{} must have e2b==2.20.0. To install it, {OLD_PY_INSTALL}",
            python.display()
        );
        let daemon = e2b_support::start().await;
        run_script(&daemon, &python, &["tests/e2b/test_sdk_old.py"], &[]).await;
    });
}
