//! Test doubles of the service's collaborators, for unit tests only.

use crate::Service;
use sandboxd_envd::callback::{AgentEvent, CallbackEvent};
use sandboxd_runtime::{
    AgentEndpoint, Isolation, NetAddrs, Runtime, RuntimeError, RuntimeState, SandboxInfo,
    SandboxSpec,
};
use sandboxd_store::{NewSandbox, Sandbox, SandboxState, UnixMillis};
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;

/// A runtime that keeps sandboxes in a map; tests stop or plant sandboxes behind the service's back.
/// Knobs: `delay` before each create finishes, `fail` to make creates fail, `gvisor` to offer that
/// tier, `cpu_usec` as every sandbox's CPU time; `creates`, `inspects`, `pauses` and `resumes`
/// count calls.
/// Its sandboxes' "agents" call home through [`call_home_for_tests`] once started.
#[derive(Default)]
pub(crate) struct InMemoryRuntimeForTests {
    pub(crate) sandboxes: Mutex<HashMap<String, SandboxInfo>>,
    pub(crate) creates: AtomicUsize,
    pub(crate) inspects: AtomicUsize,
    pub(crate) pauses: AtomicUsize,
    pub(crate) resumes: AtomicUsize,
    pub(crate) fail: AtomicBool,
    pub(crate) delay: Duration,
    /// Offers the gVisor tier too (until `gvisor_gone`).
    pub(crate) gvisor: bool,
    pub(crate) gvisor_gone: AtomicBool,
    pub(crate) started: Mutex<Option<UnboundedSender<(String, String)>>>,
    /// The CPU time `stats` reports for every sandbox, microseconds.
    pub(crate) cpu_usec: std::sync::atomic::AtomicU64,
}

/// Plays the agents of `runtime`'s sandboxes: each started sandbox reports `environment-ready` to `svc`
/// through the same ingestion the real agent's call-home reaches.
pub(crate) fn call_home_for_tests(svc: &Service, runtime: &InMemoryRuntimeForTests) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, String)>();
    *runtime.started.lock().unwrap() = Some(tx);
    let svc = svc.clone();
    tokio::spawn(async move {
        while let Some((id, token)) = rx.recv().await {
            let event = CallbackEvent {
                delivery_id: crate::sandboxes::random_id("dlv", 20),
                sandbox_id: id,
                event: AgentEvent::EnvironmentReady {
                    envd_version: "test".into(),
                },
            };
            let _ = svc.ingest_agent_event(&token, event).await;
        }
    });
}

impl InMemoryRuntimeForTests {
    fn info(spec: SandboxSpec, state: RuntimeState) -> SandboxInfo {
        SandboxInfo {
            net: NetAddrs {
                slot: spec.net_slot,
                host: Ipv4Addr::LOCALHOST,
                sandbox: Ipv4Addr::LOCALHOST,
                prefix: 30,
            },
            agent: AgentEndpoint {
                socket: "/nonexistent".into(),
                token: spec.agent_token.clone(),
            },
            spec,
            state,
            pid: None,
        }
    }

    /// `NotFound` unless the runtime has sandbox `id`.
    fn known(&self, id: &str) -> Result<(), RuntimeError> {
        match self.sandboxes.lock().unwrap().contains_key(id) {
            true => Ok(()),
            false => Err(RuntimeError::NotFound(id.into())),
        }
    }

    /// Plants sandbox `id` in `state`, as a dead flow (or another daemon) would have left it.
    pub(crate) fn plant(&self, id: &str, state: RuntimeState) {
        let spec = SandboxSpec::base(id, "t");
        self.sandboxes
            .lock()
            .unwrap()
            .insert(id.into(), Self::info(spec, state));
    }

    pub(crate) fn state_of(&self, id: &str) -> Option<RuntimeState> {
        self.sandboxes.lock().unwrap().get(id).map(|i| i.state)
    }

    pub(crate) fn ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.sandboxes.lock().unwrap().keys().cloned().collect();
        ids.sort();
        ids
    }
}

