//! Egress for the sandboxes that ask for it, the allow and deny lists of those that have them, and the
//! host-side firewall every sandbox sits behind.
//!
//! Rules live in one nftables table, `ip sandboxd`:
//! - forwarded traffic from a sandbox interface (`sbh*`) leaves the host only if the sandbox's address
//!   is in the `egress` set or its own chain accepts it; sandboxes never reach one another through the
//!   host (not even with `0.0.0.0/0` allowed), and nothing from outside is forwarded into a sandbox
//!   except replies;
//! - traffic from an address in `egress` or `allow_only` is masqueraded on its way out;
//! - a sandbox opens no connection to the host itself (`input`): not to the host end of its own pair,
//!   not to any other of the host's addresses, unless its allow list names that address. Services the
//!   host runs for itself (a database on `0.0.0.0`, the daemon's own API) are not the sandbox's to
//!   reach; connections the host opens into a sandbox (the proxy, the port forwarders) are answered as
//!   usual, their replies not being new connections.
//!
//! **Lists** ([`SandboxSpec::egress_allow`], [`SandboxSpec::egress_deny`]). A sandbox with either list
//! gets its own chain, `sandbox_<a>_<b>_<c>_<d>` after its address, holding `ip daddr { allow… }
//! accept` then `ip daddr { deny… } drop`; and an element `<address> : jump <chain>` in the verdict
//! map `egress_policy`. The map is consulted before anything else, both for forwarded traffic (leaving
//! the host) and for new connections to the host itself (`input`). A destination in neither list gets
//! what the sandbox would get without lists: with `egress` it leaves the host; without, it is dropped;
//! the host's own addresses are dropped either way. So an allowed destination wins over a denied one,
//! an allowed host address is reachable, and a sandbox without egress but with an allow list reaches
//! exactly that list: it gets a default route and sits in `allow_only`, which masquerades it without
//! letting anything else out.
//!
//! **Names** ([`SandboxSpec::egress_allow_names`], [`SandboxSpec::egress_deny_names`]). A sandbox
//! whose lists name domains also gets two sets of its own, `names_allow_<a>_<b>_<c>_<d>` and
//! `names_deny_…` (`flags timeout`), which its DNS forwarder ([`super::dns`]) fills with the
//! addresses it resolved for those names, each for its answer's lifetime. Its chain then starts with
//! `ct state established,related accept` (a connection admitted when it opened outlives its
//! address's element), admits UDP and TCP port 53 to the host end of its own pair (the forwarder;
//! the only host service it reaches), and consults `names_allow` right after the allowed blocks and
//! `names_deny` right after the denied ones, so the precedence is the same: allowed (block or name)
//! beats denied (block or name) beats the egress default.
//!
//! **The egress gateway** ([`SandboxSpec::egress_gateway`]). A sandbox with a gateway port gets a
//! chain `gateway_<a>_<b>_<c>_<d>` holding `dnat ip to <host end>:<port>` and an element
//! `<address> : jump <chain>` in the verdict map `redirects`: its new TCP connections to ports 80
//! and 443 are redirected (`prerouting`) to the daemon's gateway on the host end of its own pair,
//! and `input` admits exactly those (`ct status dnat` to a port in `gateway_ports`, which each
//! daemon's port joins). The gateway opens its upstream connections from inside the
//! sandbox's network namespace with a source port of 61000 or more, which the redirect leaves alone,
//! so they go out under every rule above, as the sandbox's own would. (Ordinary connections take
//! their source port from below 61000, Linux's default ephemeral range; a sandbox that binds one of
//! 61000 or more itself only goes around the gateway, which then rewrites nothing for it.)
//! A gVisor sandbox's namespace holds no address the host's kernel could send from (gVisor's own
//! network stack owns it), so for that tier the gateway opens its upstream connections on the host,
//! and no source port of the sandbox's own is the gateway's: its address is in `redirects_any`,
//! which redirects its connections to the rules' ports whatever their source port (gVisor picks
//! ephemeral ports above 61000 too, which the other two maps would let pass). The gateway's
//! upstream connections for it are marked with the sandbox's address as a number ([`gateway_mark`]), and `output` holds them to
//! the same lists: `gateway_marks` names every such mark, `gateway_policy` jumps to the sandbox's
//! chain, `gateway_egress` marks those whose sandbox has egress; a marked connection never reaches
//! another sandbox, reaches the host itself only where the chain accepts it, and leaves otherwise
//! only with egress — the sandbox's own rules, applied to the gateway's connections.
//!
//! A sandbox's rules are installed (and the address given a default route when anything may leave)
//! *before* its init is told to go, so the first instruction already runs under them; they go when
//! the sandbox stops. Installing first clears whatever an earlier sandbox on the same address left,
//! and clearing is idempotent, both in one `nft` transaction each: an element is added then deleted,
//! a chain added, flushed and deleted, so the script succeeds whether or not it was there. A sandbox
//! without egress and without lists needs no rule of its own: it has no route beyond its own /30, and
//! the static rules keep it off the host.
//!
//! The static rules ([`guard_host`]) are applied once per process, when the runtime starts, before any
//! sandbox is created or adopted: they flush and re-add the rules of the base chains only (`forward`,
//! `input`, `postrouting`); the sets, the map and the per-sandbox chains keep their contents, so
//! sandboxes adopted from an earlier daemon process keep their policy. IPv4 forwarding is turned on by
//! the first sandbox that may send anything out. Rules are applied with the `nft` tool (`nft -f -`).

