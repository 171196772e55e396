//! Terminals nobody can reach again, ended: the processes of the daemon's own terminals (`sbx
//! shell`, the console) whose caller can never come back to them.
//!
//! Contract:
//! - **Every such process is tagged `terminal:<daemon>:<random>`** ([`Service::terminal_tag`]),
//!   `<daemon>` naming the daemon process that opened it; nothing else is tagged `terminal:`. A
//!   Daytona PTY (`pty:<id>`) outlives its connections by design and is never touched here.
//! - **A resume ends every terminal of its sandbox before it records it running.** A pause cuts
//!   every terminal off ([`crate::terminal`]) and none can be opened until the row says running, so
//!   each `terminal:` process then is one whose caller left: whichever daemon paused the sandbox,
//!   this one or one before a restart.
//! - **A fork ends its copies of its source's terminals** before it records the fork running: their
//!   callers are attached to the source.
//! - **At start-up, every running sandbox's terminals of earlier daemons are ended**, in the
//!   background ([`Service::end_terminals_of_earlier_daemons`]): their callers' connections died
//!   with that daemon. Terminals opened meanwhile carry this daemon's name and are kept.
//! - Best effort, never in the way: an agent that cannot be reached, or does not answer within
//!   [`DEADLINE`], is logged and left; a process that has ended already is no error. The agent is
//!   found through the runtime, so the store is never written (no endpoint is read-repaired).

use crate::{Service, ServiceError};
use futures::StreamExt;
use sandboxd_envd::process::{ProcessSelector, Signal};
use sandboxd_envd::EnvdClient;
use sandboxd_store::SandboxState;
use std::time::Duration;

/// The tag prefix of a daemon terminal's process.
const PREFIX: &str = "terminal:";

/// Longest the ending of one sandbox's terminals may take.
const DEADLINE: Duration = Duration::from_secs(5);

/// How many running sandboxes the start-up sweep visits at once.
const SWEEP_CONCURRENCY: usize = 4;

/// Which terminals to end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Which {
    /// Every daemon terminal in the sandbox.
    All,
    /// Those opened by daemons other than the one named.
    NotOf(&'static str),
}

impl Which {
    /// Whether the process tagged `tag` is one of these.
    fn selects(self, tag: &str) -> bool {
        let Some(rest) = tag.strip_prefix(PREFIX) else {
            return false;
        };
        match self {
            Which::All => true,
            // A tag without a daemon's name is an earlier version's: not this daemon's.
            Which::NotOf(daemon) => rest.split_once(':').is_none_or(|(d, _)| d != daemon),
        }
    }
}

/// A name for this daemon process, unique enough to tell it from the ones before it.
pub(crate) fn daemon_name() -> &'static str {
    static NAME: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    NAME.get_or_init(|| crate::sandboxes::random_id("", 8))
}

impl Service {
    /// A new tag for a terminal this daemon opens (see the module's contract).
    pub(crate) fn terminal_tag(&self) -> String {
        crate::sandboxes::random_id(&format!("{PREFIX}{}:", daemon_name()), 16)
    }

    /// Ends the terminals `which` selects in sandbox `id`, whose agent is `client` (or the one the
    /// runtime names). Best effort, logged: see the module's contract.
    pub(crate) async fn end_terminals(&self, id: &str, client: Option<EnvdClient>, which: Which) {
        let ended = tokio::time::timeout(DEADLINE, async {
            let client = match client {
                Some(client) => client,
                // The runtime's word, not the endpoint's: nothing is read-repaired from here.
                None => {
                    let info = self.runtime().inspect(id).await?.ok_or_else(|| {
                        ServiceError::Conflict(format!("sandbox {id} has no runtime"))
                    })?;
                    EnvdClient::new(&info.agent.socket, &info.agent.token)
                }
            };
            let mut ended = 0;
            for process in client.list().await.map_err(ServiceError::Agent)? {
                if !process.tag.as_deref().is_some_and(|t| which.selects(t)) {
                    continue;
                }
                let pid = ProcessSelector::Pid(process.pid);
                match client.send_signal(pid, Signal::Sigkill).await {
                    Ok(()) => ended += 1,
                    Err(e) => {
                        tracing::debug!(sandbox_id = %id, pid = process.pid, error = %e, "a terminal to end had ended")
                    }
                }
            }
            Ok::<_, ServiceError>(ended)
        })
        .await;
        match ended {
            Ok(Ok(0)) => {}
            Ok(Ok(n)) => {
                tracing::info!(sandbox_id = %id, ended = n, "ended terminals nobody can reach")
            }
            Ok(Err(e)) => {
                tracing::warn!(sandbox_id = %id, error = %crate::error::chain(&e), "terminals nobody can reach not ended")
            }
            Err(_) => {
                tracing::warn!(sandbox_id = %id, "terminals nobody can reach not ended: the agent did not answer in time")
            }
        }
    }

    /// Ends, in every running sandbox, the terminals earlier daemons opened (see the module's
    /// contract). Run once, at start-up, behind the adoption.
    pub async fn end_terminals_of_earlier_daemons(&self) {
        let running = match self
            .reader()
            .read(|tx| tx.sandboxes_in_states(&[SandboxState::Running]))
            .await
        {
            Ok(running) => running,
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the running sandboxes to end the terminals of earlier daemons");
                return;
            }
        };
        let which = Which::NotOf(daemon_name());
        let (count, started) = (running.len(), std::time::Instant::now());
        futures::stream::iter(running)
            .for_each_concurrent(SWEEP_CONCURRENCY, |sandbox| async move {
                self.end_terminals(&sandbox.id, None, which).await
            })
            .await;
        tracing::info!(
            sandboxes = count,
            ms = started.elapsed().as_millis() as u64,
            "swept the running sandboxes for the terminals of earlier daemons"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tag selects only daemon terminals: all of them, or those of other daemons (an earlier
    /// version's, without a daemon's name, included).
    #[test]
    fn tags_select_the_terminals_of_other_daemons() {
        let all = Which::All;
        let earlier = Which::NotOf("abc");
        for tag in ["pty:1", "terminal", "mine", ""] {
            assert!(!all.selects(tag) && !earlier.selects(tag), "{tag}");
        }
        assert!(all.selects("terminal:abc:x") && !earlier.selects("terminal:abc:x"));
        assert!(all.selects("terminal:xyz:x") && earlier.selects("terminal:xyz:x"));
        assert!(earlier.selects("terminal:oldformat"));
        assert!(
            earlier.selects("terminal:abcd:x"),
            "a name is matched whole"
        );
    }
}
