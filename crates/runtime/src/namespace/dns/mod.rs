//! Domain names in egress lists, enforced through each such sandbox's own DNS forwarder.
//!
//! Contract. A sandbox whose lists name domains ([`crate::SandboxSpec::has_names`]) resolves through
//! a forwarder of its own: the daemon listens on UDP and TCP port 53 of the host end of the sandbox's
//! veth pair, and the sandbox's `/etc/resolv.conf` names that address as its only nameserver
//! ([`resolv_conf`]). The firewall admits exactly that address and port from the sandbox to the host
//! ([`super::egress`]). The forwarder passes every query to the upstream resolvers
//! ([`crate::namespace::NamespaceConfig::dns_upstreams`], by default the nameservers of the host's
//! resolver configuration, [`host_upstreams`]) and returns their answer unchanged. When the answer's
//! question name matches an allowed pattern ([`NamePattern`]), each A record's address goes into the
//! sandbox's `names_allow` set, and likewise into `names_deny` for a denied one, **before** the
//! answer is released to the sandbox, so a connection the sandbox opens on reading it finds its
//! address admitted (see [`forwarder`] for lifetimes and bounds). Names matching neither resolve as
//! usual and stay unreachable unless an address rule or the egress default admits them. IPv6 stays
//! closed: AAAA answers pass unchanged, but the sandbox has no IPv6 route.
//!
//! Lifecycle: the forwarder starts once the sandbox's pair is attached and its rules are in place,
//! before its init is told to go; it stops when the sandbox stops or is destroyed (the sets go with
//! the sandbox's chain, [`super::egress::revoke`]); a runtime starting up starts one again for every
//! running sandbox that needs one (sandboxes outlive the daemon, its forwarders do not). Addresses
//! learnt before a restart stay in the sets until they expire. The forwarder needs port 53 of the
//! host end free: a host resolver bound to `0.0.0.0:53` takes it, and the sandbox's start then fails
//! with a network error naming the forwarder. Without any upstream (none configured and none in the
//! host's resolver configuration) every query is answered SERVFAIL.
//!
//! A DNS-based list is only as strong as the answers: an allowed pattern admits whatever addresses
//! the upstream resolvers give for names it matches. An answer never admits an address that is the
//! host's loopback, link-local, multicast or broadcast, unspecified (`0.0.0.0/8`), or inside the
//! runtime's sandbox subnet, so no answer opens the way to the host ends of the pairs or another
//! sandbox.

mod answers;
pub mod forwarder;
pub mod names;
#[cfg(test)]
mod test_messages;

pub use forwarder::{Forwarder, ForwarderConfig};
pub use names::{NameError, NamePattern};

use super::state::SandboxPaths;
use super::NamespaceRuntime;
use crate::{validate_id, RuntimeError, SandboxSpec};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Mutex;

/// The resolver configuration of a sandbox whose forwarder listens at `forwarder`.
pub fn resolv_conf(forwarder: Ipv4Addr) -> String {
    format!("nameserver {forwarder}\n")
}

/// The nameservers of the host's resolver configuration as a sandbox would get it
/// ([`super::rootfs::current_resolv_conf`]), on port 53; empty when there is none.
pub fn host_upstreams() -> Vec<SocketAddr> {
    super::rootfs::current_resolv_conf()
        .map(|conf| upstreams_of(&conf))
        .unwrap_or_default()
}

