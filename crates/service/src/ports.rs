//! Exposed ports, and how the proxy finds a sandbox's services.
//!
//! Where a sandbox's services are is the runtime's fact (its address, its agent socket). The service
//! keeps a cache of it and, on a miss, asks the runtime synchronously and keeps the answer
//! (read-repair); deleting a sandbox forgets it.

use crate::{Service, ServiceError};
use sandboxd_api_types as api;
use sandboxd_proxy::{port_is_listening, Resolver, RouteError, Target, Upstream};
use sandboxd_store::{unix_millis_now, ExposedPort, SandboxState};
use std::collections::HashMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Port of the agent (envd) inside every sandbox, as the E2B SDK addresses it.
pub const AGENT_PORT: u16 = 49983;
const LISTEN_PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Where one sandbox's services are.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The agent's unix socket.
    pub socket: PathBuf,
    /// The agent's token.
    pub token: String,
    /// The sandbox's address on its veth pair.
    pub address: Ipv4Addr,
}

/// Cache of [`Endpoint`]s by sandbox id.
#[derive(Default)]
pub struct EndpointCache(Mutex<HashMap<String, Arc<Endpoint>>>);

impl Service {
    /// Where sandbox `id`'s services are: from the cache, else from the runtime (and then cached).
    pub async fn endpoint(&self, id: &str) -> Result<Arc<Endpoint>, ServiceError> {
        if let Some(e) = self
            .inner
            .endpoints
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
        {
            return Ok(e.clone());
        }
        let info = self
            .runtime()
            .inspect(id)
            .await?
            .ok_or_else(|| ServiceError::Conflict(format!("sandbox {id} has no runtime")))?;
        let endpoint = Arc::new(Endpoint {
            socket: info.agent.socket,
            token: info.agent.token,
            address: info.net.sandbox,
        });
        self.inner
            .endpoints
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_string(), endpoint.clone());
        Ok(endpoint)
    }

    fn cached_endpoint(&self, id: &str) -> Option<Arc<Endpoint>> {
        self.inner
            .endpoints
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    pub(crate) fn forget_endpoint(&self, id: &str) {
        self.inner
            .endpoints
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }

    /// The public URL of `port` of sandbox `id`.
    pub fn public_url(&self, id: &str, port: u16) -> String {
        let cfg = self.config();
        format!("http://{port}-{id}.{}:{}", cfg.domain, cfg.public_port)
    }

    /// Exposes `port` of a running sandbox over HTTP. Exposing it again returns the same exposure.
    pub async fn expose(
        &self,
        key: &str,
        req: api::ExposePort,
    ) -> Result<(api::ExposedPort, bool), ServiceError> {
        if req.port == 0 {
            return Err(ServiceError::InvalidRequest(
                "port must be between 1 and 65535".into(),
            ));
        }
        if req.protocol != "http" {
            return Err(ServiceError::InvalidRequest(format!(
                "unsupported protocol {:?}: use \"http\"",
                req.protocol
            )));
        }
        let sandbox = self.get(key).await?;
        if sandbox.state != SandboxState::Running {
            return Err(ServiceError::Conflict(format!(
                "sandbox {} is {}, not running",
                sandbox.id, sandbox.state
            )));
        }
        let endpoint = self.endpoint(&sandbox.id).await?;
        let upstream = Upstream::Tcp(SocketAddr::from((endpoint.address, req.port)));
        if !port_is_listening(&upstream, LISTEN_PROBE_TIMEOUT).await {
            return Err(ServiceError::PortNotListening(req.port));
        }
        let url = self.public_url(&sandbox.id, req.port);
        let id = sandbox.id.clone();
        let (row, existed) = self
            .writer()
            .write(move |tx| tx.expose_http(&id, req.port, &url, unix_millis_now()))
            .await?;
        Ok((to_api(&row), existed))
    }

    /// The exposed ports of a sandbox.
    pub async fn ports(&self, key: &str) -> Result<Vec<api::ExposedPort>, ServiceError> {
        let sandbox = self.get(key).await?;
        let rows = self
            .reader()
            .read(move |tx| tx.exposed_ports(&sandbox.id))
            .await?;
        Ok(rows.iter().map(to_api).collect())
    }

    /// Withdraws an exposure; unknown exposures are [`ServiceError::NotFound`].
    pub async fn unexpose(&self, key: &str, port: u16) -> Result<(), ServiceError> {
        let sandbox = self.get(key).await?;
        let id = sandbox.id.clone();
        let removed = self
            .writer()
            .write(move |tx| {
                let Some(row) = tx.get_exposed_port(&id, port)? else {
                    return Ok(false);
                };
                tx.delete_exposed_port(&row)
            })
            .await?;
        if removed {
            Ok(())
        } else {
            Err(ServiceError::NotFound(format!(
                "port {port} of sandbox {} is not exposed",
                sandbox.id
            )))
        }
    }
}

fn to_api(row: &ExposedPort) -> api::ExposedPort {
    api::ExposedPort {
        port: row.port,
        protocol: row.protocol.as_str().to_string(),
        public_url: row.public_url.clone(),
    }
}

#[async_trait::async_trait]
impl Resolver for Service {
    async fn upstream(&self, target: &Target) -> Result<Upstream, RouteError> {
        let upstream = |endpoint: &Endpoint| {
            if target.port == AGENT_PORT {
                Upstream::Unix(endpoint.socket.clone())
            } else {
                Upstream::Tcp(SocketAddr::from((endpoint.address, target.port)))
            }
        };
        // Only running sandboxes are cached, and deleting one forgets it: a hit needs no store read.
        if let Some(endpoint) = self.cached_endpoint(&target.sandbox_id) {
            return Ok(upstream(&endpoint));
        }
        let not_found = || RouteError::SandboxNotFound(target.sandbox_id.clone());
        let id = target.sandbox_id.clone();
        let sandbox = self
            .reader()
            .read(move |tx| tx.get_sandbox_by_id(&id))
            .await
            .map_err(|e| RouteError::Unavailable(e.to_string()))?
            .ok_or_else(not_found)?;
        if sandbox.state != SandboxState::Running {
            return Err(not_found());
        }
        let endpoint = self.endpoint(&sandbox.id).await.map_err(|_| not_found())?;
        Ok(upstream(&endpoint))
    }
}