#[async_trait::async_trait]
impl Runtime for InMemoryRuntimeForTests {
    fn offers(&self, tier: Isolation) -> Result<(), RuntimeError> {
        match tier {
            Isolation::Namespace => Ok(()),
            Isolation::Gvisor if self.gvisor && !self.gvisor_gone.load(Ordering::SeqCst) => Ok(()),
            other => Err(RuntimeError::Unsupported(format!(
                "isolation \"{other}\" is not offered by the test runtime"
            ))),
        }
    }
    async fn create(&self, spec: &SandboxSpec) -> Result<SandboxInfo, RuntimeError> {
        self.creates.fetch_add(1, Ordering::SeqCst);
        tokio::time::sleep(self.delay).await;
        if self.fail.load(Ordering::SeqCst) {
            return Err(RuntimeError::Host("injected failure".into()));
        }
        let mut map = self.sandboxes.lock().unwrap();
        if map.contains_key(&spec.id) {
            return Err(RuntimeError::AlreadyExists(spec.id.clone()));
        }
        let info = Self::info(spec.clone(), RuntimeState::Created);
        map.insert(spec.id.clone(), info.clone());
        Ok(info)
    }
    async fn start(&self, id: &str) -> Result<SandboxInfo, RuntimeError> {
        let mut map = self.sandboxes.lock().unwrap();
        let info = map
            .get_mut(id)
            .ok_or_else(|| RuntimeError::NotFound(id.into()))?;
        info.state = RuntimeState::Running;
        if let Some(agent) = self.started.lock().unwrap().as_ref() {
            let _ = agent.send((id.to_string(), info.spec.agent_token.clone()));
        }
        Ok(info.clone())
    }
    async fn stop(&self, id: &str) -> Result<(), RuntimeError> {
        if let Some(info) = self.sandboxes.lock().unwrap().get_mut(id) {
            info.state = RuntimeState::Stopped;
        }
        Ok(())
    }
    async fn destroy(&self, id: &str) -> Result<(), RuntimeError> {
        self.sandboxes.lock().unwrap().remove(id);
        Ok(())
    }
    async fn stats(&self, id: &str) -> Result<sandboxd_runtime::cgroup::CgroupStats, RuntimeError> {
        self.known(id)?;
        Ok(sandboxd_runtime::cgroup::CgroupStats {
            memory_usage_bytes: 3 << 20,
            memory_file_bytes: 1 << 20,
            cpu_usage_usec: self.cpu_usec.load(Ordering::SeqCst),
            ..Default::default()
        })
    }

    async fn inspect(&self, id: &str) -> Result<Option<SandboxInfo>, RuntimeError> {
        self.inspects.fetch_add(1, Ordering::SeqCst);
        Ok(self.sandboxes.lock().unwrap().get(id).cloned())
    }
    async fn list(&self) -> Result<Vec<SandboxInfo>, RuntimeError> {
        Ok(self.sandboxes.lock().unwrap().values().cloned().collect())
    }
    async fn pause(&self, id: &str) -> Result<(), RuntimeError> {
        self.pauses.fetch_add(1, Ordering::SeqCst);
        self.known(id)
    }
    async fn resume(&self, id: &str) -> Result<(), RuntimeError> {
        self.resumes.fetch_add(1, Ordering::SeqCst);
        self.known(id)
    }
    async fn resize(
        &self,
        id: &str,
        limits: &sandboxd_runtime::ResourceLimits,
    ) -> Result<(), RuntimeError> {
        let mut map = self.sandboxes.lock().unwrap();
        let info = map
            .get_mut(id)
            .ok_or_else(|| RuntimeError::NotFound(id.into()))?;
        info.spec.limits = *limits;
        Ok(())
    }
}

/// A service over a fresh store in a temporary directory and an [`InMemoryRuntimeForTests`] whose agents
/// call home.
pub(crate) struct TestService {
    pub(crate) svc: Service,
    pub(crate) rt: std::sync::Arc<InMemoryRuntimeForTests>,
    _store: sandboxd_store::Store,
    _dir: tempfile::TempDir,
}

impl TestService {
    /// Must run inside a tokio runtime (the agents are a task).
    pub(crate) fn new(config: crate::ServiceConfig, rt: InMemoryRuntimeForTests) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (store, writer_thread) = sandboxd_store::Store::open(
            dir.path().join("store.db"),
            sandboxd_store::StoreConfig::default(),
        )
        .unwrap();
        drop(writer_thread);
        let rt = std::sync::Arc::new(rt);
        let svc = Service::new(
            config,
            store.writer().clone(),
            store.reader().clone(),
            rt.clone(),
        );
        call_home_for_tests(&svc, &rt);
        Self {
            svc,
            rt,
            _store: store,
            _dir: dir,
        }
    }
}

impl TestService {
    /// The directory the store lives in.
    pub(crate) fn dir(&self) -> &std::path::Path {
        self._dir.path()
    }

    /// A row in `state`, last changed at `at`, holding a slot.
    pub(crate) async fn row(&self, id: &str, name: &str, state: SandboxState, at: UnixMillis) {
        let new = NewSandbox {
            id: id.into(),
            name: name.into(),
            state,
            template: "base".into(),
            cpu_millis: 1000,
            memory_mb: 256,
            metadata: Default::default(),
            env: Default::default(),
            network: serde_json::json!({}),
            agent_token: "t".into(),
            created_at: at,
            expires_at: None,
            lifecycle: Default::default(),
            image: None,
            disk_mb: 0,
            owner: String::new(),
            isolation: "namespace".into(),
        };
        self.svc
            .writer()
            .write(move |tx| {
                let id = new.id.clone();
                tx.insert_sandbox(new)?;
                tx.lease_slot(&id, 16, at)?;
                Ok(())
            })
            .await
            .unwrap();
    }

    /// Waits until sandbox `id`'s row is gone: a delete answers before its teardown, which ends
    /// behind it ([`Service::delete`]). Panics after five seconds.
    pub(crate) async fn until_gone(&self, id: &str) {
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(5);
        while self.get(id).await.is_some() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "sandbox {id} is still there 5 s after its delete"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }

    pub(crate) async fn get(&self, id: &str) -> Option<Sandbox> {
        let id = id.to_string();
        self.svc
            .reader()
            .read(move |tx| tx.get_sandbox_by_id(&id))
            .await
            .unwrap()
    }
}
