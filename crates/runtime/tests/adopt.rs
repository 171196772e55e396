//! A sandbox outlives the process that made it: a fresh process finds it and runs code in it.

mod common;

use common::{config, spec, text};
use sandboxd_envd::{EnvdClient, ExecOptions};
use sandboxd_runtime::namespace::NamespaceRuntime;
use sandboxd_runtime::{ResourceLimits, Runtime, RuntimeState};
use sandboxd_test_support::{require_root, test_slot};
use std::path::PathBuf;
use std::time::{Duration, Instant};

const HELPER_ENV: &str = "SANDBOXD_ADOPT_HELPER_DIR";

/// Run in a child process by the test below: makes a sandbox, reports its id, then waits to be killed.
#[tokio::test]
#[ignore = "helper process of sandbox_survives_sigkill_of_its_creator_and_is_adopted"]
async fn adopt_helper_creates_a_sandbox_and_waits() {
    let Some(dir) = std::env::var_os(HELPER_ENV).map(PathBuf::from) else {
        return;
    };
    let slot: u32 = std::env::var("SANDBOXD_ADOPT_SLOT")
        .unwrap()
        .parse()
        .unwrap();
    let rt = NamespaceRuntime::new(config(&dir)).await.unwrap();
    let spec = spec(slot, ResourceLimits::default());
    rt.create(&spec).await.unwrap();
    rt.start(&spec.id).await.unwrap();
    // Written beside, then renamed: the test polls for the name and must never read it empty.
    std::fs::write(dir.join("made.partial"), &spec.id).unwrap();
    std::fs::rename(dir.join("made.partial"), dir.join("made")).unwrap();
    tokio::time::sleep(Duration::from_secs(600)).await;
}

#[tokio::test]
async fn sandbox_survives_sigkill_of_its_creator_and_is_adopted() {
    if !require_root() {
        return;
    }
    let dir = tempfile::Builder::new()
        .prefix("sandboxd-adopt-")
        .tempdir()
        .unwrap();
    let _pool = common::PoolMount(dir.path().join("runtime"));
    let slot = test_slot();
    let mut creator = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "adopt_helper_creates_a_sandbox_and_waits",
            "--ignored",
            "--nocapture",
        ])
        .env(HELPER_ENV, dir.path())
        .env("SANDBOXD_ADOPT_SLOT", slot.slot.to_string())
        .spawn()
        .unwrap();
    let made = dir.path().join("made");
    let deadline = Instant::now() + Duration::from_secs(60);
    while !made.exists() {
        assert!(Instant::now() < deadline, "helper never made its sandbox");
        assert!(creator.try_wait().unwrap().is_none(), "helper exited early");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let id = std::fs::read_to_string(&made).unwrap();
    // SIGKILL: no chance to clean up or hand anything over.
    creator.kill().unwrap();
    creator.wait().unwrap();

    let rt = NamespaceRuntime::new(config(dir.path())).await.unwrap();
    let found = rt.list().await.unwrap();
    assert_eq!(found.len(), 1, "{found:?}");
    let info = &found[0];
    assert_eq!(info.id(), id);
    assert_eq!(info.state, RuntimeState::Running);
    let client = EnvdClient::new(&info.agent.socket, &info.agent.token);
    let out = client
        .exec(
            &["python3".into(), "-c".into(), "print(1+1)".into()],
            ExecOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(text(&out.stdout), "2\n");
    rt.destroy(&id).await.unwrap();
    assert!(rt.list().await.unwrap().is_empty());
    assert!(rt.inspect(&id).await.unwrap().is_none());
}
