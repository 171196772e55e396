//! The gVisor tier: real `runsc` sandboxes beside namespace ones, behind one [`Tiers`] runtime.

mod common;

use common::gvisor::{count, require_gvisor, start_counting, wait_count_past, TieredFixture};
use common::text;
use sandboxd_runtime::namespace::process::start_time;
use sandboxd_runtime::{Isolation, ResourceLimits, Runtime, RuntimeState};
use sandboxd_test_support::require_root;
use std::os::unix::fs::MetadataExt;

/// Everything a gVisor sandbox runs meets gVisor's kernel, not the host's: its kernel log is
/// gVisor's, and the commands, users and files of the namespace tier work the same behind it.
#[tokio::test]
async fn a_gvisor_sandbox_runs_our_agent_behind_gvisors_kernel() {
    if !require_root() || !require_gvisor() {
        return;
    }
    let tf = TieredFixture::new().await;
    let sb = tf
        .sandbox(Isolation::Gvisor, ResourceLimits::default())
        .await;
    let out = sb
        .sh("dmesg 2>&1 | head -1; id -un; echo $HOME; pwd; hostname")
        .await;
    assert_eq!(out.exit_code, 0, "stderr: {}", text(&out.stderr));
    let lines: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
    assert!(
        lines[0].contains("gVisor"),
        "not gVisor's kernel: {lines:?}"
    );
    assert_eq!(
        lines[1..],
        ["user", "/home/user", "/home/user", sb.info.id()]
    );
    let py = sb.sh("python3 -c 'print(1+1)'").await;
    assert_eq!(text(&py.stdout), "2\n", "stderr: {}", text(&py.stderr));
    let root = sb
        .sh_as(Some("root"), "id -u; cat /proc/self/uid_map")
        .await;
    assert!(
        text(&root.stdout).starts_with("0\n"),
        "{}",
        text(&root.stdout)
    );
    // Writes land in the sandbox's writable layer on the host, owned by the storage range.
    let wrote = sb
        .sh("echo kept > /home/user/note; echo tmp > /tmp/t")
        .await;
    assert_eq!(wrote.exit_code, 0, "stderr: {}", text(&wrote.stderr));
    let layer = tf.tiers.writable_layer(sb.info.id()).await.unwrap();
    let note = layer.path.join("home/user/note");
    assert_eq!(std::fs::read_to_string(&note).unwrap(), "kept\n");
    assert_eq!(
        std::fs::metadata(&note).unwrap().uid(),
        layer.id_base + 1000
    );
    assert!(
        layer.path.join("tmp/t").is_file(),
        "/tmp is on the writable layer"
    );
    tf.tiers.destroy(sb.info.id()).await.unwrap();
}

/// Stop ends every process of the sandbox and keeps its files; start boots it again from them;
/// destroy leaves nothing: no process, no network namespace, no interface, no record.
#[tokio::test]
async fn stop_start_and_destroy_leave_nothing_behind() {
    if !require_root() || !require_gvisor() {
        return;
    }
    let tf = TieredFixture::new().await;
    let mut sb = tf
        .sandbox(Isolation::Gvisor, ResourceLimits::default())
        .await;
    let id = sb.info.id().to_string();
    let first = sb.info.pid.unwrap();
    sb.sh("echo 41 > /home/user/n").await;
    tf.tiers.stop(&id).await.unwrap();
    assert_eq!(
        start_time(first),
        None,
        "the sandbox process is gone (or a zombie)"
    );
    let stopped = tf.tiers.inspect(&id).await.unwrap().unwrap();
    assert_eq!(stopped.state, RuntimeState::Stopped);
    let again = tf.tiers.start(&id).await.unwrap();
    assert_ne!(again.pid, Some(first));
    sb.restarted(again);
    let n = sb.sh("cat /home/user/n").await;
    assert_eq!(text(&n.stdout), "41\n");
    let dir = tf.dir.path().join("runtime/sandboxes").join(&id);
    assert!(dir.join("netns").exists());
    let pid = sb.info.pid.unwrap();
    tf.tiers.destroy(&id).await.unwrap();
    assert!(!dir.exists(), "the sandbox's directory is gone");
    assert_eq!(start_time(pid), None);
    let runsc = std::process::Command::new("pgrep")
        .args(["-f", &format!("runsc.*{id}")])
        .output()
        .unwrap();
    assert!(
        runsc.stdout.is_empty(),
        "runsc processes left: {}",
        text(&runsc.stdout)
    );
    let link = std::process::Command::new("ip")
        .args(["link", "show", &format!("sbh{}", sb.info.net.slot)])
        .output()
        .unwrap();
    assert!(!link.status.success(), "the host interface is gone");
    assert!(tf.tiers.inspect(&id).await.unwrap().is_none());
}

