//! The OpenAPI document tells the truth: schemathesis (`--checks all`) generates requests from
//! `/v1/openapi.json` and checks a real daemon's answers against it — every status declared, every
//! schema-valid request accepted and every invalid one refused, every body in its declared shape, no
//! 5xx for a client's mistake. Operations that create sandboxes really create them (the fixture's
//! teardown deletes them all).
//!
//! The daemon reaches nothing outside this host: what it sends itself (image pulls from the registries
//! generated references name, webhook deliveries to generated URLs) goes to an HTTP proxy on a closed
//! loopback port, so a pull is a 502 `registry_unavailable` and a delivery fails, as they do offline.
//!
//! The CLI is `SCHEMATHESIS`, default `.venv-schemathesis/bin/schemathesis` at the repository root
//! (`scripts/schemathesis` installs it, pinned); a missing one fails the test, saying how to install
//! it. What the run leaves out and why is in `tests/openapi/schemathesis.toml`.
//!
//! The built-in template `code-interpreter-v1` is ready before the run (restored from the build's
//! seed, [`common::code_interpreter_seed`], itself built through `POST /v1/templates`): a create
//! naming it would wait for its build (a pip install, a minute or more), longer than the fuzzer's
//! request timeout, and the fuzzer does name it (a run of this seed did). Built, a create of it is
//! an ordinary create.

mod common;

use common::{code_interpreter_seed, run_serially, Daemon, Setup};
use sandboxd_test_support::workspace_root;
use std::net::TcpListener;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const INSTALL: &str = "run scripts/schemathesis (or .ci/run)";
/// Examples per operation and phase: enough to reach every declared answer, few enough that the run
/// (which creates real sandboxes) takes a minute or two on two cores.
const MAX_EXAMPLES: &str = "20";
/// The seed of every run, so a failure reproduces.
const SEED: &str = "20261201";
/// Longest the whole test may take.
const TIMEOUT: Duration = Duration::from_secs(900);

fn schemathesis() -> PathBuf {
    let path = std::env::var_os("SCHEMATHESIS")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace_root().join(".venv-schemathesis/bin/schemathesis"));
    assert!(
        path.exists(),
        "schemathesis is not installed: {} does not exist (SCHEMATHESIS unset or wrong). To install it, {INSTALL}",
        path.display()
    );
    path
}

/// A loopback address nothing listens on (a connection to it is refused at once).
fn closed_loopback_port() -> std::net::SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free loopback port")
}

/// A schemathesis run over every `/v1` operation finds nothing.
#[test]
fn the_openapi_document_matches_what_the_daemon_does() {
    run_serially(
        &mut tokio::runtime::Builder::new_current_thread(),
        Some(TIMEOUT),
        || async {
            let cli = schemathesis();
            let nowhere = format!("http://{}", closed_loopback_port());
            let seed = code_interpreter_seed().await;
            let setup = Setup {
                env: vec![
                    ("HTTP_PROXY".into(), nowhere.clone()),
                    ("HTTPS_PROXY".into(), nowhere),
                ],
                ..Setup::default()
            };
            let daemon =
                Daemon::start_prepared(setup, |data_dir, _| seed.restore_into(data_dir)).await;
            let work = tempfile::tempdir().expect("tempdir");
            let started = Instant::now();
            let output = tokio::process::Command::new(&cli)
                .arg("--config-file")
                .arg(workspace_root().join("tests/openapi/schemathesis.toml"))
                .arg("--no-color")
                .arg("run")
                .arg(daemon.endpoint("/v1/openapi.json"))
                .args([
                    "--header",
                    &format!("Authorization: Bearer {}", daemon.token()),
                ])
                .args(["--checks", "all"])
                .args(["--seed", SEED, "--max-examples", MAX_EXAMPLES])
                .args([
                    "--workers",
                    "1",
                    "--request-timeout",
                    "60",
                    "--max-response-time",
                    "60",
                ])
                .args(["--generation-database", "none"])
                .current_dir(work.path())
                .output()
                .await
                .unwrap_or_else(|e| panic!("cannot run {}: {e}", cli.display()));
            let text = format!(
                "{}{}",
                String::from_utf8_lossy(&output.stdout),
                String::from_utf8_lossy(&output.stderr)
            );
            assert!(
                output.status.success(),
                "schemathesis failed ({}) after {:?}:\n{text}",
                output.status,
                started.elapsed()
            );
            let summary = text.lines().skip_while(|l| !l.contains("SUMMARY"));
            eprintln!(
                "schemathesis passed in {:?}:\n{}",
                started.elapsed(),
                summary.collect::<Vec<_>>().join("\n")
            );
        },
    );
}