use crate::{Ipv4Net, Isolation, NetAddrs, RuntimeError, SandboxSpec};
use std::fmt::Write;
use std::net::Ipv4Addr;
use tokio::io::AsyncWriteExt;

/// Name of the nftables table.
pub const TABLE: &str = "sandboxd";

/// The table and the containers of per-sandbox state; `add` leaves existing ones and their contents.
const CONTAINERS: &str = r#"add table ip sandboxd
add set ip sandboxd egress { type ipv4_addr; }
add set ip sandboxd allow_only { type ipv4_addr; }
add map ip sandboxd egress_policy { type ipv4_addr : verdict; }
add map ip sandboxd redirects { type ipv4_addr : verdict; }
add map ip sandboxd redirects_ported { type ipv4_addr : verdict; }
add map ip sandboxd redirects_any { type ipv4_addr : verdict; }
add set ip sandboxd gateway_ports { type inet_service; }
add set ip sandboxd gateway_marks { type mark; }
add set ip sandboxd gateway_egress { type mark; }
add map ip sandboxd gateway_policy { type mark : verdict; }
"#;

/// The static rules (after [`CONTAINERS`]).
const RULES: &str = r#"add chain ip sandboxd forward { type filter hook forward priority 0; policy accept; }
add chain ip sandboxd input { type filter hook input priority 0; policy accept; }
add chain ip sandboxd postrouting { type nat hook postrouting priority 100; policy accept; }
add chain ip sandboxd prerouting { type nat hook prerouting priority -100; policy accept; }
add chain ip sandboxd output { type filter hook output priority 0; policy accept; }
flush chain ip sandboxd forward
flush chain ip sandboxd input
flush chain ip sandboxd postrouting
flush chain ip sandboxd prerouting
flush chain ip sandboxd output
add rule ip sandboxd forward iifname "sbh*" oifname != "sbh*" ip saddr vmap @egress_policy
add rule ip sandboxd forward iifname "sbh*" ip saddr @egress oifname != "sbh*" accept
add rule ip sandboxd forward iifname "sbh*" drop
add rule ip sandboxd forward oifname "sbh*" ct state established,related accept
add rule ip sandboxd forward oifname "sbh*" drop
add rule ip sandboxd input iifname "sbh*" ct state new ct status dnat tcp dport @gateway_ports accept
add rule ip sandboxd input iifname "sbh*" ct state new ip saddr vmap @egress_policy
add rule ip sandboxd input iifname "sbh*" ct state new drop
add rule ip sandboxd postrouting ip saddr @egress oifname != "sbh*" masquerade
add rule ip sandboxd postrouting ip saddr @allow_only oifname != "sbh*" masquerade
add rule ip sandboxd prerouting iifname "sbh*" tcp dport { 80, 443 } tcp sport < 61000 ip saddr vmap @redirects
add rule ip sandboxd prerouting iifname "sbh*" tcp sport < 61000 ip saddr vmap @redirects_ported
add rule ip sandboxd prerouting iifname "sbh*" ip saddr vmap @redirects_any
add rule ip sandboxd output meta mark @gateway_marks oifname "sbh*" drop
add rule ip sandboxd output meta mark vmap @gateway_policy
add rule ip sandboxd output meta mark @gateway_marks oifname "lo" drop
add rule ip sandboxd output meta mark @gateway_egress accept
add rule ip sandboxd output meta mark @gateway_marks drop
"#;

