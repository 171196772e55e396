//! Isolation of sandboxes, one property per test: each runs on the namespace tier, and the ones the
//! gVisor tier shares run behind gVisor's kernel too (`…_in_gvisor`).

mod common;

use common::gvisor::{require_gvisor, TieredFixture};
use common::{connect_within, text, wait_for};
use sandboxd_runtime::{Isolation, ResourceLimits, Runtime};
use sandboxd_test_support::require_root;
use std::time::{Duration, Instant};

/// A test of `check` on the namespace tier named `$namespace`, and one on the gVisor tier named
/// `$gvisor` when given.
macro_rules! tiers {
    ($check:ident: $namespace:ident $(, $gvisor:ident)?) => {
        #[tokio::test]
        async fn $namespace() {
            if require_root() {
                $check(Isolation::Namespace).await
            }
        }
        $(
            #[tokio::test]
            async fn $gvisor() {
                if require_root() && require_gvisor() {
                    $check(Isolation::Gvisor).await
                }
            }
        )?
    };
}

tiers!(private_directories: host_private_directories_are_invisible, host_private_directories_are_invisible_in_gvisor);
tiers!(read_only_usr: usr_is_read_only_even_for_root, usr_is_read_only_even_for_root_in_gvisor);
tiers!(unreadable_shadow: etc_shadow_is_unreadable, etc_shadow_is_unreadable_in_gvisor);
tiers!(own_processes: only_the_sandbox_processes_are_visible, only_the_sandbox_processes_are_visible_in_gvisor);
tiers!(unreachable_host: host_services_are_unreachable, host_services_are_unreachable_in_gvisor);
tiers!(tracing: a_process_can_trace_its_child, a_process_can_trace_its_child_in_gvisor);
tiers!(memory_hog: memory_hog_is_oom_killed_and_init_survives);
tiers!(small_init: pid_one_restarts_small_and_still_reaps_and_forwards_signals);
tiers!(dev_and_run: dev_and_run_are_one_tmpfs_each_mounted_with_its_own_flags);
tiers!(fork_bomb: fork_bomb_hits_the_pids_limit_and_the_host_stays_responsive);
tiers!(two_sandboxes: two_sandboxes_see_neither_files_nor_processes_of_each_other, two_sandboxes_see_neither_files_nor_processes_of_each_other_in_gvisor);
tiers!(wrong_token: agent_refuses_calls_without_the_right_token, agent_refuses_calls_without_the_right_token_in_gvisor);
tiers!(own_group: the_sandbox_is_in_its_own_cgroup_in_every_hierarchy, the_sandbox_is_in_its_own_cgroup_in_every_hierarchy_in_gvisor);

/// The agent's command line and its name in `/proc/1/comm` on `tier`: the namespace tier runs the
/// host's binary, gVisor the bound copy at `/.sandboxd/agent`.
fn agent_names(tier: Isolation) -> (&'static str, &'static str) {
    match tier {
        Isolation::Namespace => ("sandboxd-agent", "sandboxd-agent"),
        Isolation::Gvisor => ("/.sandboxd/agent", "agent"),
    }
}

async fn private_directories(tier: Isolation) {
    let fx = TieredFixture::new().await;
    let sb = fx.sandbox(tier, ResourceLimits::default()).await;
    let data_dir = fx.dir.path().display().to_string();
    let script = format!(
        "for p in /work /srv/host-marker {data_dir} /root/.cargo /root/.bashrc /home/admin; do \
           test -e $p && echo visible $p; done; ls -A /home; ls -A /root | wc -l; \
           test -e /.sandboxd/agent && echo agent-bound"
    );
    let out = sb.sh_as(Some("root"), &script).await;
    assert_eq!(
        text(&out.stdout),
        "user\n0\nagent-bound\n",
        "stderr: {}",
        text(&out.stderr)
    );
    fx.tiers.destroy(sb.info.id()).await.unwrap();
}

async fn read_only_usr(tier: Isolation) {
    let fx = TieredFixture::new().await;
    let sb = fx.sandbox(tier, ResourceLimits::default()).await;
    let out = sb.sh_as(Some("root"), "touch /usr/sandboxd-probe").await;
    assert_ne!(out.exit_code, 0);
    assert!(
        text(&out.stderr).contains("Read-only file system"),
        "{}",
        text(&out.stderr)
    );
    assert!(!std::path::Path::new("/usr/sandboxd-probe").exists());
    // The writable places are writable.
    let ok = sb.sh("touch /tmp/a /home/user/b && echo ok").await;
    assert_eq!(text(&ok.stdout), "ok\n", "{}", text(&ok.stderr));
    fx.tiers.destroy(sb.info.id()).await.unwrap();
}

