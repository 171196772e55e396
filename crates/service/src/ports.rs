//! Exposed ports, and how the proxy finds a sandbox's services.
//!
//! Where a sandbox's services are is the runtime's fact (its address, its agent socket): the runtime is
//! the designated authority, the store keeps a copy (`sandbox_endpoints`) and the service a cache in
//! front of it. The create flow records the runtime's answer in the write that marks the sandbox
//! `starting`; a reader that finds no copy (a row from before the store kept one, a copy lost or
//! unreadable) asks the runtime synchronously, stores the answer with an upsert and serves it
//! (read-repair). Deleting or settling a sandbox forgets it.

use crate::events::{emit, Event, PORT_EXPOSED, PORT_UNEXPOSED};
use crate::{Service, ServiceError};
use sandboxd_api_types as api;
use sandboxd_proxy::{Resolver, RouteError, Target, Upstream};
use sandboxd_runtime::SandboxInfo;
use sandboxd_store::{
    unix_millis_now, ExposedPort, HostPorts, PortState, Protocol, Sandbox, SandboxState,
    StoredEndpoint,
};
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
    /// Whether anyone may reach its ports through the proxy ([`crate::previews`]).
    pub public: bool,
}

/// Cache of [`Endpoint`]s by sandbox id.
#[derive(Default)]
pub struct EndpointCache(Mutex<HashMap<String, Arc<Endpoint>>>);