/// The whole static setup, applied once per process.
fn setup_script() -> String {
    format!("{CONTAINERS}{RULES}")
}

/// The chain holding the lists of the sandbox at `address`.
pub fn chain_name(address: Ipv4Addr) -> String {
    let [a, b, c, d] = address.octets();
    format!("sandbox_{a}_{b}_{c}_{d}")
}

/// The mark (`SO_MARK`) of the egress gateway's upstream connections opened on the host for the
/// sandbox at `address` (the gVisor tier's; see the module docs): its address as a number.
pub fn gateway_mark(address: Ipv4Addr) -> u32 {
    u32::from(address)
}

/// The chain that redirects the sandbox at `address` to its daemon's egress gateway.
pub fn redirect_chain(address: Ipv4Addr) -> String {
    let [a, b, c, d] = address.octets();
    format!("gateway_{a}_{b}_{c}_{d}")
}

/// The two sets a sandbox's DNS forwarder fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NameSet {
    /// Addresses of allowed names.
    Allow,
    /// Addresses of denied names.
    Deny,
}

/// The name of `set` of the sandbox at `address`.
pub fn name_set(address: Ipv4Addr, set: NameSet) -> String {
    let [a, b, c, d] = address.octets();
    let kind = match set {
        NameSet::Allow => "allow",
        NameSet::Deny => "deny",
    };
    format!("names_{kind}_{a}_{b}_{c}_{d}")
}

/// The definition of a name set (after `add set ip sandboxd <name>`).
const NAME_SET: &str = "{ type ipv4_addr; flags timeout; }";

/// Removes every trace of `address`: set memberships, map element, chain, name sets (after the
/// chain, whose rules refer to them). Idempotent (see the module docs); assumes [`CONTAINERS`].
fn clear_script(address: Ipv4Addr) -> String {
    let chain = chain_name(address);
    let mut script = chain_clear_script(address, &chain);
    for set in [NameSet::Allow, NameSet::Deny] {
        let set = name_set(address, set);
        let _ = writeln!(script, "add set ip {TABLE} {set} {NAME_SET}");
        let _ = writeln!(script, "delete set ip {TABLE} {set}");
    }
    script
}

fn chain_clear_script(address: Ipv4Addr, chain: &str) -> String {
    let redirect = redirect_chain(address);
    let mark = gateway_mark(address);
    format!(
        "add element ip {TABLE} gateway_marks {{ {mark} }}\n\
         delete element ip {TABLE} gateway_marks {{ {mark} }}\n\
         add element ip {TABLE} gateway_egress {{ {mark} }}\n\
         delete element ip {TABLE} gateway_egress {{ {mark} }}\n\
         add element ip {TABLE} egress {{ {address} }}\n\
         delete element ip {TABLE} egress {{ {address} }}\n\
         add element ip {TABLE} allow_only {{ {address} }}\n\
         delete element ip {TABLE} allow_only {{ {address} }}\n\
         add chain ip {TABLE} {redirect}\n\
         add element ip {TABLE} redirects {{ {address} : jump {redirect} }}\n\
         delete element ip {TABLE} redirects {{ {address} }}\n\
         add element ip {TABLE} redirects_ported {{ {address} : jump {redirect} }}\n\
         delete element ip {TABLE} redirects_ported {{ {address} }}\n\
         add element ip {TABLE} redirects_any {{ {address} : jump {redirect} }}\n\
         delete element ip {TABLE} redirects_any {{ {address} }}\n\
         flush chain ip {TABLE} {redirect}\n\
         delete chain ip {TABLE} {redirect}\n\
         add chain ip {TABLE} {chain}\n\
         add element ip {TABLE} egress_policy {{ {address} : jump {chain} }}\n\
         delete element ip {TABLE} egress_policy {{ {address} }}\n\
         add element ip {TABLE} gateway_policy {{ {mark} : jump {chain} }}\n\
         delete element ip {TABLE} gateway_policy {{ {mark} }}\n\
         flush chain ip {TABLE} {chain}\n\
         delete chain ip {TABLE} {chain}\n"
    )
}

fn set_of(nets: &[Ipv4Net]) -> String {
    let items: Vec<String> = Ipv4Net::normalize(nets.to_vec())
        .iter()
        .map(Ipv4Net::to_string)
        .collect();
    items.join(", ")
}

