//! The daemon's egress gateway: its CA, its port, the roots it checks upstream hosts against, and
//! the files every sandbox behind it trusts.
//!
//! Contract:
//! - The CA is `<data-dir>/egress-ca.pem` and `egress-ca.key` (made at the first start, carried by
//!   `sandboxd backup`).
//! - Sandboxes see the CA alone and the CA with the public roots (the host's system bundle) in the
//!   daemon's directory they all share read-only ([`sandboxd_envd::callback::SANDBOX_DIR`]), as
//!   [`CA_FILE`] and [`BUNDLE_FILE`], written at every start.
//! - The port is `--egress-gateway-port`, else the one this data dir used before (so sandboxes that
//!   outlive a restart keep reaching it), else a free one above the kernel's ephemeral range
//!   (`net.ipv4.ip_local_port_range`) and outside `--host-ports`, then kept ([`fresh_ports`]). Not
//!   one the system picks: that is an ephemeral port, which any outgoing connection may hold as its
//!   own local port while the daemon is down, and the restart would then fail. Only when the
//!   ephemeral range leaves no port above it does the system pick. The gateway listens on every
//!   address of the host and answers only connections that come from a sandbox behind it
//!   (`sandboxd_egress::gateway`); a configured or kept port it cannot have stops the start, saying
//!   which.
//! - Upstream hosts are checked against the host's system bundle and `--egress-roots`.

use anyhow::Context;
use sandboxd_egress::EgressCa;
use sandboxd_service::egress::GatewaySettings;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The CA's certificate in the shared directory.
pub const CA_FILE: &str = "egress-ca.pem";
/// The public roots and the CA in the shared directory.
pub const BUNDLE_FILE: &str = "egress-ca-bundle.pem";
/// Where a data dir keeps its gateway's port.
pub const PORT_FILE: &str = "egress-gateway.port";
/// The host's bundle of public roots.
const SYSTEM_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// The gateway, bound but not yet serving.
pub struct Prepared {
    pub ca: Arc<EgressCa>,
    pub listener: tokio::net::TcpListener,
    pub roots: rustls::RootCertStore,
    pub settings: GatewaySettings,
}

/// The certificates of the PEM text `pem`, read from `path`.
fn pem_certs(
    pem: &str,
    path: &Path,
) -> anyhow::Result<Vec<rustls::pki_types::CertificateDer<'static>>> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("reading the certificates of {}", path.display()))
}

/// Makes or loads the CA, writes what sandboxes trust into `shared`, and binds the port (one
/// outside `host_ports` when it picks one).
pub async fn prepare(
    data_dir: &Path,
    shared: &Path,
    port: Option<u16>,
    host_ports: &std::ops::RangeInclusive<u16>,
    extra_roots: Option<&Path>,
) -> anyhow::Result<Prepared> {
    let ca = Arc::new(EgressCa::load_or_create(data_dir).context("loading the egress CA")?);
    let system = std::fs::read_to_string(SYSTEM_BUNDLE).unwrap_or_default();
    let mut roots = rustls::RootCertStore::empty();
    if !system.is_empty() {
        let (_, ignored) =
            roots.add_parsable_certificates(pem_certs(&system, Path::new(SYSTEM_BUNDLE))?);
        if ignored > 0 {
            tracing::debug!(ignored, "system roots the gateway cannot use");
        }
    }
    if let Some(extra) = extra_roots {
        let pem = std::fs::read_to_string(extra)
            .with_context(|| format!("reading {}", extra.display()))?;
        for cert in pem_certs(&pem, extra)? {
            roots
                .add(cert)
                .with_context(|| format!("a root of {}", extra.display()))?;
        }
    }
    write_shared(&shared.join(CA_FILE), ca.cert_pem())?;
    write_shared(
        &shared.join(BUNDLE_FILE),
        &format!("{system}\n{}", ca.cert_pem()),
    )?;
    let saved = data_dir.join(PORT_FILE);
    let port = port.or_else(|| {
        std::fs::read_to_string(&saved)
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .filter(|p| *p != 0)
    });
    let listener = match port {
        Some(port) => tokio::net::TcpListener::bind(("0.0.0.0", port))
            .await
            .with_context(|| {
                format!("the egress gateway cannot listen on port {port} (give another with --egress-gateway-port)")
            })?,
        None => bind_fresh(host_ports).await?,
    };
    let port = listener.local_addr()?.port();
    std::fs::write(&saved, format!("{port}\n"))
        .with_context(|| format!("writing {}", saved.display()))?;
    let inside = PathBuf::from(sandboxd_envd::callback::SANDBOX_DIR);
    let settings = GatewaySettings {
        port,
        bundle_in_sandbox: inside.join(BUNDLE_FILE).display().to_string(),
        ca_in_sandbox: inside.join(CA_FILE).display().to_string(),
    };
    Ok(Prepared {
        ca,
        listener,
        roots,
        settings,
    })
}