/// The host reaches a server in a gVisor sandbox on the sandbox's own address (gVisor's network
/// stack on its veth end), as the proxy does.
#[tokio::test]
async fn a_server_in_a_gvisor_sandbox_answers_on_its_address() {
    if !require_root() || !require_gvisor() {
        return;
    }
    let tf = TieredFixture::new().await;
    let sb = tf
        .sandbox(Isolation::Gvisor, ResourceLimits::default())
        .await;
    sb.sh("cd /tmp && echo hello > index.html && (python3 -m http.server 8080 >/dev/null 2>&1 &)")
        .await;
    let addr = std::net::SocketAddr::from((sb.info.net.sandbox, 8080));
    let mut stream = common::connect_within(addr, std::time::Duration::from_secs(120)).await;
    use std::io::{Read, Write};
    stream
        .write_all(b"GET /index.html HTTP/1.0\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    assert!(answer.ends_with("hello\n"), "{answer}");
    tf.tiers.destroy(sb.info.id()).await.unwrap();
}

/// One runtime runs both tiers side by side, each call going to the sandbox's own; a tier the
/// host lacks is refused up front, saying how to get it.
#[tokio::test]
async fn both_tiers_run_side_by_side() {
    if !require_root() || !require_gvisor() {
        return;
    }
    let tf = TieredFixture::new().await;
    tf.tiers.offers(Isolation::Namespace).unwrap();
    tf.tiers.offers(Isolation::Gvisor).unwrap();
    let ns = tf
        .sandbox(Isolation::Namespace, ResourceLimits::default())
        .await;
    let gv = tf
        .sandbox(Isolation::Gvisor, ResourceLimits::default())
        .await;
    let kernel = |out: &sandboxd_envd::ExecOutput| text(&out.stdout).contains("gVisor");
    assert!(!kernel(&ns.sh("dmesg 2>&1 | head -1").await));
    assert!(kernel(&gv.sh("dmesg 2>&1 | head -1").await));
    // Pause freezes the gVisor sandbox too, and resume lets it go on.
    tf.tiers.pause(gv.info.id()).await.unwrap();
    tf.tiers.resume(gv.info.id()).await.unwrap();
    assert_eq!(text(&gv.sh("echo back").await.stdout), "back\n");
    let listed: Vec<Isolation> = tf
        .tiers
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.spec.isolation)
        .collect();
    assert_eq!(listed.len(), 2);
    assert!(listed.contains(&Isolation::Gvisor) && listed.contains(&Isolation::Namespace));
    tf.tiers.destroy(ns.info.id()).await.unwrap();
    tf.tiers.destroy(gv.info.id()).await.unwrap();
}

/// Memory past the limit ends the gVisor sandbox (its user-space kernel is one process in the
/// sandbox's cgroup, and the host's OOM killer takes it whole), never the host: the runtime then
/// sees the sandbox stopped, and the sandbox boots again.
#[tokio::test]
async fn a_memory_hog_ends_its_gvisor_sandbox_and_nothing_else() {
    if !require_root() || !require_gvisor() {
        return;
    }
    let tf = TieredFixture::new().await;
    let limits = ResourceLimits {
        memory_mb: 256,
        ..ResourceLimits::default()
    };
    let mut sb = tf.sandbox(Isolation::Gvisor, limits).await;
    let id = sb.info.id().to_string();
    let cmd = [
        "python3".to_string(),
        "-c".to_string(),
        "b = bytearray(1024 * 1024 * 1024); print(len(b))".to_string(),
    ];
    let hog = sb.client.exec(&cmd, Default::default()).await;
    assert!(
        hog.as_ref().map_or(true, |out| out.exit_code != 0),
        "the hog got its gigabyte: {hog:?}"
    );
    common::wait_for(
        "the sandbox to be seen stopped",
        std::time::Duration::from_secs(30),
        || async {
            let seen = tf.tiers.inspect(&id).await.unwrap().unwrap();
            (seen.state == RuntimeState::Stopped).then_some(())
        },
    )
    .await;
    let again = tf.tiers.start(&id).await.unwrap();
    sb.restarted(again);
    assert_eq!(text(&sb.sh("echo back").await.stdout), "back\n");
    tf.tiers.destroy(&id).await.unwrap();
}

