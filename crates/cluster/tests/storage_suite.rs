//! openraft's own storage test suite, run against the durable log store and the state machine.

use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;
use sandboxd_cluster::log_store::LogStore;
use sandboxd_cluster::state_machine::StateMachineStore;
use sandboxd_cluster::{NodeId, TypeConfig};

struct Builder;

impl StoreBuilder<TypeConfig, LogStore, StateMachineStore, tempfile::TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachineStore), StorageError<NodeId>> {
        let dir = tempfile::tempdir().expect("a temporary directory");
        let log = LogStore::open(&dir.path().join("raft-log.db")).expect("opening the log");
        let sm = StateMachineStore::open(&dir.path().join("snapshots"))?;
        Ok((dir, log, sm))
    }
}

#[test]
fn log_store_and_state_machine_pass_openrafts_storage_suite() {
    Suite::test_all(Builder).expect("the storage suite");
}