async fn unreadable_shadow(tier: Isolation) {
    let fx = TieredFixture::new().await;
    let sb = fx.sandbox(tier, ResourceLimits::default()).await;
    for user in [None, Some("root")] {
        let out = sb.sh_as(user, "cat /etc/shadow").await;
        assert_ne!(
            out.exit_code,
            0,
            "{user:?} read /etc/shadow: {}",
            text(&out.stdout)
        );
        assert!(text(&out.stderr).contains("Permission denied"));
    }
    fx.tiers.destroy(sb.info.id()).await.unwrap();
}

async fn own_processes(tier: Isolation) {
    let fx = TieredFixture::new().await;
    let sb = fx.sandbox(tier, ResourceLimits::default()).await;
    let out = sb
        .sh_as(
            Some("root"),
            "for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done",
        )
        .await;
    let procs = text(&out.stdout);
    let lines: Vec<&str> = procs.lines().filter(|l| !l.is_empty()).collect();
    // init, the agent server, the shell and the loop's children: nothing from the host.
    assert!(lines.len() <= 6, "{lines:?}");
    let (cmdline, comm) = agent_names(tier);
    assert!(
        lines
            .iter()
            .all(|l| l.contains(cmdline) || l.starts_with("/bin/sh") || l.starts_with("tr")),
        "{lines:?}"
    );
    let pid1 = sb.sh("cat /proc/1/comm").await;
    assert_eq!(text(&pid1.stdout), format!("{comm}\n"));
    fx.tiers.destroy(sb.info.id()).await.unwrap();
}

/// The host's services are not the sandbox's to reach: neither on the host's loopback nor through the
/// host end of the sandbox's own pair (the rest is in `egress.rs`).
async fn unreachable_host(tier: Isolation) {
    let fx = TieredFixture::new().await;
    let sb = fx.sandbox(tier, ResourceLimits::default()).await;
    let everywhere = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = everywhere.local_addr().unwrap().port();
    let probe = |host: String, port: u16| {
        format!(
            "python3 -c \"import socket,sys\ns=socket.socket(); s.settimeout(2)\n\
             try:\n  s.connect(('{host}', {port})); print('open')\nexcept Exception as e: print('closed')\""
        )
    };
    let lo = sb.sh(&probe("127.0.0.1".into(), port)).await;
    assert_eq!(text(&lo.stdout), "closed\n", "{}", text(&lo.stderr));
    let via_pair = sb.sh(&probe(sb.info.net.host.to_string(), port)).await;
    assert_eq!(text(&via_pair.stdout), "closed\n");
    // Control: the pair itself works — the host reaches a server inside the sandbox, so the refusals
    // above are isolation, not a broken network. (The server takes a moment to listen: up to a
    // second on an emulated machine.)
    sb.sh("nohup python3 -m http.server 8081 >/dev/null 2>&1 &")
        .await;
    connect_within((sb.info.net.sandbox, 8081).into(), Duration::from_secs(120)).await;
    drop(everywhere);
    fx.tiers.destroy(sb.info.id()).await.unwrap();
}

/// Forks a child that asks to be traced and stops; continues it; prints `traced <its exit code>`,
/// or `refused …` when the child could not be traced.
const TRACE_CHILD: &str = r#"
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
pid = os.fork()
if pid == 0:
    if libc.ptrace(0, 0, 0, 0) != 0:
        os._exit(3)
    os.kill(os.getpid(), signal.SIGSTOP)
    os._exit(7)
_, st = os.waitpid(pid, 0)
if os.WIFSTOPPED(st):
    libc.ptrace(7, pid, 0, 0)
    _, st = os.waitpid(pid, 0)
    print("traced", os.WEXITSTATUS(st))
else:
    print("refused", os.WEXITSTATUS(st))
"#;

/// A process may trace its own child (debuggers, `strace`): `PTRACE_TRACEME`, a stop, a continue.
/// With the host's `strace`, tracing a whole command works too.
async fn tracing(tier: Isolation) {
    let fx = TieredFixture::new().await;
    let sb = fx.sandbox(tier, ResourceLimits::default()).await;
    let traced = sb.sh(&format!("python3 -c '{TRACE_CHILD}'")).await;
    assert_eq!(
        text(&traced.stdout),
        "traced 7\n",
        "{}",
        text(&traced.stderr)
    );
    if std::path::Path::new("/usr/bin/strace").exists() {
        let out = sb
            .sh("strace -o /tmp/trace -e trace=write echo hi >/dev/null && cat /tmp/trace")
            .await;
        let out = text(&out.stdout);
        assert!(out.contains("write(1, \"hi\\n\", 3)"), "{out}");
    }
    fx.tiers.destroy(sb.info.id()).await.unwrap();
}