/// Pause with memory: a shell counting in memory is checkpointed to disk and its sandbox stops
/// (nothing of it runs, the runtime reports it suspended); a runtime started afresh on the same
/// state directory — a restarted daemon — restores it under the same identity, and the count goes
/// on from where it was, in the same process.
#[tokio::test]
async fn pause_with_memory_survives_a_new_runtime_and_the_count_goes_on() {
    if !require_root() || !require_gvisor() {
        return;
    }
    let tf = TieredFixture::new().await;
    let mut sb = tf
        .sandbox(Isolation::Gvisor, ResourceLimits::default())
        .await;
    let id = sb.info.id().to_string();
    let looper = start_counting(&sb).await;
    wait_count_past(&sb, 4).await;
    let pid = sb.info.pid.unwrap();
    tf.tiers.pause(&id).await.unwrap();
    let before = std::fs::read_to_string(
        tf.tiers
            .writable_layer(&id)
            .await
            .unwrap()
            .path
            .join("tmp/count"),
    )
    .unwrap();
    let before: u64 = before.trim().parse().unwrap();
    assert_eq!(
        start_time(pid),
        None,
        "the paused sandbox's process is gone"
    );
    let seen = tf.tiers.inspect(&id).await.unwrap().unwrap();
    assert_eq!(seen.state, RuntimeState::Suspended);
    // A new runtime on the same state, as a restarted daemon has.
    let again = TieredFixture::reopen(&tf).await;
    assert_eq!(
        again.tiers.inspect(&id).await.unwrap().unwrap().state,
        RuntimeState::Suspended
    );
    again.tiers.resume(&id).await.unwrap();
    let info = again.tiers.inspect(&id).await.unwrap().unwrap();
    assert_eq!(info.state, RuntimeState::Running);
    assert_eq!(info.net, sb.info.net, "same address");
    sb.restarted(info);
    let after = count(&sb).await;
    assert!(
        after >= before,
        "the count restarted: {before} then {after}"
    );
    wait_count_past(&sb, after).await;
    let same = sb.sh(&format!("test -d /proc/{looper} && echo same")).await;
    assert_eq!(text(&same.stdout), "same\n", "the loop is the same process");
    again.tiers.destroy(&id).await.unwrap();
    assert!(!tf.dir.path().join("runtime/checkpoints").join(&id).exists());
}

/// Fork ×3: one live checkpoint, three restores. Each fork is a sandbox of its own (id, address,
/// token) that goes on from the source's state — the same counting process, the source's files, a
/// clone generation of 1 — and diverges on its own; the source keeps running, untouched.
#[tokio::test]
async fn three_forks_go_on_from_the_source_and_diverge() {
    if !require_root() || !require_gvisor() {
        return;
    }
    let tf = TieredFixture::new().await;
    let source = tf
        .sandbox(Isolation::Gvisor, ResourceLimits::default())
        .await;
    let id = source.info.id().to_string();
    source.sh("echo from-source > /home/user/mark").await;
    start_counting(&source).await;
    wait_count_past(&source, 4).await;
    let slots: Vec<_> = (0..3).map(|_| sandboxd_test_support::test_slot()).collect();
    let specs: Vec<_> = slots
        .iter()
        .map(|slot| sandboxd_runtime::SandboxSpec {
            isolation: Isolation::Gvisor,
            ..common::spec(slot.slot, ResourceLimits::default())
        })
        .collect();
    let made = tf.tiers.fork(&id, &specs).await.unwrap();
    assert_eq!(made.len(), 3);
    let mut forks = Vec::new();
    for (made, slot) in made.into_iter().zip(slots) {
        let info = made.unwrap();
        let client = sandboxd_envd::EnvdClient::new(&info.agent.socket, &info.agent.token);
        forks.push(common::Sandbox::new(info, client, slot));
    }
    for (i, fork) in forks.iter().enumerate() {
        assert_ne!(fork.info.net.sandbox, source.info.net.sandbox);
        let seen = fork
            .sh("cat /home/user/mark /run/sandboxd/generation")
            .await;
        assert_eq!(
            text(&seen.stdout),
            "from-source\n1\n",
            "fork {i}: {}",
            text(&seen.stderr)
        );
        // It goes on from the source's number (at least 5), not from 0.
        wait_count_past(fork, 5).await;
        fork.sh(&format!("echo fork-{i} > /home/user/mark")).await;
        // The source's token is not the fork's.
        let old = sandboxd_envd::EnvdClient::new(&fork.info.agent.socket, &source.info.agent.token);
        assert!(old
            .exec(&["true".to_string()], Default::default())
            .await
            .is_err());
    }
    for (i, fork) in forks.iter().enumerate() {
        let mark = fork.sh("cat /home/user/mark").await;
        assert_eq!(
            text(&mark.stdout),
            format!("fork-{i}\n"),
            "forks diverge on their own"
        );
    }
    let mark = source
        .sh("cat /home/user/mark /run/sandboxd/generation")
        .await;
    assert_eq!(
        text(&mark.stdout),
        "from-source\n0\n",
        "the source is untouched"
    );
    let before = count(&source).await;
    wait_count_past(&source, before).await;
    for fork in &forks {
        tf.tiers.destroy(fork.info.id()).await.unwrap();
    }
    tf.tiers.destroy(&id).await.unwrap();
}

