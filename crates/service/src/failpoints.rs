//! The named steps tests can stop a flow at (compiled in with the `failpoints` feature, set through the
//! `FAILPOINTS` environment variable, e.g. `FAILPOINTS="create.after-runtime=1*off->return(60000)"`).
//!
//! | failpoint | where the flow stands |
//! |---|---|
//! | `create.after-insert` | row `creating` and slot leased; the runtime has made nothing |
//! | `create.before-admit` | a warm pool's sandbox taken by a create; its adoption under the create's id goes on; no row written, the entry not yet claimed |
//! | `create.adopt` | as `create.adopting`; `return` fails the adoption (synchronous) |
//! | `create.adopting` | a warm pool's sandbox taken by a create; its row written `running` and its entry claimed meanwhile; the sandbox not yet adopted (still under its pool id) |
//! | `pool.after-insert` | warm-pool entry `warming` with its slot; the runtime has made nothing |
//! | `pool.after-ready` | warm-pool entry `ready` (its agent called home); not yet warmed up or offered to creates |
//! | `create.after-runtime` | row `starting` with its endpoint, the sandbox booted; its call home not yet awaited |
//! | `delete.after-mark` | row `deleting`; the runtime's sandbox not yet destroyed |
//! | `delete.teardown` | row `deleting`, the sandbox's processes ended and the delete answered; its cgroup, network, layer and row not yet removed |
//! | `stop.after-claim` | row `stopping`; the sandbox's processes not yet ended |
//! | `expose.forwarder` | exposure row `exposing`; its TCP forwarder not yet listening (synchronous: `return` fails the install, `sleep(MS)` blocks it) |
//! | `idempotency.before-complete` | the work done; its claim not yet completed |
//! | `callback.before-apply` | an agent's event received; nothing written |
//! | `callback.after-apply` | the event's change committed; not yet answered |
//! | `fork.after-restore` | fork rows `creating` with their slots; the runtime restored the copies, which run; none recorded running yet |
//! | `terminal.before-attach` | a terminal's process started in its sandbox; its pid not yet read from its stream |
//! | `pause.after-record` | row `paused`; the sandbox not yet frozen, the pause not yet announced to the requests in flight |
//! | `expiry.after-pause` | an auto-pausing sandbox paused at its deadline; the deadline not yet dropped |
//! | `domain.bind-write` | a custom hostname bound in the cluster log; `return` fails its local write |
//! | `agent.exit-before-ready` (runtime) | `return`: the booting agent exits before its first call home |
//!
//! The flow steps are `hold` points: `return(MS)` parks the flow for MS milliseconds *without*
//! blocking a runtime worker, so the rest of the daemon (an agent's call-home, other requests) goes on
//! while a test kills it there. (The `fail` crate's own `sleep` blocks the thread, and a task queued
//! behind a blocked worker can starve.)

use std::time::Duration;

/// Parks the calling flow at failpoint `name` for the milliseconds its `return(MS)` action names.
pub(crate) async fn hold(name: &str) {
    if let Some(ms) = parked_for(name) {
        tracing::warn!(failpoint = name, ms, "holding at a failpoint");
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

/// Whether failpoint `name` fires (a `return` action): the step it guards then fails.
pub(crate) fn fails(name: &str) -> bool {
    let _ = name; // unused without the `failpoints` feature
    fail::fail_point!(name, |_| true);
    false
}

/// The milliseconds failpoint `name`'s `return(MS)` action asks for, if it fires.
fn parked_for(name: &str) -> Option<u64> {
    let _ = name; // unused without the `failpoints` feature
    fail::fail_point!(name, |arg: Option<String>| arg.and_then(|a| a.parse().ok()));
    None
}
