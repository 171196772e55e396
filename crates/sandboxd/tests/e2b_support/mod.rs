//! What the E2B tests add to [`crate::common`]: a [`Daemon`] set up as the E2B SDKs expect it (its
//! token is [`API_KEY`], sent as `X-API-KEY`; sandboxes under the `sandboxd-e2b` cgroup parent), and
//! [`e2b_test`], which runs a test on a two-thread runtime without the e2e time limit. Slots, logs and
//! the cleanup in `Drop` are [`crate::common::Daemon`]'s.

#![allow(dead_code)] // each test file uses a different part

use crate::common::{run_serially, Auth, Daemon, Setup};
use std::future::Future;
use std::time::Duration;

/// Cgroup parent of these daemons' sandboxes.
pub const CGROUP_PARENT: &str = "sandboxd-e2b";
/// The API key the daemon accepts.
pub const API_KEY: &str = "e2b-test-key-5b1c9e";

/// How an E2B test's daemon is set up.
pub fn setup() -> Setup {
    Setup {
        token: Some(API_KEY.to_string()),
        auth: Auth::ApiKey,
        http_timeout: Duration::from_secs(60),
        cgroup_parent: CGROUP_PARENT,
        ready_timeout: Duration::from_secs(20),
        ..Setup::default()
    }
}

/// Starts a daemon as [`setup`] says and waits until `/health` answers.
pub async fn start() -> Daemon {
    Daemon::start_setup(setup()).await
}

/// Runs one E2B test: serially with the other tests of its binary (two shared cores, and timing
/// assertions that must not measure another test's load), on its own two-thread runtime. Skipped only
/// when root tests are explicitly skipped; without root it panics.
pub fn e2b_test(test: impl Future<Output = ()>) {
    run_serially(
        tokio::runtime::Builder::new_multi_thread().worker_threads(2),
        None,
        || test,
    );
}