/// The ports a first start may take for the gateway: those above the kernel's ephemeral range
/// (`ephemeral_high`, its last port) and outside `host_ports`, starting at `offset` into them and
/// wrapping around.
fn fresh_ports(
    ephemeral_high: u16,
    host_ports: &std::ops::RangeInclusive<u16>,
    offset: u16,
) -> Vec<u16> {
    let Some(first) = ephemeral_high.checked_add(1) else {
        return Vec::new();
    };
    let mut ports: Vec<u16> = (first..=u16::MAX)
        .filter(|p| !host_ports.contains(p))
        .collect();
    if !ports.is_empty() {
        let at = usize::from(offset) % ports.len();
        ports.rotate_left(at);
    }
    ports
}

/// Binds a free port of [`fresh_ports`], tried from a random one on; one the system picks when
/// none is free (or the ephemeral range reaches the last port).
async fn bind_fresh(
    host_ports: &std::ops::RangeInclusive<u16>,
) -> anyhow::Result<tokio::net::TcpListener> {
    let ephemeral_high = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().nth(1)?.parse().ok())
        .unwrap_or(60999);
    for port in fresh_ports(ephemeral_high, host_ports, rand::random()) {
        if let Ok(listener) = tokio::net::TcpListener::bind(("0.0.0.0", port)).await {
            return Ok(listener);
        }
    }
    tokio::net::TcpListener::bind(("0.0.0.0", 0))
        .await
        .context("the egress gateway cannot listen on any port")
}

fn write_shared(path: &Path, text: &str) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let staged = path.with_extension("tmp");
    std::fs::write(&staged, text).with_context(|| format!("writing {}", staged.display()))?;
    std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o644))?;
    std::fs::rename(&staged, path).with_context(|| format!("writing {}", path.display()))
}

/// Serves the gateway for `service` until the task is aborted.
pub fn serve(
    prepared: Prepared,
    service: sandboxd_service::Service,
) -> tokio::task::JoinHandle<()> {
    let gateway = Arc::new(sandboxd_egress::Gateway::new(
        prepared.ca,
        prepared.roots,
        Arc::new(sandboxd_service::egress::GatewayRoutes(service)),
        Arc::new(sandboxd_egress::gateway::so_original_dst),
    ));
    tokio::spawn(gateway.serve(prepared.listener))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A first start's port comes from above the ephemeral range, never from it (where an outgoing
    /// connection may hold it while the daemon is down), nor from `--host-ports`; every such port is
    /// offered once, from the offset on.
    #[test]
    fn fresh_ports_sit_above_the_ephemeral_range_outside_the_host_ports() {
        let ports = fresh_ports(60999, &(62000..=62999), 5);
        assert_eq!(ports.len(), 65535 - 60999 - 1000);
        assert!(ports.iter().all(|p| *p > 60999));
        assert!(!ports.iter().any(|p| (62000..=62999).contains(p)));
        assert_eq!(ports[0], 61000 + 5);
        let mut sorted = ports.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), ports.len());
        assert!(fresh_ports(u16::MAX, &(1..=1), 0).is_empty());
        assert_eq!(fresh_ports(65533, &(1..=1), 7), vec![65535, 65534]);
    }
}
