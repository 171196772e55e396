//! Resizing a sandbox: new CPU, memory and disk limits, checked against the daemon's limits as a
//! create's are ([`Service::check_resources`]).
//!
//! Guarantees:
//! - **One operation per sandbox at a time**, with stop, start, pause and resume (the sandbox's
//!   lock).
//! - **What may change.** A sandbox whose processes live (running or paused) may only grow in CPU
//!   and memory (a smaller memory limit under live processes would have the kernel kill them); its
//!   disk limit changes only while it is stopped, and only grows (a layer already holding more than a
//!   smaller limit could not be written again). A stopped sandbox's CPU and memory change either way.
//!   Anything else is refused with the reason, and nothing changes.
//! - **The runtime first, then the row.** A resize the runtime refuses changes nothing. The runtime
//!   persists the new limits, so the next start boots with them; the row, written next, is what every
//!   surface reports.

use crate::{Service, ServiceError};
use sandboxd_runtime::ResourceLimits;
use sandboxd_store::{unix_millis_now, Sandbox, SandboxState};

/// A resize: each `None` keeps what the sandbox has.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Resize {
    /// CPUs.
    pub cpu: Option<f64>,
    /// Memory, MiB.
    pub memory_mb: Option<u64>,
    /// Disk limit of the writable layer, MiB.
    pub disk_mb: Option<u64>,
}

impl Service {
    /// Gives sandbox `key` the resources `to` asks for; returns the sandbox as it is then.
    pub async fn resize(&self, key: &str, to: Resize) -> Result<Sandbox, ServiceError> {
        if to == Resize::default() {
            return Err(ServiceError::InvalidRequest(
                "a resize names cpu, memory or disk".into(),
            ));
        }
        let id = self.get(key).await?.id;
        let _serial = self.inner.sandbox_locks.lock(&id).await;
        let sandbox = self.get(&id).await?;
        let live = match sandbox.state {
            SandboxState::Running | SandboxState::Paused => true,
            SandboxState::Stopped => false,
            other => {
                return Err(ServiceError::Conflict(format!(
                "sandbox {id} is {other}: only a running, paused or stopped sandbox can be resized"
            )))
            }
        };
        let (cpu_millis, memory_mb, _) = self.check_resources(
            Some(to.cpu.unwrap_or(f64::from(sandbox.cpu_millis) / 1000.0)),
            Some(to.memory_mb.unwrap_or(sandbox.memory_mb.into())),
            None,
        )?;
        let disk_mb = match to.disk_mb {
            Some(asked) => self.check_resources(None, None, Some(asked))?.2,
            None => sandbox.disk_mb.into(),
        };
        let memory_mb = u32::try_from(memory_mb).unwrap_or(u32::MAX);
        let disk_mb = u32::try_from(disk_mb).unwrap_or(u32::MAX);
        if live && (cpu_millis < sandbox.cpu_millis || memory_mb < sandbox.memory_mb) {
            return Err(ServiceError::InvalidRequest(format!(
                "sandbox {id} is {}: its cpu and memory can only grow while it runs (stop it to shrink them)",
                sandbox.state
            )));
        }
        if disk_mb != sandbox.disk_mb {
            if live {
                return Err(ServiceError::Conflict(format!(
                    "sandbox {id} is {}: its disk can only be resized while it is stopped",
                    sandbox.state
                )));
            }
            if disk_mb < sandbox.disk_mb {
                return Err(ServiceError::InvalidRequest(format!(
                    "a disk can only grow: sandbox {id} has {} MiB",
                    sandbox.disk_mb
                )));
            }
        }
        let limits = ResourceLimits {
            memory_mb: memory_mb.into(),
            cpu_millis,
            pids_max: ResourceLimits::default().pids_max,
            disk_mb: disk_mb.into(),
        };
        self.runtime().resize(&id, &limits).await?;
        let rid = id.clone();
        self.writer()
            .write(move |tx| {
                tx.set_resources(&rid, cpu_millis, memory_mb, disk_mb, unix_millis_now())
            })
            .await?;
        self.get(&id).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{InMemoryRuntimeForTests, TestService};
    use crate::ServiceConfig;
    use sandboxd_api_types as api;

    fn service() -> TestService {
        let config = ServiceConfig {
            disk_quota: true,
            ..ServiceConfig::default()
        };
        TestService::new(config, InMemoryRuntimeForTests::default())
    }

    async fn sandbox(t: &TestService) -> Sandbox {
        let create = api::CreateSandbox {
            cpu: Some(1.0),
            memory_mb: Some(512),
            disk_mb: Some(1024),
            ..Default::default()
        };
        t.svc.create(create).await.unwrap()
    }

    fn limits_of(t: &TestService, id: &str) -> ResourceLimits {
        let sandboxes = t.rt.sandboxes.lock().unwrap();
        sandboxes[id].spec.limits
    }

    /// A running sandbox grows in CPU and memory, at the runtime and in the row; it cannot shrink
    /// or change its disk; a stopped one shrinks and grows its disk, never shrinks it.
    #[tokio::test]
    async fn a_resize_grows_a_running_sandbox_and_changes_disk_only_when_stopped() {
        let t = service();
        let s = sandbox(&t).await;
        let grown = t
            .svc
            .resize(
                &s.id,
                Resize {
                    cpu: Some(2.0),
                    memory_mb: Some(1024),
                    disk_mb: None,
                },
            )
            .await
            .unwrap();
        assert_eq!(
            (grown.cpu_millis, grown.memory_mb, grown.disk_mb),
            (2000, 1024, 1024)
        );
        assert_eq!(limits_of(&t, &s.id).memory_mb, 1024, "the runtime has it");

        let shrink = Resize {
            memory_mb: Some(256),
            ..Default::default()
        };
        let refused = t.svc.resize(&s.id, shrink).await;
        assert!(
            matches!(refused, Err(ServiceError::InvalidRequest(_))),
            "{refused:?}"
        );
        let disk = Resize {
            disk_mb: Some(2048),
            ..Default::default()
        };
        let refused = t.svc.resize(&s.id, disk).await;
        assert!(
            matches!(refused, Err(ServiceError::Conflict(_))),
            "{refused:?}"
        );
        let nothing = t.svc.resize(&s.id, Resize::default()).await;
        assert!(
            matches!(nothing, Err(ServiceError::InvalidRequest(_))),
            "{nothing:?}"
        );
        let unchanged = t.svc.get(&s.id).await.unwrap();
        assert_eq!(
            (unchanged.memory_mb, unchanged.disk_mb),
            (1024, 1024),
            "refusals change nothing"
        );

        t.svc.stop(&s.id).await.unwrap();
        let stopped = t.svc.resize(&s.id, shrink).await.unwrap();
        assert_eq!(stopped.memory_mb, 256);
        let stopped = t.svc.resize(&s.id, disk).await.unwrap();
        assert_eq!(stopped.disk_mb, 2048);
        assert_eq!(limits_of(&t, &s.id).disk_mb, 2048);
        let smaller = Resize {
            disk_mb: Some(1024),
            ..Default::default()
        };
        let refused = t.svc.resize(&s.id, smaller).await;
        assert!(
            matches!(refused, Err(ServiceError::InvalidRequest(_))),
            "{refused:?}"
        );
        let huge = Resize {
            cpu: Some(10_000.0),
            ..Default::default()
        };
        let refused = t.svc.resize(&s.id, huge).await;
        assert!(
            matches!(refused, Err(ServiceError::InvalidRequest(_))),
            "{refused:?}"
        );
    }
}
