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
//!   outlive a restart keep reaching it), else one the system picks, then kept. The gateway listens
//!   on every address of the host and answers only connections that come from a sandbox behind it
//!   (`sandboxd_egress::gateway`); a port it cannot have stops the start, saying which.
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

/// Makes or loads the CA, writes what sandboxes trust into `shared`, and binds the port.
pub async fn prepare(
    data_dir: &Path,
    shared: &Path,
    port: Option<u16>,
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
    let port = match port {
        Some(port) => port,
        None => std::fs::read_to_string(&saved)
            .ok()
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or(0),
    };
    let listener = tokio::net::TcpListener::bind(("0.0.0.0", port))
        .await
        .with_context(|| {
            format!("the egress gateway cannot listen on port {port} (give another with --egress-gateway-port)")
        })?;
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