/// A namespace sandbox cannot be forked: the answer names the tier that can.
#[tokio::test]
async fn a_namespace_sandbox_refuses_to_fork_naming_the_tier() {
    if !require_root() {
        return;
    }
    let tf = TieredFixture::new().await;
    let sb = tf
        .sandbox(Isolation::Namespace, ResourceLimits::default())
        .await;
    let spec = common::spec(sb.info.net.slot + 1, ResourceLimits::default());
    match tf.tiers.fork(sb.info.id(), &[spec]).await {
        Err(sandboxd_runtime::RuntimeError::Unsupported(why)) => {
            assert!(why.contains("gvisor"), "{why}")
        }
        other => panic!("a namespace fork: {other:?}"),
    }
    tf.tiers.destroy(sb.info.id()).await.unwrap();
}

/// A daemon killed mid-pause or mid-fork leaves an unfinished image, and one killed after a resume
/// may leave the spent image it was removing: the next runtime removes them (nothing was recorded
/// from them) and never touches a whole checkpoint.
#[tokio::test]
async fn unfinished_checkpoint_images_are_removed_at_start() {
    if !require_root() || !require_gvisor() {
        return;
    }
    let tf = TieredFixture::new().await;
    let dir = tf.dir.path().join("runtime/checkpoints");
    for name in ["a.partial", "b.fork-4242", "d.spent-4242-0", "c"] {
        std::fs::create_dir_all(dir.join(name)).unwrap();
        std::fs::write(dir.join(name).join("checkpoint.img"), b"x").unwrap();
    }
    let _again = TieredFixture::reopen(&tf).await;
    assert!(!dir.join("a.partial").exists());
    assert!(!dir.join("b.fork-4242").exists());
    assert!(!dir.join("d.spent-4242-0").exists());
    assert!(
        dir.join("c/checkpoint.img").is_file(),
        "a whole checkpoint stays"
    );
}

/// A daemon killed mid-pause, after the agent closed its door for the checkpoint and before the
/// checkpoint was written, leaves a running sandbox nobody can reach; the next runtime's resume
/// opens the door again, and the same processes answer.
#[tokio::test]
async fn a_resume_reopens_the_door_a_cut_short_checkpoint_closed() {
    if !require_root() || !require_gvisor() {
        return;
    }
    let tf = TieredFixture::new().await;
    let mut sb = tf
        .sandbox(Isolation::Gvisor, ResourceLimits::default())
        .await;
    let id = sb.info.id().to_string();
    let looper = start_counting(&sb).await;
    wait_count_past(&sb, 2).await;
    // What the dying daemon's pause did: ask init to close the door (`runsc kill ID USR2`).
    let state = tf.dir.path().join("runtime/sandboxes").join(&id);
    let asked = std::process::Command::new("runsc")
        .arg(format!("--root={}", state.join("runsc").display()))
        .args(["kill", &id, "USR2"])
        .status()
        .expect("runsc");
    assert!(asked.success());
    let suspended = state.join("shared/suspended");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !suspended.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the door never closed"
        );
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    let cmd = ["/bin/true".to_string()];
    let knock = sb.client.exec(&cmd, Default::default());
    let answered = tokio::time::timeout(std::time::Duration::from_secs(2), knock).await;
    assert!(
        !matches!(answered, Ok(Ok(_))),
        "nothing answers behind a closed door"
    );
    let again = TieredFixture::reopen(&tf).await;
    again.tiers.resume(&id).await.unwrap();
    let info = again.tiers.inspect(&id).await.unwrap().unwrap();
    assert_eq!(info.state, RuntimeState::Running);
    sb.restarted(info);
    let same = sb.sh(&format!("test -d /proc/{looper} && echo same")).await;
    assert_eq!(text(&same.stdout), "same\n", "the loop is the same process");
    again.tiers.destroy(&id).await.unwrap();
}
