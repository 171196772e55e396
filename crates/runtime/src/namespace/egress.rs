//! Egress for the sandboxes that ask for it, and the host-side firewall every sandbox sits behind.
//!
//! Rules live in one nftables table, `ip sandboxd`, installed idempotently on first use:
//! - forwarded traffic from a sandbox interface (`sbh*`) leaves the host only if the sandbox's address
//!   is in the `egress` set; sandboxes never reach one another through the host, and nothing from
//!   outside is forwarded into a sandbox except replies;
//! - traffic from an address in `egress` is masqueraded on its way out.
//!
//! A sandbox with egress is added to the set (and gets a default route) *before* its init is told to
//! go, so the first instruction already runs with NAT in place; it is removed when the sandbox stops.
//! Rules are applied with the `nft` tool (`nft -f -`). Without egress no rule is needed: the sandbox
//! has no route beyond its own /30, and the table is never touched.

use crate::RuntimeError;
use std::net::Ipv4Addr;
use tokio::io::AsyncWriteExt;

/// Name of the nftables table.
pub const TABLE: &str = "sandboxd";

const SETUP: &str = r#"add table ip sandboxd
add set ip sandboxd egress { type ipv4_addr; }
add chain ip sandboxd forward { type filter hook forward priority 0; policy accept; }
add chain ip sandboxd postrouting { type nat hook postrouting priority 100; policy accept; }
flush chain ip sandboxd forward
flush chain ip sandboxd postrouting
add rule ip sandboxd forward iifname "sbh*" ip saddr @egress oifname != "sbh*" accept
add rule ip sandboxd forward iifname "sbh*" drop
add rule ip sandboxd forward oifname "sbh*" ct state established,related accept
add rule ip sandboxd forward oifname "sbh*" drop
add rule ip sandboxd postrouting ip saddr @egress oifname != "sbh*" masquerade
"#;

async fn nft(script: &str) -> Result<(), RuntimeError> {
    let mut child = tokio::process::Command::new("nft")
        .args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| RuntimeError::Host(format!("egress needs nftables (the `nft` tool): {e}")))?;
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

/// Lets `address` out through NAT: installs the table if needed, turns on IPv4 forwarding, and adds
/// the address to the egress set.
pub async fn allow(address: Ipv4Addr) -> Result<(), RuntimeError> {
    // Once per process: the rules are static, only the set changes.
    static INSTALLED: tokio::sync::OnceCell<()> = tokio::sync::OnceCell::const_new();
    INSTALLED
        .get_or_try_init(|| async {
            nft(SETUP).await?;
            std::fs::write("/proc/sys/net/ipv4/ip_forward", "1")
                .map_err(RuntimeError::io("write", "/proc/sys/net/ipv4/ip_forward"))
        })
        .await?;
    nft(&format!("add element ip {TABLE} egress {{ {address} }}\n")).await
}

/// Takes `address` out of the egress set; an address that is not there is fine.
pub async fn revoke(address: Ipv4Addr) {
    let _ = nft(&format!(
        "delete element ip {TABLE} egress {{ {address} }}\n"
    ))
    .await;
}