/// The `nameserver` addresses of a resolver configuration, in order, on port 53; lines that do not
/// hold a plain address (a scoped IPv6 address, garbage) are skipped.
fn upstreams_of(conf: &str) -> Vec<SocketAddr> {
    conf.lines()
        .filter_map(|l| l.trim().strip_prefix("nameserver"))
        .filter_map(|a| a.trim().parse::<IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .collect()
}

/// The running forwarders of one runtime, by sandbox id; dropping one stops it.
#[derive(Default)]
pub struct Forwarders {
    running: Mutex<HashMap<String, Forwarder>>,
}

impl Forwarders {
    /// Keeps `forwarder` as sandbox `id`'s, stopping any it had.
    pub fn insert(&self, id: &str, forwarder: Forwarder) {
        let old = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_string(), forwarder);
        drop(old);
    }

    /// Stops sandbox `id`'s forwarder; a sandbox without one is fine.
    pub fn stop(&self, id: &str) {
        let old = self
            .running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
        drop(old);
    }

    /// Files sandbox `from`'s forwarder, if any, under `to` (an adopted sandbox's new id).
    pub fn rename(&self, from: &str, to: &str) {
        let mut running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(forwarder) = running.remove(from) {
            running.insert(to.to_string(), forwarder);
        }
    }

    /// Replaces the names sandbox `id`'s forwarder admits and denies ([`Forwarder::set_names`]);
    /// false when it has none running in this process.
    pub fn set_names(&self, id: &str, allow: Vec<NamePattern>, deny: Vec<NamePattern>) -> bool {
        let running = self.running.lock().unwrap_or_else(|p| p.into_inner());
        match running.get(id) {
            Some(forwarder) => {
                forwarder.set_names(allow, deny);
                true
            }
            None => false,
        }
    }

    /// Whether sandbox `id` has a running forwarder.
    pub fn has(&self, id: &str) -> bool {
        self.running
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(id)
    }
}

impl NamespaceRuntime {
    /// Starts the DNS forwarder of every running sandbox that needs one (see the module docs): a sandbox
    /// outlives the process that started its forwarder. A forwarder that cannot start is logged;
    /// its sandbox's names then stop resolving, which fails closed.
    pub(super) async fn restart_forwarders(&self) {
        let dir = self.config.state_dir.join("sandboxes");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return;
        };
        for entry in entries.flatten() {
            let Some(id) = entry.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if validate_id(&id).is_err() {
                continue;
            }
            let Ok(Some(p)) = SandboxPaths::new(&dir, &id).load() else {
                continue;
            };
            if !p.spec.has_names() || p.live_pid().is_none() {
                continue;
            }
            if let Err(e) = self.start_forwarder(&p.spec).await {
                tracing::warn!(sandbox_id = %id, error = %e, "cannot restart the DNS forwarder of an adopted sandbox");
            }
        }
    }

    /// Starts `spec`'s DNS forwarder on the host end of its pair, which must be attached.
    pub(crate) async fn start_forwarder(&self, spec: &SandboxSpec) -> Result<(), RuntimeError> {
        let addrs = self.net.addrs(spec.net_slot)?;
        let upstreams = if self.config.dns_upstreams.is_empty() {
            host_upstreams()
        } else {
            self.config.dns_upstreams.clone()
        };
        let first = u32::from(self.config.subnet_base);
        let forwarder = Forwarder::start(ForwarderConfig {
            listen: (addrs.host, 53).into(),
            sandbox: addrs.sandbox,
            allow: spec.egress_allow_names.clone(),
            deny: spec.egress_deny_names.clone(),
            upstreams,
            excluded: first..first.saturating_add(self.config.slots.saturating_mul(4)),
        })
        .await?;
        self.forwarders.insert(&spec.id, forwarder);
        Ok(())
    }

    /// Whether sandbox `id` has a DNS forwarder running in this process.
    pub fn has_forwarder(&self, id: &str) -> bool {
        self.forwarders.has(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sandbox_with_names_has_only_its_forwarder_as_nameserver() {
        assert_eq!(
            resolv_conf(Ipv4Addr::new(10, 201, 0, 5)),
            "nameserver 10.201.0.5\n"
        );
    }

    #[test]
    fn upstreams_are_the_configured_nameservers_in_order() {
        let conf = "# comment\nsearch lan\nnameserver 10.255.255.53\n nameserver 2001:db8::1 \n\
                    nameserver fe80::1%eth0\nnameserver nope\noptions edns0\nnameserver 127.0.0.53\n";
        assert_eq!(
            upstreams_of(conf),
            ["10.255.255.53:53", "[2001:db8::1]:53", "127.0.0.53:53"]
                .map(|a| a.parse::<SocketAddr>().unwrap())
        );
        assert!(upstreams_of("").is_empty());
    }
}