async fn memory_hog(tier: Isolation) {
    let fx = TieredFixture::new().await;
    let sb = fx
        .sandbox(
            tier,
            ResourceLimits {
                memory_mb: 64,
                ..Default::default()
            },
        )
        .await;
    let hog = sb
        .sh("python3 -c 'b = bytearray(256 * 1024 * 1024); print(len(b))'")
        .await;
    assert_ne!(hog.exit_code, 0, "the hog survived: {}", text(&hog.stdout));
    assert!(
        hog.end.status.contains("kill") || hog.exit_code == 137 || hog.exit_code == -1,
        "{:?}",
        hog.end
    );
    let after = sb.sh("echo alive; cat /proc/1/comm").await;
    assert_eq!(text(&after.stdout), "alive\nsandboxd-agent\n");
    fx.tiers.destroy(sb.info.id()).await.unwrap();
}

async fn fork_bomb(tier: Isolation) {
    let fx = TieredFixture::new().await;
    let sb = fx
        .sandbox(
            tier,
            ResourceLimits {
                pids_max: 64,
                ..Default::default()
            },
        )
        .await;
    // A counted bomb first, reporting where fork stopped working (its children then exit, so the
    // counter never races the classic bomb below for the last free pids).
    let counter = "python3 -c \"import os,signal\nn=0\nkids=[]\ntry:\n  while True:\n    pid=os.fork()\n    if pid==0:\n      signal.pause(); os._exit(0)\n    kids.append(pid); n+=1\nexcept OSError as e: print(n, e.errno)\nfor k in kids: os.kill(k, signal.SIGKILL)\nfor k in kids: os.waitpid(k, 0)\"";
    let bomb = sb.sh(counter).await;
    let report = text(&bomb.stdout);
    let mut parts = report.split_whitespace();
    let forks: u64 = parts
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX);
    assert!(
        forks < 64,
        "forked {forks} times under pids.max=64: {report}"
    );
    assert_eq!(
        parts.next(),
        Some("11"),
        "fork should fail with EAGAIN: {report}"
    );
    // Then a bomb left pressing against the limit while the host is timed: a loop that never stops
    // forking (the classic `bomb | bomb &` can die out at the limit, each process exiting when its
    // fork fails, and leave nothing to press).
    sb.sh("(while :; do sleep 1000 & done) >/dev/null 2>&1 &")
        .await;
    wait_for(
        "the bomb pressing against pids.max",
        Duration::from_secs(30),
        || async {
            let stats = fx.tiers.stats(sb.info.id()).await.expect("stats");
            (stats.pids_current >= 56).then_some(())
        },
    )
    .await;
    let started = Instant::now();
    let host = std::process::Command::new("true").status().unwrap();
    assert!(host.success());
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "host took {:?} to run true",
        started.elapsed()
    );
    fx.tiers.destroy(sb.info.id()).await.unwrap();
    assert!(fx
        .tiers
        .namespace()
        .cgroups()
        .list()
        .unwrap()
        .iter()
        .all(|id| id != sb.info.id()));
}

async fn two_sandboxes(tier: Isolation) {
    let fx = TieredFixture::new().await;
    let a = fx.sandbox(tier, ResourceLimits::default()).await;
    let b = fx.sandbox(tier, ResourceLimits::default()).await;
    let marker = format!("marker-{}", a.info.id());
    let wrote = a
        .sh(&format!("echo secret > /tmp/{marker}; echo secret > /home/user/{marker}; sleep 300 >/dev/null 2>&1 & echo ok"))
        .await;
    assert_eq!(text(&wrote.stdout), "ok\n");
    let sleepers = "cat /proc/[0-9]*/comm 2>/dev/null | grep -c '^sleep$'";
    let seen_in_a = a.sh(&format!("ls /tmp/{marker}; {sleepers}")).await;
    assert_eq!(
        text(&seen_in_a.stdout),
        format!("/tmp/{marker}\n1\n"),
        "control: A sees its own"
    );
    let seen_in_b = b
        .sh_as(
            Some("root"),
            &format!("ls /tmp/{marker} /home/user/{marker} 2>/dev/null; {sleepers}"),
        )
        .await;
    assert_eq!(
        text(&seen_in_b.stdout),
        "0\n",
        "B sees A's files or processes"
    );
    fx.tiers.destroy(a.info.id()).await.unwrap();
    fx.tiers.destroy(b.info.id()).await.unwrap();
}

