//! The vendors' real SDKs, unmodified, against one node of a three-node cluster (in a network
//! namespace of the test's own, `cluster_support`): the placement puts two of every three sandboxes
//! on another node, so most of what the SDKs do is forwarded to the owner.

mod cluster_support;
mod common;
mod e2b_support;

use cluster_support::TestCluster;
use common::run_serially;
use e2b_support::run_script;
use std::time::Duration;

/// The Daytona SDK checks on the `base` snapshot (Daytona's default snapshot here is the code
/// interpreter's template, whose build needs egress, which the test's network namespace has not).
const DAYTONA_CHECKS: [&str; 5] = [
    "test_one_name_across_100_concurrent_creates",
    "test_stop_ends_the_processes_and_start_keeps_the_files",
    "test_sessions_keep_shell_state_and_stream_async_logs",
    "test_pty_sessions_outlive_their_connections_and_resize",
    "test_an_unknown_snapshot_is_not_found",
];

#[test]
fn the_e2b_and_daytona_sdks_work_through_one_node_of_a_cluster() {
    run_serially(
        tokio::runtime::Builder::new_multi_thread().worker_threads(2),
        Some(Duration::from_secs(900)),
        || async {
            let (e2b, daytona) = e2b_support::python_sdks();
            let c = TestCluster::start(3, &[]).await;
            let entry = c.node(0);
            run_script(
                entry,
                &e2b,
                &["tests/e2b/test_sdk.py"],
                // Volumes among them: made through this node, they live on it, and the creates
                // that mount one are placed there.
                &[("E2B_API_KEY", common::TOKEN)],
            )
            .await;
            let api = format!("{}/api", entry.url());
            let env = [
                ("DAYTONA_API_URL", api.as_str()),
                ("DAYTONA_API_KEY", common::TOKEN),
            ];
            let mut args = vec!["tests/daytona/test_sdk.py"];
            args.extend(DAYTONA_CHECKS);
            run_script(entry, &daytona, &args, &env).await;
        },
    );
}