impl Service {
    /// Where sandbox `id`'s services are: from the cache, else from the store, else from the runtime
    /// (read-repair: the answer is stored, then cached).
    pub async fn endpoint(&self, id: &str) -> Result<Arc<Endpoint>, ServiceError> {
        if let Some(e) = self.cached_endpoint(id) {
            return Ok(e);
        }
        let rid = id.to_string();
        let stored = self
            .reader()
            .read_by_key(move |tx| {
                let Some(endpoint) = tx.get_endpoint(&rid)? else {
                    return Ok(None);
                };
                Ok(tx.get_sandbox_by_id(&rid)?.map(|s| (s, endpoint)))
            })
            .await?;
        if let Some((sandbox, stored)) = stored {
            return Ok(self.endpoint_of(&sandbox, stored));
        }
        let info = self
            .runtime()
            .inspect(id)
            .await?
            .ok_or_else(|| ServiceError::Conflict(format!("sandbox {id} has no runtime")))?;
        tracing::debug!(sandbox_id = %id, "endpoint missing from the store; read-repaired from the runtime");
        self.record_endpoint(&info).await;
        let rid = id.to_string();
        let public = self
            .reader()
            .read_by_key(move |tx| tx.get_sandbox_by_id(&rid))
            .await?
            .is_none_or(|s| crate::previews::is_public(&s.network));
        let endpoint = Arc::new(Endpoint {
            socket: info.agent.socket,
            token: info.agent.token,
            address: info.net.sandbox,
            public,
        });
        self.inner
            .endpoints
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_string(), endpoint.clone());
        Ok(endpoint)
    }

    /// Where sandbox `sandbox`'s services are, `stored` being the store's copy read with its row:
    /// the cached endpoint if there is one, else that copy (then cached).
    pub(crate) fn endpoint_of(&self, sandbox: &Sandbox, stored: StoredEndpoint) -> Arc<Endpoint> {
        let mut cache = self
            .inner
            .endpoints
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        cache
            .entry(sandbox.id.clone())
            .or_insert_with(|| {
                Arc::new(Endpoint {
                    socket: stored.agent_socket,
                    token: sandbox.agent_token.clone(),
                    address: stored.address,
                    public: crate::previews::is_public(&sandbox.network),
                })
            })
            .clone()
    }

    /// Stores the runtime's word on where sandbox `info` is (an upsert: racing writers converge),
    /// unless its row is gone by then (deleted meanwhile: nothing is left to locate). A failure
    /// only costs a later read-repair, so it is logged, not returned.
    pub(crate) async fn record_endpoint(&self, info: &SandboxInfo) {
        let row = observed_endpoint(info);
        if let Err(e) = self
            .writer()
            .write(move |tx| {
                if tx.get_sandbox_by_id(&row.sandbox_id)?.is_some() {
                    tx.upsert_endpoint(&row)?;
                }
                Ok(())
            })
            .await
        {
            tracing::warn!(sandbox_id = %info.spec.id, error = %e, "cannot store the sandbox's endpoint");
        }
    }

    pub(crate) fn cached_endpoint(&self, id: &str) -> Option<Arc<Endpoint>> {
        self.inner
            .endpoints
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    /// Drops the cached endpoint of `id`, so the next lookup checks the store (and the runtime) again.
    pub(crate) fn evict_endpoint(&self, id: &str) {
        self.inner
            .endpoints
            .0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(id);
    }

    pub(crate) fn forget_endpoint(&self, id: &str) {
        self.inner.forwarders.remove_sandbox(id);
        self.inner.in_flight.resumed(id);
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

    /// Exposes `port` of a running sandbox: over HTTP through the proxy, or over TCP on a host port from
    /// the pool. Exposing it again returns the same exposure without walking the pool. Returns whether
    /// the exposure already existed.
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
        let protocol = match req.protocol.as_str() {
            "http" => Protocol::Http,
            "tcp" => Protocol::Tcp,
            other => {
                return Err(ServiceError::InvalidRequest(format!(
                    "unsupported protocol {other:?}: use \"http\" or \"tcp\""
                )))
            }
        };
        let sandbox = self.awake(key).await?;
        let existing = {
            let (id, port) = (sandbox.id.clone(), req.port);
            self.reader()
                .read_by_key(move |tx| tx.get_exposed_port(&id, port))
                .await?
        };
        let endpoint = self.endpoint(&sandbox.id).await?;
        let upstream = Upstream::Tcp(SocketAddr::from((endpoint.address, req.port)));
        if existing.is_none()
            && !req.skip_listen_check
            && !self
                .inner
                .listen_probes
                .listening(&sandbox.id, req.port, &upstream, LISTEN_PROBE_TIMEOUT)
                .await
        {
            return Err(ServiceError::PortNotListening(req.port));
        }
        let (row, reused) = match protocol {
            Protocol::Tcp => self.expose_tcp(&sandbox.id, req.port, upstream).await?,
            _ => {
                let (id, url) = (sandbox.id.clone(), self.public_url(&sandbox.id, req.port));
                let (row, reused, exposed) = self
                    .writer()
                    .write(move |tx| {
                        let out = tx.expose_http(&id, req.port, &url, unix_millis_now())?;
                        announce_exposure(tx, out)
                    })
                    .await?;
                self.publish(exposed);
                (row, reused)
            }
        };
        Ok((to_api(&row), reused))
    }

    /// Reserves a host port from the pool and installs its forwarder. A pool port another process on
    /// the host listens on is skipped: the reservation is withdrawn and another port is tried, until
    /// [`BUSY_HOST_PORT_RETRIES`] such ports were found. A racing caller that found another caller's
    /// reservation, not yet installed, on such a port withdraws it just the same and retries: racing
    /// callers may meet one busy port more than once (each reserves it until it learns it is busy),
    /// so only distinct ports count, and [`BUSY_HOST_PORT_ATTEMPTS`] bounds the tries.
    async fn expose_tcp(
        &self,
        id: &str,
        port: u16,
        upstream: Upstream,
    ) -> Result<(ExposedPort, bool), ServiceError> {
        let pool = self.config().host_ports.clone();
        let host = self.config().forward_ip;
        let mut busy: Vec<u16> = Vec::new();
        let (mut stale, mut attempts) = (0, 0);
        loop {
            let (id, pool, avoid) = (id.to_string(), pool.clone(), busy.clone());
            let (row, reused, exposed) = self
                .writer()
                .write(move |tx| {
                    let out = tx.allocate_host_port(
                        &id,
                        port,
                        Protocol::Tcp,
                        HostPorts {
                            range: pool,
                            avoid: &avoid,
                        },
                        |hp| format!("tcp://{host}:{hp}"),
                        unix_millis_now(),
                    )?;
                    announce_exposure(tx, out)
                })
                .await?;
            self.publish(exposed);
            // A reservation not yet installed whose host port another process holds can never be
            // installed: whichever caller finds that out withdraws it.
            let busy_port = |e: &std::io::Error| {
                e.kind() == std::io::ErrorKind::AddrInUse && row.state == PortState::Exposing
            };
            let withdraws = |e: &std::io::Error| !reused || busy_port(e);
            let failure = match self.forward(&row, upstream.clone(), withdraws).await? {
                Ok(true) => return Ok((row, reused)),
                // The reservation this call found was withdrawn while it waited for its turn (its
                // host port was busy) and the exposure now stands on another: answer that one.
                Ok(false) if stale < BUSY_HOST_PORT_RETRIES => {
                    stale += 1;
                    continue;
                }
                Ok(false) => {
                    return Err(ServiceError::Conflict(format!(
                        "port {port} of sandbox {} kept changing its host port; try again",
                        row.sandbox_id
                    )))
                }
                Err(e) => e,
            };
            attempts += 1;
            let held_elsewhere = busy_port(&failure);
            if held_elsewhere && !busy.contains(&row.host_port) {
                busy.push(row.host_port);
            }
            if held_elsewhere
                && busy.len() <= BUSY_HOST_PORT_RETRIES
                && attempts < BUSY_HOST_PORT_ATTEMPTS
            {
                tracing::info!(
                    host_port = row.host_port,
                    "host port in use on the host; trying another"
                );
                continue;
            }
            return Err(listen_failed(&row, &failure));
        }
    }

    /// Installs the forwarder of a TCP exposure. When it fails, the row is rolled back only if this call
    /// inserted it (`reused == false`): a row another caller installed is not ours to undo.
    pub(crate) async fn install_forwarder(
        &self,
        row: &ExposedPort,
        upstream: Upstream,
        reused: bool,
    ) -> Result<(), ServiceError> {
        self.forward(row, upstream, |_| !reused)
            .await?
            .map(drop)
            .map_err(|e| listen_failed(row, &e))
    }

    /// Installs the forwarder of `row`, answering the listen failure apart from the store's errors,
    /// and whether `row`'s reservation still stands (false: another caller withdrew it meanwhile,
    /// and the exposure is another reservation's now). On failure the reservation is withdrawn
    /// when `withdraws(error)` says so. The install and its withdrawal take one turn.
    async fn forward(
        &self,
        row: &ExposedPort,
        upstream: Upstream,
        withdraws: impl Fn(&std::io::Error) -> bool,
    ) -> Result<std::io::Result<bool>, ServiceError> {
        let listen = SocketAddr::new(self.config().forward_ip, row.host_port);
        let forwarders = &self.inner.forwarders;
        let _turn = forwarders.install_turn().await;
        let installed = forwarders
            .install(&row.sandbox_id, row.port, listen, upstream)
            .await;
        if let Err(e) = installed {
            tracing::warn!(sandbox_id = %row.sandbox_id, port = row.port, host_port = row.host_port, error = %e, "forwarder install failed");
            if withdraws(&e) {
                let mine = row.clone();
                let withdrawn = self
                    .writer()
                    .write(move |tx| {
                        if !tx.delete_exposed_port(&mine)? {
                            return Ok(None);
                        }
                        let data = port_data(&mine);
                        emit(tx, PORT_UNEXPOSED, Some(&mine.sandbox_id), data).map(Some)
                    })
                    .await?;
                // It was announced as exposed when its row was written.
                self.publish(withdrawn);
            }
            return Ok(Err(e));
        }
        let mine = row.clone();
        let stands = self
            .writer()
            .write(move |tx| tx.mark_port_active(&mine))
            .await?;
        Ok(Ok(stands))
    }

    /// Reinstalls the forwarders of every TCP exposure of running sandboxes (after a restart).
    pub async fn reinstall_forwarders(&self) -> Result<usize, ServiceError> {
        let rows = self
            .reader()
            .read(|tx| {
                let mut rows = tx.exposed_ports_in_state(PortState::Active)?;
                rows.extend(tx.exposed_ports_in_state(PortState::Exposing)?);
                Ok(rows)
            })
            .await?;
        let mut n = 0;
        for row in rows.into_iter().filter(|r| r.protocol == Protocol::Tcp) {
            let Ok(endpoint) = self.endpoint(&row.sandbox_id).await else {
                continue;
            };
            let upstream = Upstream::Tcp(SocketAddr::from((endpoint.address, row.port)));
            if self.install_forwarder(&row, upstream, true).await.is_ok() {
                n += 1;
            }
        }
        Ok(n)
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
                let Some(row) = tx.remove_exposed_port(&id, port)? else {
                    return Ok(None);
                };
                let data = port_data(&row);
                let ev = emit(tx, PORT_UNEXPOSED, Some(&id), data)?;
                Ok(Some((row, ev)))
            })
            .await?;
        let removed = removed.map(|(row, ev)| {
            self.publish([ev]);
            row
        });
        self.inner.forwarders.remove(&sandbox.id, port);
        if removed.is_some() {
            Ok(())
        } else {
            Err(ServiceError::NotFound(format!(
                "port {port} of sandbox {} is not exposed",
                sandbox.id
            )))
        }
    }
}