async fn wrong_token(tier: Isolation) {
    let fx = TieredFixture::new().await;
    let sb = fx.sandbox(tier, ResourceLimits::default()).await;
    let wrong = sandboxd_envd::EnvdClient::new(&sb.info.agent.socket, "not-the-token");
    let cmd = ["true".to_string()];
    let refused = wrong.exec(&cmd, Default::default()).await;
    assert!(refused.is_err(), "exec with a wrong token succeeded");
    assert!(refused
        .unwrap_err()
        .to_string()
        .to_lowercase()
        .contains("unauth"));
    assert!(wrong.stat("/").await.is_err());
    let empty = sandboxd_envd::EnvdClient::new(&sb.info.agent.socket, "");
    assert!(empty.exec(&cmd, Default::default()).await.is_err());
    // Control: the right token works.
    assert_eq!(sb.sh("true").await.exit_code, 0);
    fx.tiers.destroy(sb.info.id()).await.unwrap();
}

/// A sandbox's first process joins its group itself before it runs anything (born in it on v2, its
/// own thread moved through `tasks` on v1): it is in the sandbox's group in every hierarchy the
/// runtime limits with.
async fn own_group(tier: Isolation) {
    let fx = TieredFixture::new().await;
    let sb = fx.sandbox(tier, ResourceLimits::default()).await;
    let pid = sb.info.pid.expect("a running sandbox has a pid");
    let ours = format!("/{}/{}", common::CGROUP_PARENT, sb.info.id());
    let listed = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap();
    let v2 = std::fs::read_to_string("/sys/fs/cgroup/cgroup.controllers")
        .is_ok_and(|c| c.split_whitespace().any(|c| c == "memory"));
    let limited = ["memory", "pids", "cpu", "freezer"];
    let mut checked = 0;
    for line in listed.lines() {
        let mut fields = line.splitn(3, ':');
        let (_, controllers, path) = (fields.next(), fields.next(), fields.next());
        let (controllers, path) = (controllers.unwrap_or_default(), path.unwrap_or_default());
        let ours_to_check = match v2 {
            true => controllers.is_empty(),
            false => controllers.split(',').any(|c| limited.contains(&c)),
        };
        if ours_to_check {
            assert_eq!(path, ours, "{line} in\n{listed}");
            checked += 1;
        }
    }
    assert!(checked >= if v2 { 1 } else { 3 }, "{listed}");
    fx.tiers.destroy(sb.info.id()).await.unwrap();
}

/// Invariant (`sandboxd_agent::init`): after the boot, a namespace sandbox's PID 1 re-executes
/// itself small, keeping its pid and its name, and goes on as the sandbox's init: an orphan is
/// re-parented to it and reaped when it ends, and a SIGTERM sent to it reaches the agent, whose
/// exit ends the sandbox.
async fn small_init(tier: Isolation) {
    let fx = TieredFixture::new().await;
    let sb = fx.sandbox(tier, ResourceLimits::default()).await;
    // Every name PID 1 shows from now until 50 ms after its restart, read as fast as bash can: the
    // restart re-executes it under its own name, so no other one is ever seen.
    let watch = sb
        .sh(r#"exec bash -c '
            seen=" "; until=$(( ${EPOCHREALTIME/./} + 10000000 )); restarted=
            while (( ${EPOCHREALTIME/./} < until )); do
                read -r name < /proc/1/comm
                [[ $seen == *" $name "* ]] || seen="$seen$name "
                if [[ -z $restarted ]]; then
                    mapfile -d "" argv < /proc/1/cmdline
                    [[ ${argv[1]} == supervise ]] && restarted=1 until=$(( ${EPOCHREALTIME/./} + 50000 ))
                fi
            done
            echo "${restarted:-never restarted}:$seen"'"#)
        .await;
    assert_eq!(
        text(&watch.stdout),
        "1: sandboxd-agent \n",
        "stderr: {}",
        text(&watch.stderr)
    );
    let cmdline = wait_for("PID 1 restarted small", Duration::from_secs(10), || async {
        let line = text(&sb.sh("tr '\\0' ' ' < /proc/1/cmdline").await.stdout);
        line.contains("supervise").then_some(line)
    })
    .await;
    assert!(
        cmdline.starts_with("sandboxd-agent supervise "),
        "{cmdline}"
    );
    let status = text(
        &sb.sh("cat /proc/1/comm; grep RssAnon /proc/1/status")
            .await
            .stdout,
    );
    let mut lines = status.lines();
    assert_eq!(lines.next(), Some("sandboxd-agent"), "{status}");
    let anon_kib: u64 = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX);
    // The boot's image held about 160 KiB here; a fresh one, about 64.
    assert!(anon_kib <= 128, "PID 1 holds {anon_kib} KiB: {status}");

    let orphan = text(
        &sb.sh("sh -c 'sleep 1 >/dev/null 2>&1 & echo $!'")
            .await
            .stdout,
    );
    let orphan = orphan.trim().to_string();
    assert!(orphan.parse::<u32>().is_ok(), "{orphan:?}");
    let parent = text(
        &sb.sh(&format!("awk '/^PPid/ {{print $2}}' /proc/{orphan}/status"))
            .await
            .stdout,
    );
    assert_eq!(
        parent, "1\n",
        "the orphan {orphan} was not re-parented to PID 1"
    );
    wait_for("the orphan reaped", Duration::from_secs(10), || async {
        let out = sb
            .sh(&format!(
                "test -e /proc/{orphan} && echo there || echo gone"
            ))
            .await;
        (text(&out.stdout) == "gone\n").then_some(())
    })
    .await;

    // Its answer may never come: the agent that runs it is ended by it.
    let _ = sb
        .client
        .as_user("root")
        .exec(
            &[
                "/bin/sh".to_string(),
                "-c".to_string(),
                "kill -TERM 1".to_string(),
            ],
            Default::default(),
        )
        .await;
    wait_for(
        "the sandbox ended by SIGTERM to PID 1",
        Duration::from_secs(10),
        || async {
            let info = fx.tiers.inspect(sb.info.id()).await.expect("inspect");
            info.filter(|i| i.state == sandboxd_runtime::RuntimeState::Running)
                .is_none()
                .then_some(())
        },
    )
    .await;
    fx.tiers.destroy(sb.info.id()).await.unwrap();
}