/// Replaces whatever the sandbox at `addrs` had with the rules of `spec` (one transaction).
fn install_script(addrs: &NetAddrs, spec: &SandboxSpec) -> String {
    let address = addrs.sandbox;
    let mut script = format!("{CONTAINERS}{}", clear_script(address));
    if spec.egress {
        let _ = writeln!(script, "add element ip {TABLE} egress {{ {address} }}");
    } else if spec.may_send_out() {
        let _ = writeln!(script, "add element ip {TABLE} allow_only {{ {address} }}");
    }
    if let Some(port) = spec.egress_gateway {
        let (host, redirect) = (addrs.host, redirect_chain(address));
        // The chain picks the ports: 80 and 443 arrive through `redirects`, the rules' own ports
        // (only for a sandbox that has some) through `redirects_ported`, which passes every port.
        let ports: Vec<String> = [80, 443]
            .iter()
            .chain(&spec.egress_gateway_ports)
            .map(u16::to_string)
            .collect();
        let _ = writeln!(script, "add chain ip {TABLE} {redirect}");
        let _ = writeln!(
            script,
            "add rule ip {TABLE} {redirect} tcp dport {{ {} }} dnat ip to {host}:{port}",
            ports.join(", ")
        );
        if spec.isolation == Isolation::Gvisor {
            // Its upstream connections leave from the host, not from its namespace: no source
            // port of its own is the gateway's, so every one is redirected.
            let _ = writeln!(
                script,
                "add element ip {TABLE} redirects_any {{ {address} : jump {redirect} }}"
            );
        } else {
            let _ = writeln!(
                script,
                "add element ip {TABLE} redirects {{ {address} : jump {redirect} }}"
            );
        }
        if !spec.egress_gateway_ports.is_empty() && spec.isolation != Isolation::Gvisor {
            let _ = writeln!(
                script,
                "add element ip {TABLE} redirects_ported {{ {address} : jump {redirect} }}"
            );
        }
        let _ = writeln!(script, "add element ip {TABLE} gateway_ports {{ {port} }}");
        // The gVisor tier's upstream connections, opened on the host with this mark, meet the
        // same lists (`output`).
        let mark = gateway_mark(address);
        let _ = writeln!(script, "add element ip {TABLE} gateway_marks {{ {mark} }}");
        if spec.egress {
            let _ = writeln!(script, "add element ip {TABLE} gateway_egress {{ {mark} }}");
        }
    }
    let names = spec.has_names();
    if spec.egress_allow.is_empty() && spec.egress_deny.is_empty() && !names {
        return script;
    }
    let chain = chain_name(address);
    if names {
        for set in [NameSet::Allow, NameSet::Deny] {
            let _ = writeln!(
                script,
                "add set ip {TABLE} {} {NAME_SET}",
                name_set(address, set)
            );
        }
    }
    let _ = writeln!(script, "add chain ip {TABLE} {chain}");
    if names {
        let host = addrs.host;
        let _ = writeln!(
            script,
            "add rule ip {TABLE} {chain} ct state established,related accept"
        );
        for proto in ["udp", "tcp"] {
            let _ = writeln!(
                script,
                "add rule ip {TABLE} {chain} ip daddr {host} {proto} dport 53 accept"
            );
        }
    }
    for (nets, set, verdict) in [
        (&spec.egress_allow, NameSet::Allow, "accept"),
        (&spec.egress_deny, NameSet::Deny, "drop"),
    ] {
        if !nets.is_empty() {
            let _ = writeln!(
                script,
                "add rule ip {TABLE} {chain} ip daddr {{ {} }} {verdict}",
                set_of(nets)
            );
        }
        if names {
            let _ = writeln!(
                script,
                "add rule ip {TABLE} {chain} ip daddr @{} {verdict}",
                name_set(address, set)
            );
        }
    }
    let _ = writeln!(
        script,
        "add element ip {TABLE} egress_policy {{ {address} : jump {chain} }}"
    );
    if spec.egress_gateway.is_some() {
        let mark = gateway_mark(address);
        let _ = writeln!(
            script,
            "add element ip {TABLE} gateway_policy {{ {mark} : jump {chain} }}"
        );
    }
    script
}

/// An address a sandbox's DNS forwarder learnt: which set, and for how long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Learnt {
    /// The set it goes into.
    pub set: NameSet,
    /// The address.
    pub address: Ipv4Addr,
    /// Its element's lifetime, in seconds.
    pub seconds: u32,
}

