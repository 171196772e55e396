//! Stopping a sandbox and starting it again: a stop ends every process of the sandbox and releases
//! its memory, keeping its writable layer (everything it wrote), its name, its network slot and its
//! exposures' records; a start boots it again on the same filesystem, with a fresh agent that calls
//! home as at create, and runs its template's start commands again. (A pause, by contrast, freezes
//! the processes in memory.)
//!
//! Guarantees:
//! - **One operation per sandbox at a time**, with pause and resume ([`crate::pause::KeyedLocks`]).
//! - **Intent first.** A stop records `stopping` before the runtime ends the processes, then
//!   `stopped`; a daemon that dies in between leaves `stopping`, which the reconciler finishes (the
//!   processes ended, the row `stopped`) — never a row that claims to run what is gone. A start
//!   records `starting` before the boot and waits for the agent's report like a create; a boot that
//!   fails or never reports leaves the sandbox `failed` (its layer is kept until it is deleted).
//! - Stopping a stopped sandbox and starting a running one report that nothing was done; any other
//!   state is a conflict. Commands, files and ports of a stopped sandbox are conflicts
//!   ([`Service::awake`]), answered at once.

use crate::events::SANDBOX_STOPPED;
use crate::{Service, ServiceError};
use sandboxd_store::{unix_millis_now, Sandbox, SandboxState};

impl Service {
    /// Stops sandbox `key`; returns it (`stopped`) and whether this call stopped it.
    pub async fn stop(&self, key: &str) -> Result<(Sandbox, bool), ServiceError> {
        let id = self.get(key).await?.id;
        let _serial = self.inner.sandbox_locks.lock(&id).await;
        self.stop_locked(&id).await
    }

    /// [`Service::stop`] for a caller that holds sandbox `id`'s lock.
    pub(crate) async fn stop_locked(&self, id: &str) -> Result<(Sandbox, bool), ServiceError> {
        let id = id.to_string();
        let sandbox = self.get(&id).await?;
        let from = match sandbox.state {
            SandboxState::Stopped => return Ok((sandbox, false)),
            s @ (SandboxState::Running | SandboxState::Paused) => s,
            other => {
                return Err(ServiceError::Conflict(format!(
                    "sandbox {id} is {other}: only a running or paused sandbox can be stopped"
                )))
            }
        };
        self.claim_state(&id, from, SandboxState::Stopping).await?;
        crate::failpoints::hold("stop.after-claim").await;
        self.finish_stop(&id).await.map(|s| (s, true))
    }

    /// Moves sandbox `id` from `from` to `to`; a conflict when it was no longer in `from` (only a
    /// delete moves it meanwhile: the caller holds the sandbox's lock).
    async fn claim_state(
        &self,
        id: &str,
        from: SandboxState,
        to: SandboxState,
    ) -> Result<(), ServiceError> {
        let rid = id.to_string();
        let claimed = self
            .writer()
            .write(move |tx| tx.set_state(&rid, &[from], to, None, unix_millis_now()))
            .await?;
        if claimed {
            Ok(())
        } else {
            Err(ServiceError::Conflict(format!(
                "sandbox {id} is being deleted"
            )))
        }
    }

    /// Ends the processes of `stopping` sandbox `id` and records it `stopped` (also the reconciler's
    /// way to finish an interrupted stop).
    pub(crate) async fn finish_stop(&self, id: &str) -> Result<Sandbox, ServiceError> {
        // Nothing may reach the old processes' addresses through a cached endpoint meanwhile.
        self.forget_endpoint(id);
        // Their usage history ends with them.
        self.inner.usage_history.forget(id);
        self.runtime().stop(id).await?;
        self.transition(
            id,
            SandboxState::Stopping,
            SandboxState::Stopped,
            SANDBOX_STOPPED,
            None,
        )
        .await?
        .ok_or_else(|| ServiceError::Conflict(format!("sandbox {id} is being deleted")))
    }

    /// Starts stopped sandbox `key` again (a paused one is resumed); returns it once it runs (and
    /// its template's start commands are up), and whether this call started it.
    pub async fn start(&self, key: &str) -> Result<(Sandbox, bool), ServiceError> {
        let id = self.get(key).await?.id;
        let serial = self.inner.sandbox_locks.lock(&id).await;
        let sandbox = self.get(&id).await?;
        match sandbox.state {
            SandboxState::Running => return Ok((sandbox, false)),
            SandboxState::Paused => {
                drop(serial);
                return self.resume(&id).await;
            }
            SandboxState::Stopped => {}
            other => {
                return Err(ServiceError::Conflict(format!(
                    "sandbox {id} is {other}: only a stopped sandbox can be started"
                )))
            }
        }
        self.claim_state(&id, SandboxState::Stopped, SandboxState::Starting)
            .await?;
        let deadline = tokio::time::Instant::now() + self.config().ready_deadline;
        match self.runtime().start(&id).await {
            Ok(info) => self.record_endpoint(&info).await,
            Err(e) => {
                let reason = format!("it could not be started again: {}", crate::error::chain(&e));
                self.settle(&id, SandboxState::Starting, SandboxState::Failed, reason)
                    .await?;
                return Err(e.into());
            }
        }
        let mut ready = self.await_ready(&id, deadline).await?;
        // Auto-paused to its files, it lost its deadline: it gets its create's timeout again.
        let lifecycle = ready.lifecycle;
        if lifecycle.auto_pause && ready.expires_at.is_none() && lifecycle.timeout_ms > 0 {
            let timeout = std::time::Duration::from_millis(lifecycle.timeout_ms as u64);
            ready = self.set_timeout(&id, timeout, false).await?;
        }
        drop(serial);
        let commands = match self.get_template(&ready.template).await {
            Ok(t) => crate::templates::StartCommands {
                start: t.start_cmd,
                ready: t.ready_cmd,
            },
            Err(_) => crate::templates::StartCommands::default(),
        };
        if commands != crate::templates::StartCommands::default() {
            self.run_start_commands(&id, &commands).await?;
        }
        Ok((ready, true))
    }
}
