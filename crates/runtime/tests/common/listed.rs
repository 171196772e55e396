//! A sandbox with the egress and lists a network test gives it, whose rules are gone when it is.

use super::outside::client_script;
use super::{spec, text, Fixture};
use sandboxd_envd::{EnvdClient, ExecOptions};
use sandboxd_runtime::namespace::egress;
use sandboxd_runtime::{Ipv4Net, ResourceLimits, Runtime, SandboxInfo, SandboxSpec};
use sandboxd_test_support::{test_slot, TestSlot};
use std::process::Command;

/// A sandbox on its own slot, with the given egress and lists.
pub struct Listed {
    pub info: SandboxInfo,
    pub client: EnvdClient,
    _slot: TestSlot,
    destroyed: bool,
}

impl Drop for Listed {
    fn drop(&mut self) {
        if self.destroyed {
            return;
        }
        // A test that failed never reached its destroy: no sandbox, pair or rule outlives it.
        if let Some(pid) = self.info.pid {
            // SAFETY: kill with a pid we started; harmless if it is gone.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        let _ = Command::new("ip")
            .args(["link", "del", &format!("sbh{}", self.info.net.slot)])
            .stderr(std::process::Stdio::null())
            .status();
        let address = self.info.net.sandbox;
        let _ = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(egress::revoke(address))
        })
        .join();
    }
}

impl Listed {
    pub async fn start(fx: &Fixture, egress: bool, allow: &[&str], deny: &[&str]) -> Listed {
        let nets =
            |list: &[&str]| -> Vec<Ipv4Net> { list.iter().map(|n| n.parse().unwrap()).collect() };
        Listed::start_with(fx, |s| {
            s.egress = egress;
            s.egress_allow = nets(allow);
            s.egress_deny = nets(deny);
        })
        .await
    }

    /// A sandbox whose spec `edit` sets up (egress, lists, names).
    pub async fn start_with(fx: &Fixture, edit: impl FnOnce(&mut SandboxSpec)) -> Listed {
        let slot = test_slot();
        let mut s = spec(slot.slot, ResourceLimits::default());
        edit(&mut s);
        fx.rt.create(&s).await.unwrap();
        let info = fx.rt.start(&s.id).await.unwrap();
        Listed::of(info, slot)
    }

    /// The sandbox `info` on `slot`, made elsewhere.
    pub fn of(info: SandboxInfo, slot: TestSlot) -> Listed {
        let client = EnvdClient::new(&info.agent.socket, &info.agent.token);
        Listed {
            info,
            client,
            _slot: slot,
            destroyed: false,
        }
    }

    /// Runs `script` with `/bin/sh -c`; its stdout and stderr, trimmed.
    pub async fn sh(&self, script: &str) -> String {
        let cmd = ["/bin/sh".to_string(), "-c".to_string(), script.to_string()];
        let out = self
            .client
            .exec(&cmd, ExecOptions::default())
            .await
            .unwrap();
        format!("{}{}", text(&out.stdout).trim(), text(&out.stderr).trim())
    }

    /// What the sandbox's client prints connecting to `host:port`: the peer address the server saw,
    /// or `unreachable …`.
    pub async fn reach(&self, host: &str, port: u16) -> String {
        self.sh(&client_script(host, port)).await
    }

    /// Destroys the sandbox and checks that no rule of it is left in the table.
    pub async fn destroy(mut self, fx: &Fixture) {
        fx.rt.destroy(self.info.id()).await.unwrap();
        self.destroyed = true;
        let table = nft_table();
        let address = self.info.net.sandbox.to_string();
        let chain = egress::chain_name(self.info.net.sandbox);
        let mentioned = table
            .split(|c: char| !(c.is_ascii_digit() || c == '.'))
            .any(|word| word == address);
        assert!(!mentioned, "{address} left in the table:\n{table}");
        // Whole names only: `sandbox_10_201_0_2` is a prefix of another sandbox's `…_0_22`.
        let named = |name: &str| {
            table
                .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .any(|word| word == name)
        };
        assert!(!named(&chain), "{chain} left behind:\n{table}");
        for set in [egress::NameSet::Allow, egress::NameSet::Deny] {
            let set = egress::name_set(self.info.net.sandbox, set);
            assert!(!named(&set), "{set} left behind:\n{table}");
        }
    }
}

pub fn nft_table() -> String {
    let out = Command::new("nft")
        .args(["list", "table", "ip", egress::TABLE])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    text(&out.stdout)
}
