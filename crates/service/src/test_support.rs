//! Test doubles of the service's collaborators, for unit tests only.

use sandboxd_runtime::{
    AgentEndpoint, NetAddrs, Runtime, RuntimeError, RuntimeState, SandboxInfo, SandboxSpec,
};
use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// A runtime that keeps sandboxes in a map; tests stop or plant sandboxes behind the service's back.
/// Knobs: `delay` before each create finishes, `fail` to make creates fail, `creates` counts them.
#[derive(Default)]
pub(crate) struct InMemoryRuntimeForTests {
    pub(crate) sandboxes: Mutex<HashMap<String, SandboxInfo>>,
    pub(crate) creates: AtomicUsize,
    pub(crate) fail: AtomicBool,
    pub(crate) delay: Duration,
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

    /// Plants sandbox `id` in `state`, as a dead flow (or another daemon) would have left it.
    pub(crate) fn plant(&self, id: &str, state: RuntimeState) {
        let spec = SandboxSpec {
            id: id.into(),
            template: "base".into(),
            limits: Default::default(),
            net_slot: 0,
            egress: false,
            envs: Default::default(),
            agent_token: "t".into(),
        };
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
    async fn inspect(&self, id: &str) -> Result<Option<SandboxInfo>, RuntimeError> {
        Ok(self.sandboxes.lock().unwrap().get(id).cloned())
    }
    async fn list(&self) -> Result<Vec<SandboxInfo>, RuntimeError> {
        Ok(self.sandboxes.lock().unwrap().values().cloned().collect())
    }
}