/// How many pool ports held by other processes one expose skips before it answers 503.
const BUSY_HOST_PORT_RETRIES: usize = 8;
/// How many times one expose tries busy host ports in all (the same port again among them, reserved
/// anew by a racing caller) before it answers 503.
const BUSY_HOST_PORT_ATTEMPTS: usize = 8 * BUSY_HOST_PORT_RETRIES;

fn listen_failed(row: &ExposedPort, e: &std::io::Error) -> ServiceError {
    ServiceError::Exhausted(format!(
        "could not listen on host port {}: {e}",
        row.host_port
    ))
}

/// Emits `port.exposed` for an exposure this write made (not for one that already existed).
fn announce_exposure(
    tx: &mut sandboxd_store::WriteTx<'_>,
    (row, reused): (ExposedPort, bool),
) -> sandboxd_store::Result<(ExposedPort, bool, Option<Event>)> {
    let exposed = if reused {
        None
    } else {
        Some(emit(
            tx,
            PORT_EXPOSED,
            Some(&row.sandbox_id),
            port_data(&row),
        )?)
    };
    Ok((row, reused, exposed))
}

/// The `data` of a port event.
pub(crate) fn port_data(row: &ExposedPort) -> serde_json::Value {
    let mut data = serde_json::to_value(to_api(row)).unwrap_or_default();
    data["sandboxId"] = row.sandbox_id.clone().into();
    data
}