/// Puts every address of `learnt` into its set of the sandbox at `sandbox` for its lifetime,
/// replacing an element already there (add, delete, add: it succeeds either way, and the element's
/// timeout is the new one), in one transaction.
fn learn_script(sandbox: Ipv4Addr, learnt: &[Learnt]) -> String {
    let mut script = String::new();
    for l in learnt {
        let (set, address) = (name_set(sandbox, l.set), l.address);
        let _ = writeln!(
            script,
            "add element ip {TABLE} {set} {{ {address} timeout 1s }}\n\
             delete element ip {TABLE} {set} {{ {address} }}\n\
             add element ip {TABLE} {set} {{ {address} timeout {}s }}",
            l.seconds
        );
    }
    script
}

/// Adds what a DNS answer taught to the sandbox at `sandbox`'s name sets (see [`learn_script`]).
pub async fn learn(sandbox: Ipv4Addr, learnt: &[Learnt]) -> Result<(), RuntimeError> {
    if learnt.is_empty() {
        return Ok(());
    }
    nft(&learn_script(sandbox, learnt)).await
}

async fn nft(script: &str) -> Result<(), RuntimeError> {
    let mut child = tokio::process::Command::new("nft")
        .args(["-f", "-"])
        .kill_on_drop(true)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| {
            RuntimeError::Host(format!(
                "sandbox networking needs nftables (the `nft` tool): {e}"
            ))
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(script.as_bytes())
            .await
            .map_err(|e| RuntimeError::Network(format!("writing nft rules: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| RuntimeError::Network(format!("running nft: {e}")))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(RuntimeError::Network(format!(
            "nft refused the rules: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

/// Applies the static rules now (see the module docs); per-sandbox state (sets, map, sandbox chains)
/// is kept.
pub async fn install_table() -> Result<(), RuntimeError> {
    nft(&setup_script()).await
}

/// Applies the static rules once per process: the runtime calls it when it starts, so every sandbox,
/// created or adopted, is kept off the host's own services.
pub async fn guard_host() -> Result<(), RuntimeError> {
    static INSTALLED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    INSTALLED.get_or_try_init(install_table).await.map(|_| ())
}

/// Puts `spec`'s egress rules in place for the sandbox at `addrs` (see the module docs): makes sure
/// the static rules are there, turns on IPv4 forwarding when the sandbox may send anything out, and
/// replaces whatever rules an earlier sandbox at this address left. Call it only for a spec that
/// [needs rules](SandboxSpec::needs_egress_rules).
pub async fn allow(addrs: &NetAddrs, spec: &SandboxSpec) -> Result<(), RuntimeError> {
    guard_host().await?;
    if spec.may_send_out() {
        std::fs::write("/proc/sys/net/ipv4/ip_forward", "1")
            .map_err(RuntimeError::io("write", "/proc/sys/net/ipv4/ip_forward"))?;
    }
    nft(&install_script(addrs, spec)).await
}

/// Removes every rule of the sandbox at `address`; an address without any is fine. Best effort: a
/// failure is logged, and the next sandbox at this address replaces what is left.
pub async fn revoke(address: Ipv4Addr) {
    if let Err(e) = nft(&format!("{CONTAINERS}{}", clear_script(address))).await {
        tracing::warn!(%address, error = %e, "removing a sandbox's egress rules failed");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(egress: bool, allow: &[&str], deny: &[&str]) -> SandboxSpec {
        let nets = |list: &[&str]| list.iter().map(|n| n.parse().unwrap()).collect();
        SandboxSpec {
            net_slot: 1,
            egress,
            egress_allow: nets(allow),
            egress_deny: nets(deny),
            ..SandboxSpec::base("sb", "t")
        }
    }

    const ADDR: Ipv4Addr = Ipv4Addr::new(10, 201, 0, 6);
    const ADDRS: NetAddrs = NetAddrs {
        slot: 1,
        host: Ipv4Addr::new(10, 201, 0, 5),
        sandbox: ADDR,
        prefix: 30,
    };

    /// The lines of `script` after the containers and the clearing of [`ADDR`].
    fn installed(spec: &SandboxSpec) -> Vec<String> {
        let script = install_script(&ADDRS, spec);
        let prefix = format!("{CONTAINERS}{}", clear_script(ADDR));
        let rest = script
            .strip_prefix(&prefix)
            .unwrap_or_else(|| panic!("install does not clear first:\n{script}"));
        rest.lines().map(str::to_string).collect()
    }

    #[test]
    fn a_sandbox_without_lists_keeps_the_plain_egress_rules() {
        assert_eq!(
            installed(&spec(true, &[], &[])),
            ["add element ip sandboxd egress { 10.201.0.6 }"]
        );
    }

    #[test]
    fn lists_get_their_own_chain_allow_before_deny() {
        assert_eq!(
            installed(&spec(
                true,
                &["1.1.1.1", "1.1.1.0/24"],
                &["10.0.0.0/8", "0.0.0.0/0"]
            )),
            [
                "add element ip sandboxd egress { 10.201.0.6 }",
                "add chain ip sandboxd sandbox_10_201_0_6",
                "add rule ip sandboxd sandbox_10_201_0_6 ip daddr { 1.1.1.0/24 } accept",
                "add rule ip sandboxd sandbox_10_201_0_6 ip daddr { 0.0.0.0/0 } drop",
                "add element ip sandboxd egress_policy { 10.201.0.6 : jump sandbox_10_201_0_6 }",
            ]
        );
    }

    #[test]
    fn without_egress_an_allow_list_is_masqueraded_but_not_opened_wide() {
        assert_eq!(
            installed(&spec(false, &["198.18.0.2", "8.8.8.0/24"], &[])),
            [
                "add element ip sandboxd allow_only { 10.201.0.6 }",
                "add chain ip sandboxd sandbox_10_201_0_6",
                "add rule ip sandboxd sandbox_10_201_0_6 ip daddr { 8.8.8.0/24, 198.18.0.2/32 } accept",
                "add element ip sandboxd egress_policy { 10.201.0.6 : jump sandbox_10_201_0_6 }",
            ]
        );
        // A deny list alone opens nothing: no route, no NAT, only the chain.
        let deny_only = installed(&spec(false, &[], &["10.0.0.0/8"]));
        assert!(deny_only
            .iter()
            .all(|l| !l.contains("egress {") && !l.contains("allow_only {")));
        assert!(deny_only.contains(
            &"add rule ip sandboxd sandbox_10_201_0_6 ip daddr { 10.0.0.0/8 } drop".to_string()
        ));
    }

    #[test]
    fn names_get_their_sets_and_the_forwarder_port_and_keep_the_precedence() {
        let names = |list: &[&str]| list.iter().map(|n| n.parse().unwrap()).collect();
        let with_names = SandboxSpec {
            egress_allow_names: names(&["*.example.com"]),
            egress_deny_names: names(&["bad.example.com"]),
            ..spec(false, &["1.1.1.1"], &["0.0.0.0/0"])
        };
        assert_eq!(
            installed(&with_names),
            [
                "add element ip sandboxd allow_only { 10.201.0.6 }",
                "add set ip sandboxd names_allow_10_201_0_6 { type ipv4_addr; flags timeout; }",
                "add set ip sandboxd names_deny_10_201_0_6 { type ipv4_addr; flags timeout; }",
                "add chain ip sandboxd sandbox_10_201_0_6",
                "add rule ip sandboxd sandbox_10_201_0_6 ct state established,related accept",
                "add rule ip sandboxd sandbox_10_201_0_6 ip daddr 10.201.0.5 udp dport 53 accept",
                "add rule ip sandboxd sandbox_10_201_0_6 ip daddr 10.201.0.5 tcp dport 53 accept",
                "add rule ip sandboxd sandbox_10_201_0_6 ip daddr { 1.1.1.1/32 } accept",
                "add rule ip sandboxd sandbox_10_201_0_6 ip daddr @names_allow_10_201_0_6 accept",
                "add rule ip sandboxd sandbox_10_201_0_6 ip daddr { 0.0.0.0/0 } drop",
                "add rule ip sandboxd sandbox_10_201_0_6 ip daddr @names_deny_10_201_0_6 drop",
                "add element ip sandboxd egress_policy { 10.201.0.6 : jump sandbox_10_201_0_6 }",
            ]
        );
        // A deny name alone opens nothing but the forwarder.
        let deny_only = SandboxSpec {
            egress_deny_names: names(&["bad.example.com"]),
            ..spec(false, &[], &[])
        };
        let lines = installed(&deny_only);
        assert!(lines
            .iter()
            .all(|l| !l.contains("egress {") && !l.contains("allow_only {")));
        assert!(lines.iter().any(|l| l.ends_with("udp dport 53 accept")));
    }

    #[test]
    fn a_learnt_address_replaces_its_element_with_the_new_lifetime() {
        let learnt = [
            Learnt {
                set: NameSet::Allow,
                address: Ipv4Addr::new(198, 18, 0, 2),
                seconds: 60,
            },
            Learnt {
                set: NameSet::Deny,
                address: Ipv4Addr::new(198, 19, 0, 2),
                seconds: 30,
            },
        ];
        let script = learn_script(ADDR, &learnt);
        assert_eq!(
            script.lines().collect::<Vec<_>>(),
            [
                "add element ip sandboxd names_allow_10_201_0_6 { 198.18.0.2 timeout 1s }",
                "delete element ip sandboxd names_allow_10_201_0_6 { 198.18.0.2 }",
                "add element ip sandboxd names_allow_10_201_0_6 { 198.18.0.2 timeout 60s }",
                "add element ip sandboxd names_deny_10_201_0_6 { 198.19.0.2 timeout 1s }",
                "delete element ip sandboxd names_deny_10_201_0_6 { 198.19.0.2 }",
                "add element ip sandboxd names_deny_10_201_0_6 { 198.19.0.2 timeout 30s }",
            ]
        );
    }

    #[test]
    fn a_sandbox_behind_the_gateway_is_redirected_to_its_port_only() {
        let behind = SandboxSpec {
            egress_gateway: Some(21280),
            ..spec(true, &[], &[])
        };
        assert!(behind.needs_egress_rules());
        let script = install_script(&ADDRS, &behind);
        let host = ADDRS.host;
        let wanted = [
            "add chain ip sandboxd gateway_10_201_0_6".to_string(),
            format!(
                "add rule ip sandboxd gateway_10_201_0_6 tcp dport {{ 80, 443 }} dnat ip to {host}:21280"
            ),
            "add element ip sandboxd redirects { 10.201.0.6 : jump gateway_10_201_0_6 }".into(),
            "add element ip sandboxd gateway_ports { 21280 }".into(),
            "add element ip sandboxd gateway_marks { 180944902 }".into(),
            "add element ip sandboxd gateway_egress { 180944902 }".into(),
        ];
        let at: Vec<usize> = wanted
            .iter()
            .map(|line| {
                let lines: Vec<&str> = script.lines().collect();
                lines
                    .iter()
                    .rposition(|l| l == line)
                    .unwrap_or_else(|| panic!("no {line:?} in\n{script}"))
            })
            .collect();
        assert!(at.windows(2).all(|w| w[0] < w[1]), "{script}");
        // Only a sandbox whose rules name other ports has every port looked at.
        let last = |script: &str, prefix: &str| {
            let lines: Vec<&str> = script.lines().collect();
            lines.iter().rposition(|l| l.starts_with(prefix))
        };
        let ported_add = "add element ip sandboxd redirects_ported";
        let ported_delete = "delete element ip sandboxd redirects_ported";
        assert!(
            last(&script, ported_add) < last(&script, ported_delete),
            "only cleared:\n{script}"
        );
        let ported = SandboxSpec {
            egress_gateway_ports: vec![8443, 9000],
            ..behind
        };
        let script = install_script(&ADDRS, &ported);
        for line in [
            format!("add rule ip sandboxd gateway_10_201_0_6 tcp dport {{ 80, 443, 8443, 9000 }} dnat ip to {host}:21280"),
            "add element ip sandboxd redirects_ported { 10.201.0.6 : jump gateway_10_201_0_6 }".into(),
        ] {
            assert!(script.lines().any(|l| l == line), "no {line:?} in\n{script}");
        }
        // A gVisor sandbox is redirected whatever its source port: gVisor's own ephemeral ports
        // reach above 61000, and the gateway's connections for it leave from the host.
        let gvisor = SandboxSpec {
            isolation: Isolation::Gvisor,
            ..ported
        };
        let script = install_script(&ADDRS, &gvisor);
        let any = "add element ip sandboxd redirects_any { 10.201.0.6 : jump gateway_10_201_0_6 }";
        assert!(script.lines().any(|l| l == any), "{script}");
        for map in ["redirects", "redirects_ported"] {
            let add = format!("add element ip sandboxd {map} ");
            let delete = format!("delete element ip sandboxd {map} ");
            assert!(
                last(&script, &add) < last(&script, &delete),
                "{map}:\n{script}"
            );
        }
        assert!(RULES.contains("prerouting iifname \"sbh*\" ip saddr vmap @redirects_any"));
        // Without a gateway port nothing is redirected.
        assert!(!install_script(&ADDRS, &spec(true, &[], &[])).contains("dnat"));
    }

    #[test]
    fn the_gateways_marked_connections_meet_the_sandboxs_own_lists() {
        assert_eq!(gateway_mark(ADDR), 0x0ac9_0006);
        let listed = SandboxSpec {
            egress_gateway: Some(21280),
            ..spec(false, &["192.0.2.0/24"], &[])
        };
        let script = install_script(&ADDRS, &listed);
        let lines: Vec<&str> = script.lines().collect();
        let last = |line: &str| lines.iter().rposition(|l| *l == line);
        let chain = last("add chain ip sandboxd sandbox_10_201_0_6").expect("its chain");
        let policy =
            "add element ip sandboxd gateway_policy { 180944902 : jump sandbox_10_201_0_6 }";
        assert!(last(policy).is_some_and(|at| at > chain), "{script}");
        assert!(last("add element ip sandboxd gateway_marks { 180944902 }").is_some());
        // Without egress, what the lists do not accept is dropped: no element in gateway_egress.
        let egress_add = last("add element ip sandboxd gateway_egress { 180944902 }");
        let egress_delete = last("delete element ip sandboxd gateway_egress { 180944902 }");
        assert!(egress_add < egress_delete, "{script}");
        let output: Vec<String> = setup_script()
            .lines()
            .filter(|l| l.starts_with("add rule ip sandboxd output"))
            .map(|l| {
                l.trim_start_matches("add rule ip sandboxd output ")
                    .to_string()
            })
            .collect();
        assert_eq!(
            output,
            [
                r#"meta mark @gateway_marks oifname "sbh*" drop"#,
                "meta mark vmap @gateway_policy",
                r#"meta mark @gateway_marks oifname "lo" drop"#,
                "meta mark @gateway_egress accept",
                "meta mark @gateway_marks drop",
            ],
            "never another sandbox; the lists; the host only as listed; egress; nothing else"
        );
    }

    #[test]
    fn clearing_adds_before_it_deletes_so_it_never_fails_on_absence() {
        let script = clear_script(ADDR);
        for what in [
            "element ip sandboxd egress { 10.201.0.6",
            "element ip sandboxd allow_only { 10.201.0.6",
            "element ip sandboxd egress_policy { 10.201.0.6",
            "chain ip sandboxd sandbox_10_201_0_6",
            "element ip sandboxd redirects { 10.201.0.6",
            "element ip sandboxd redirects_ported { 10.201.0.6",
            "chain ip sandboxd gateway_10_201_0_6",
            "element ip sandboxd gateway_marks { 180944902",
            "element ip sandboxd gateway_egress { 180944902",
            "element ip sandboxd gateway_policy { 180944902",
            "set ip sandboxd names_allow_10_201_0_6",
            "set ip sandboxd names_deny_10_201_0_6",
        ] {
            let add = script
                .find(&format!("add {what}"))
                .unwrap_or_else(|| panic!("no add {what}"));
            let delete = script
                .find(&format!("delete {what}"))
                .unwrap_or_else(|| panic!("no delete {what}"));
            assert!(add < delete, "{what}:\n{script}");
        }
        // The sets go after the chain whose rules refer to them.
        let chain_gone = script.find("delete chain").unwrap();
        assert!(script
            .find("delete set")
            .is_some_and(|set| set > chain_gone));
    }

    #[test]
    fn the_static_rules_consult_the_lists_first_and_flush_only_base_chains() {
        let setup = setup_script();
        let rules: Vec<&str> = setup
            .lines()
            .filter(|l| l.starts_with("add rule"))
            .collect();
        assert!(rules[0].contains("forward") && rules[0].contains("vmap @egress_policy"));
        let input: Vec<&str> = rules
            .iter()
            .copied()
            .filter(|r| r.contains(" input "))
            .collect();
        assert_eq!(
            input,
            [
                r#"add rule ip sandboxd input iifname "sbh*" ct state new ct status dnat tcp dport @gateway_ports accept"#,
                r#"add rule ip sandboxd input iifname "sbh*" ct state new ip saddr vmap @egress_policy"#,
                r#"add rule ip sandboxd input iifname "sbh*" ct state new drop"#,
            ],
            "what was redirected to a gateway, then the lists, then nothing new from a sandbox \
             reaches the host"
        );
        let flushed: Vec<&str> = setup.lines().filter(|l| l.starts_with("flush")).collect();
        assert_eq!(
            flushed,
            [
                "flush chain ip sandboxd forward",
                "flush chain ip sandboxd input",
                "flush chain ip sandboxd postrouting",
                "flush chain ip sandboxd prerouting",
                "flush chain ip sandboxd output"
            ]
        );
        assert!(
            !setup.contains("delete"),
            "setup must keep per-sandbox state"
        );
    }
}
