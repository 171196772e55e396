//! What the E2B tests add to [`crate::common`]: a [`Daemon`] set up as the E2B SDKs expect it (its
//! token is [`API_KEY`], sent as `X-API-KEY`; sandboxes under the `sandboxd-e2b` cgroup parent), and
//! [`e2b_test`], which runs a test on a two-thread runtime without the e2e time limit. Slots, logs and
//! the cleanup in `Drop` are [`crate::common::Daemon`]'s.

#![allow(dead_code)] // each test file uses a different part

pub mod http;

use crate::common::{run_serially, Auth, Daemon, Setup};
use sandboxd_test_support::workspace_root;
use std::future::Future;
use std::path::Path;
use std::time::Duration;

/// Cgroup parent of these daemons' sandboxes.
pub const CGROUP_PARENT: &str = "sandboxd-e2b";
/// Longest an SDK script may run.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(600);
/// The API key the daemon accepts.
pub const API_KEY: &str = "e2b-test-key-5b1c9e";

/// How an E2B test's daemon is set up.
pub fn setup() -> Setup {
    Setup {
        token: Some(API_KEY.to_string()),
        auth: Auth::ApiKey,
        http_timeout: Duration::from_secs(60),
        cgroup_parent: CGROUP_PARENT,
        ready_timeout: Duration::from_secs(20),
        ..Setup::default()
    }
}

/// Starts a daemon as [`setup`] says and waits until `/health` answers.
pub async fn start() -> Daemon {
    Daemon::start_setup(setup()).await
}

/// [`start`], with `registry` as the daemon's mirror of Docker Hub (so `team/app:v1` is pulled
/// from it).
pub async fn start_with_mirror(registry: &sandboxd_test_support::registry::TestRegistry) -> Daemon {
    Daemon::start_setup(mirror_setup(registry)).await
}

/// [`setup`], with `registry` as the daemon's mirror of Docker Hub.
fn mirror_setup(registry: &sandboxd_test_support::registry::TestRegistry) -> Setup {
    Setup {
        args: vec![format!("--registry-mirror=docker.io={}", registry.url())],
        ..setup()
    }
}

/// [`start_with_mirror`], on a data dir that holds the code interpreter template ready (the build's
/// seed, [`crate::common::code_interpreter_seed`]).
pub async fn start_seeded_with_mirror(
    registry: &sandboxd_test_support::registry::TestRegistry,
) -> Daemon {
    let seed = crate::common::code_interpreter_seed().await;
    Daemon::start_prepared(mirror_setup(registry), |data_dir, _| {
        seed.restore_into(data_dir)
    })
    .await
}

/// Runs one E2B test: serially with the other tests of its binary (two shared cores, and timing
/// assertions that must not measure another test's load), on its own two-thread runtime. Skipped only
/// when root tests are explicitly skipped; without root it panics.
pub fn e2b_test(test: impl Future<Output = ()>) {
    run_serially(
        tokio::runtime::Builder::new_multi_thread().worker_threads(2),
        None,
        || test,
    );
}

/// The Python interpreters of the E2B and the Daytona SDKs (`.venv-e2b`, `.venv-daytona`); panics,
/// saying how to install them, when one is missing.
pub fn python_sdks() -> (std::path::PathBuf, std::path::PathBuf) {
    let e2b = workspace_root().join(".venv-e2b/bin/python");
    let daytona = workspace_root().join(".venv-daytona/bin/python");
    for sdk in [&e2b, &daytona] {
        assert!(
            sdk.exists(),
            "{} is missing: run scripts/e2b-sdks and scripts/daytona-sdks",
            sdk.display()
        );
    }
    (e2b, daytona)
}

/// Runs `program args` in the repository root against `daemon`; panics (with the output) unless it
/// exits 0 and left no sandbox behind. `env` is added to the SDK's environment.
pub async fn run_script(daemon: &Daemon, program: &Path, args: &[&str], env: &[(&str, &str)]) {
    run_script_beside(daemon, program, args, env).await;
    assert_nothing_left(daemon).await;
}

/// The daemon holds no sandbox: the scripts run against it deleted all they made.
pub async fn assert_nothing_left(daemon: &Daemon) {
    let left = daemon.list_all().await;
    assert!(
        left.is_empty(),
        "the scripts left sandboxes behind: {left:?}"
    );
}

/// [`run_script`] for a script that runs beside others against one daemon: it must exit 0; what
/// they left is checked once all are done ([`assert_nothing_left`]).
pub async fn run_script_beside(
    daemon: &Daemon,
    program: &Path,
    args: &[&str],
    env: &[(&str, &str)],
) {
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(args)
        .current_dir(workspace_root())
        .env("E2B_API_URL", daemon.url())
        .env("E2B_SANDBOX_URL", daemon.url())
        // The volume content API is served on the same listener.
        .env("E2B_VOLUME_API_URL", daemon.url())
        .env("E2B_API_KEY", API_KEY)
        .env_remove("E2B_DOMAIN")
        .env_remove("E2B_DEBUG")
        .env_remove("E2B_ACCESS_TOKEN")
        .env("PYTHONUNBUFFERED", "1")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    cmd.envs(env.iter().copied());
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
}

/// `method path` with an optional JSON body: the status and the JSON answer.
pub async fn call(
    d: &Daemon,
    method: reqwest::Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    let mut req = d.http().request(method, d.endpoint(path));
    if let Some(body) = body {
        req = req.json(&body);
    }
    let resp = req.send().await.expect("the daemon answers");
    let status = resp.status().as_u16();
    let text = resp.text().await.expect("a body");
    (
        status,
        serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
    )
}

/// The Python of the Daytona SDK's virtualenv (`scripts/daytona-sdks`); a failure when missing.
pub fn daytona_python() -> std::path::PathBuf {
    let python = workspace_root().join(".venv-daytona/bin/python");
    assert!(
        python.exists(),
        "the Daytona SDK is not installed: run scripts/daytona-sdks"
    );
    python
}

/// A registry serving, under each of `names`, a busybox image holding `/app/hello.txt` ("hello
/// from the image").
pub fn registry_with_app_image(names: &[&str]) -> sandboxd_test_support::registry::TestRegistry {
    let registry = sandboxd_test_support::registry::TestRegistry::start();
    let image = sandboxd_test_support::registry::ImageBuilder::busybox()
        .layer(|root| {
            std::fs::create_dir_all(root.join("app")).unwrap();
            std::fs::write(root.join("app/hello.txt"), "hello from the image\n").unwrap();
        })
        .build();
    for name in names {
        registry.push(&image, name);
    }
    registry
}