/// Invariant (`sandboxd_agent::boot`, `dev_and_run`): a namespace sandbox's `/dev` (with
/// `/dev/shm`) and `/run` are one tmpfs, one superblock where there were three, each mounted with
/// the flags it had as a filesystem of its own: `/dev` `nosuid,noexec`, `/run` `nosuid,nodev`;
/// `/dev/shm` is writable by anyone, `/run` by root, and the tmpfs's own root is mounted nowhere.
async fn dev_and_run(tier: Isolation) {
    let fx = TieredFixture::new().await;
    let sb = fx.sandbox(tier, ResourceLimits::default()).await;
    let script = "stat -c '%d %a %U' /dev /run /dev/shm; \
        echo x > /dev/shm/mine && echo shm-written; echo x > /run/mine 2>/dev/null || echo run-refused";
    let out = sb.sh(script).await;
    let lines: Vec<String> = text(&out.stdout).lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 5, "{lines:?} {}", text(&out.stderr));
    let device = |line: &str| line.split(' ').next().unwrap_or_default().to_string();
    assert!(
        lines[..3].iter().all(|l| device(l) == device(&lines[0])),
        "one filesystem: {lines:?}"
    );
    let modes: Vec<&str> = lines[..3]
        .iter()
        .map(|l| &l[l.find(' ').unwrap() + 1..])
        .collect();
    assert_eq!(modes, ["755 root", "755 root", "1777 root"], "{lines:?}");
    assert_eq!(lines[3..], ["shm-written", "run-refused"], "{lines:?}");
    let root = sb
        .sh_as(Some("root"), "echo x > /run/root-file && echo run-written")
        .await;
    assert_eq!(
        text(&root.stdout),
        "run-written\n",
        "{}",
        text(&root.stderr)
    );
    let mounts = text(&sb.sh("cat /proc/self/mountinfo").await.stdout);
    let options = |at: &str| -> String {
        mounts
            .lines()
            .map(|l| l.split(' ').collect::<Vec<_>>())
            .find(|f| f.get(4) == Some(&at))
            .map(|f| format!("{} {}", f[3], f[5]))
            .unwrap_or_else(|| panic!("{at} is not mounted: {mounts}"))
    };
    let (dev, run) = (options("/dev"), options("/run"));
    assert!(
        dev.starts_with("/dev ") && run.starts_with("/run "),
        "{dev} | {run}"
    );
    for (mount, wanted, unwanted) in [(&dev, "noexec", "nodev"), (&run, "nodev", "noexec")] {
        assert!(
            mount.contains("nosuid") && mount.contains(wanted),
            "{mount}"
        );
        assert!(!mount.contains(unwanted), "{mount}");
    }
    assert!(
        !mounts
            .lines()
            .any(|l| l.split(' ').nth(4) == Some("/dev/shm")),
        "/dev/shm is no mount of its own: {mounts}"
    );
    fx.tiers.destroy(sb.info.id()).await.unwrap();
}