fn to_api(row: &ExposedPort) -> api::ExposedPort {
    api::ExposedPort {
        port: row.port,
        protocol: row.protocol.as_str().to_string(),
        public_url: row.public_url.clone(),
        host_port: (row.host_port > 0).then_some(row.host_port),
    }
}

impl Service {
    /// The envd port of the running (or auto-resuming paused) sandbox whose agent token is `token`
    /// (see [`Resolver::target_for_access_token`]); `None` for any other token, or a store error.
    pub async fn target_for_access_token(&self, token: &str) -> Option<Target> {
        let token = token.to_string();
        let sandbox = self
            .reader()
            .read_by_key(move |tx| tx.get_sandbox_by_agent_token(&token))
            .await
            .ok()??;
        let routable = match sandbox.state {
            SandboxState::Running => true,
            SandboxState::Paused => sandbox.lifecycle.auto_resume,
            _ => false,
        };
        routable.then_some(Target {
            sandbox_id: sandbox.id,
            port: AGENT_PORT,
        })
    }
}

/// The store's copy of what the runtime says of `info`'s sandbox, observed now.
pub(crate) fn observed_endpoint(info: &SandboxInfo) -> StoredEndpoint {
    StoredEndpoint {
        sandbox_id: info.spec.id.clone(),
        address: info.net.sandbox,
        agent_socket: info.agent.socket.clone(),
        observed_at: unix_millis_now(),
    }
}

#[async_trait::async_trait]
impl Resolver for Service {
    async fn admit(&self, target: Target, headers: &http::HeaderMap) -> Result<Target, RouteError> {
        self.admit_request(target, headers).await
    }

    /// The sandbox's pause ([`crate::in_flight`]).
    fn closing(&self, target: &Target) -> Option<sandboxd_proxy::Closing> {
        let sandbox = target.sandbox_id.clone();
        Some(Box::pin(
            self.inner.in_flight.subscribe().until_paused(sandbox),
        ))
    }

