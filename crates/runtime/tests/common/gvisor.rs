//! The gVisor tier on a fixture's namespace runtime, for the tests that run sandboxes behind it.

use super::{spec, Sandbox};
use sandboxd_envd::EnvdClient;
use sandboxd_runtime::gvisor::{probe, GvisorConfig, GvisorRuntime};
use sandboxd_runtime::namespace::NamespaceRuntime;
use sandboxd_runtime::tiers::Tiers;
use sandboxd_runtime::{Isolation, ResourceLimits, Runtime};
use sandboxd_test_support::test_slot;
use std::sync::Arc;

/// Whether this host runs the gVisor tier; without it, the test is skipped only when
/// `SANDBOXD_SKIP_GVISOR_TESTS` is set, and fails otherwise, saying how to install it.
pub fn require_gvisor() -> bool {
    match probe(&GvisorConfig::default()) {
        Ok(_) => true,
        Err(why) if std::env::var_os("SANDBOXD_SKIP_GVISOR_TESTS").is_some() => {
            eprintln!("SKIPPED: no gVisor tier here ({why}; SANDBOXD_SKIP_GVISOR_TESTS is set)");
            false
        }
        Err(why) => panic!("this test needs the gVisor tier: {why}"),
    }
}

/// Both tiers on a runtime over the state directory under `dir`.
async fn tiers_on(dir: &std::path::Path) -> Tiers {
    let host = Arc::new(
        NamespaceRuntime::new(super::config(dir))
            .await
            .expect("namespace runtime"),
    );
    let gvisor = probe(&GvisorConfig::default())
        .map(|runsc| GvisorRuntime::new(host.clone(), runsc).expect("gVisor runtime"));
    Tiers::new(host, gvisor)
}

/// Another runtime on a fixture's state directory.
pub struct Reopened {
    pub tiers: Tiers,
}

/// Both tiers over one namespace runtime, as the daemon has them.
pub struct TieredFixture {
    pub tiers: Tiers,
    pub dir: tempfile::TempDir,
}

impl Drop for TieredFixture {
    fn drop(&mut self) {
        super::unmount_pool(&self.dir.path().join("runtime"));
    }
}

impl TieredFixture {
    /// A namespace runtime on a fresh state directory with the gVisor tier beside it.
    pub async fn new() -> TieredFixture {
        let dir = tempfile::Builder::new()
            .prefix("sandboxd-gv-")
            .tempdir()
            .expect("tempdir");
        TieredFixture {
            tiers: tiers_on(dir.path()).await,
            dir,
        }
    }

    /// A second runtime on `other`'s state directory (a restarted daemon's); `other` keeps the
    /// directory and its cleanup.
    pub async fn reopen(other: &TieredFixture) -> Reopened {
        Reopened {
            tiers: tiers_on(other.dir.path()).await,
        }
    }

    /// A started sandbox of `tier` with `limits`.
    pub async fn sandbox(&self, tier: Isolation, limits: ResourceLimits) -> Sandbox {
        let slot = test_slot();
        let spec = sandboxd_runtime::SandboxSpec {
            isolation: tier,
            ..spec(slot.slot, limits)
        };
        self.tiers.create(&spec).await.expect("create");
        let info = self.tiers.start(&spec.id).await.expect("start");
        let client = EnvdClient::new(&info.agent.socket, &info.agent.token);
        Sandbox::new(info, client, slot)
    }
}

/// Starts a shell in `sb` that counts in memory, writing each number to `/tmp/count` every 50 ms;
/// returns its pid (in the sandbox).
pub async fn start_counting(sb: &Sandbox) -> String {
    let script =
        "nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.05; done' \
                  >/dev/null 2>&1 & echo $!";
    super::text(&sb.sh(script).await.stdout).trim().to_string()
}

/// The counter's last number in `sb` (0 before the first).
pub async fn count(sb: &Sandbox) -> u64 {
    super::text(&sb.sh("cat /tmp/count").await.stdout)
        .trim()
        .parse()
        .unwrap_or(0)
}

/// Waits for the counter in `sb` to pass `past`: up to a minute, as a loop of shell commands
/// behind gVisor under emulation (the Debian VM) takes seconds a turn.
pub async fn wait_count_past(sb: &Sandbox, past: u64) {
    super::wait_for(
        "the counter to count on",
        std::time::Duration::from_secs(60),
        || async { (count(sb).await > past).then_some(()) },
    )
    .await;
}