    async fn upstream(&self, target: &Target) -> Result<Upstream, RouteError> {
        let upstream = |endpoint: &Endpoint| {
            if target.port == AGENT_PORT {
                Upstream::Unix(endpoint.socket.clone())
            } else {
                Upstream::Tcp(SocketAddr::from((endpoint.address, target.port)))
            }
        };
        // A pause evicts the sandbox's endpoint and deleting one forgets it: a hit needs no store
        // read. But a request that read the row before a pause may cache the endpoint again after
        // the eviction, and a request served from that entry would wait on frozen processes (its
        // closing signal, taken after the pause, never fires): a sandbox paused now misses, and
        // the lookup below resumes it.
        let cached = self
            .cached_endpoint(&target.sandbox_id)
            .filter(|_| !self.inner.in_flight.is_paused(&target.sandbox_id));
        if let Some(endpoint) = cached {
            return Ok(upstream(&endpoint));
        }
        let not_found = || RouteError::SandboxNotFound(target.sandbox_id.clone());
        let id = target.sandbox_id.clone();
        let sandbox = self
            .reader()
            .read_by_key(move |tx| tx.get_sandbox_by_id(&id))
            .await
            .map_err(|e| RouteError::Unavailable(e.to_string()))?
            .ok_or_else(not_found)?;
        match sandbox.state {
            SandboxState::Running => {}
            SandboxState::Paused if sandbox.lifecycle.auto_resume => {
                self.resume(&sandbox.id).await.map_err(|_| not_found())?;
            }
            _ => return Err(not_found()),
        }
        let endpoint = self.endpoint(&sandbox.id).await.map_err(|_| not_found())?;
        Ok(upstream(&endpoint))
    }
}

#[cfg(test)]
mod tests {
    use crate::test_support::{InMemoryRuntimeForTests, TestService};
    use crate::ServiceConfig;
    use sandboxd_api_types as api;
    use sandboxd_proxy::{Resolver, Target};
    use sandboxd_runtime::RuntimeState;
    use sandboxd_store::{unix_millis_now, SandboxState};
    use std::sync::atomic::Ordering;

    /// Invariant: proxied traffic to a paused auto-resuming sandbox resumes it, even when its
    /// endpoint was cached again after the pause evicted it (a request that read the row before
    /// the pause fills the cache after it): a sandbox paused now is never served from the cache.
    #[tokio::test]
    async fn a_paused_sandbox_is_not_served_from_an_endpoint_cached_after_its_pause() {
        let t = TestService::new(ServiceConfig::default(), InMemoryRuntimeForTests::default());
        let sb = t
            .svc
            .create(api::CreateSandbox {
                timeout_sec: Some(60),
                lifecycle: Some(api::Lifecycle {
                    on_timeout: api::OnTimeout::Pause,
                    auto_resume: true,
                    pause_mode: api::PauseMode::Memory,
                }),
                ..Default::default()
            })
            .await
            .unwrap();
        t.svc.pause(&sb.id).await.unwrap();
        t.svc.endpoint(&sb.id).await.unwrap();
        assert!(
            t.svc.cached_endpoint(&sb.id).is_some(),
            "the race's cache entry"
        );
        let target = Target {
            sandbox_id: sb.id.clone(),
            port: 8000,
        };
        t.svc.upstream(&target).await.unwrap();
        assert_eq!(t.rt.resumes.load(Ordering::SeqCst), 1, "resumed");
        assert_eq!(
            t.svc.get(&sb.id).await.unwrap().state,
            SandboxState::Running
        );
    }

    /// Read-repair: a sandbox whose endpoint the store lacks is looked up at the authority (the
    /// runtime) once; the answer is stored, so a fresh cache is served from the store.
    #[tokio::test]
    async fn a_missing_endpoint_is_read_repaired_from_the_runtime_and_stored() {
        let t = TestService::new(ServiceConfig::default(), InMemoryRuntimeForTests::default());
        t.row("sb-1", "", SandboxState::Running, unix_millis_now())
            .await;
        t.rt.plant("sb-1", RuntimeState::Running);
        let stored = |t: &TestService| {
            let r = t.svc.reader().clone();
            async move { r.read(|tx| tx.get_endpoint("sb-1")).await.unwrap() }
        };
        assert_eq!(stored(&t).await, None);
        let first = t.svc.endpoint("sb-1").await.unwrap();
        assert_eq!(t.rt.inspects.load(Ordering::SeqCst), 1);
        let row = stored(&t).await.expect("the answer was stored");
        assert_eq!(
            (row.address, &row.agent_socket),
            (first.address, &first.socket)
        );
        assert_eq!(first.token, "t", "the token comes from the sandbox row");
        // A new process (empty cache) is served from the store, without asking the runtime.
        t.svc.evict_endpoint("sb-1");
        let again = t.svc.endpoint("sb-1").await.unwrap();
        assert_eq!(
            (again.address, &again.socket),
            (first.address, &first.socket)
        );
        assert_eq!(t.rt.inspects.load(Ordering::SeqCst), 1);
    }
}
