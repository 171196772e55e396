//! The reconcilers against a real store and a runtime kept in memory ([`InMemoryRuntimeForTests`]):
//! each test leaves what a dead flow leaves, runs a pass, checks store and runtime agree, and checks a
//! second pass does nothing.

use super::*;
use crate::test_support::{InMemoryRuntimeForTests, TestService};
use crate::ServiceConfig;
use sandboxd_runtime::RuntimeState;
use sandboxd_store::{ClaimOutcome, PortState};

type Fixture = TestService;

fn fixture() -> Fixture {
    TestService::new(
        ServiceConfig {
            net_slots: 16,
            ..ServiceConfig::default()
        },
        InMemoryRuntimeForTests::default(),
    )
}

/// Before this service started: what a previous daemon left.
fn before_start() -> UnixMillis {
    unix_millis_now() - 10_000
}

impl Fixture {
    async fn leased(&self) -> Vec<String> {
        self.svc
            .reader()
            .read(|tx| tx.leased_slots())
            .await
            .unwrap()
            .into_iter()
            .map(|(_, id)| id)
            .collect()
    }

    /// One pass, then a second that must find nothing to do.
    async fn pass(&self) -> SweepReport {
        let first = self.svc.reconcile_all().await;
        let second = self.svc.reconcile_all().await;
        assert_eq!(second.total_actions(), 0, "second pass acted: {second:?}");
        first
    }
}

fn actions(report: &SweepReport, reconciler: &str) -> Vec<(&'static str, usize)> {
    report
        .of(reconciler)
        .unwrap()
        .actions
        .iter()
        .map(|(k, v)| (*k, *v))
        .collect()
}

#[tokio::test]
async fn stuck_creates_fail_release_name_and_slot_and_destroy_what_started() {
    let f = fixture();
    // Died before the runtime create, and after the runtime start.
    f.row("sb-early", "web", SandboxState::Creating, before_start())
        .await;
    f.row("sb-late", "api", SandboxState::Starting, before_start())
        .await;
    f.rt.plant("sb-late", RuntimeState::Running);
    let report = f.pass().await;
    assert_eq!(actions(&report, "sandboxes"), [("failed", 2)]);
    for id in ["sb-early", "sb-late"] {
        let row = f.get(id).await.unwrap();
        assert_eq!(row.state, SandboxState::Failed, "{id}");
        assert!(row
            .failure_reason
            .unwrap()
            .contains("create never finished"));
        assert_eq!(row.name, "", "{id} keeps its name");
        assert_eq!(row.net_slot, None);
    }
    assert!(f.rt.ids().is_empty(), "{:?}", f.rt.ids());
    assert!(f.leased().await.is_empty());
    // The released name can be taken again.
    let again = f
        .svc
        .create(sandboxd_api_types::CreateSandbox {
            name: Some("web".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(again.state, SandboxState::Running);
}

#[tokio::test]
async fn a_create_in_flight_is_left_alone_until_its_deadline() {
    let f = fixture();
    f.row("sb-now", "", SandboxState::Creating, unix_millis_now())
        .await;
    f.rt.plant("sb-now", RuntimeState::Created);
    let report = f.pass().await;
    assert_eq!(report.total_actions(), 0, "{report:?}");
    assert_eq!(f.get("sb-now").await.unwrap().state, SandboxState::Creating);
    assert_eq!(f.rt.state_of("sb-now"), Some(RuntimeState::Created));
    // Past the deadline (here: any age) it is resolved.
    let impatient = Service::new(
        ServiceConfig {
            reconcile_deadline: Duration::ZERO,
            ..f.svc.config().clone()
        },
        f.svc.writer().clone(),
        f.svc.reader().clone(),
        f.rt.clone(),
    );
    let report = impatient.reconcile_all().await;
    assert_eq!(actions(&report, "sandboxes"), [("failed", 1)]);
    assert_eq!(f.get("sb-now").await.unwrap().state, SandboxState::Failed);
    assert!(f.rt.ids().is_empty());
}

#[tokio::test]
async fn interrupted_deletes_are_finished() {
    let f = fixture();
    f.row("sb-del", "x", SandboxState::Deleting, before_start())
        .await;
    f.rt.plant("sb-del", RuntimeState::Running);
    let report = f.pass().await;
    assert_eq!(actions(&report, "sandboxes"), [("deleted", 1)]);
    assert!(f.get("sb-del").await.is_none());
    assert!(f.rt.ids().is_empty());
    assert!(f.leased().await.is_empty());
}

/// An interrupted stop is finished, not undone: the processes end and the row is `stopped`, with
/// its filesystem (the runtime's sandbox) and its slot kept for a start.
#[tokio::test]
async fn interrupted_stops_are_finished_keeping_the_sandbox() {
    let f = fixture();
    f.row("sb-stop", "kept", SandboxState::Stopping, before_start())
        .await;
    f.rt.plant("sb-stop", RuntimeState::Running);
    let report = f.pass().await;
    assert_eq!(actions(&report, "sandboxes"), [("stopped", 1)]);
    assert_eq!(f.get("sb-stop").await.unwrap().state, SandboxState::Stopped);
    assert_eq!(f.rt.state_of("sb-stop"), Some(RuntimeState::Stopped));
    assert_eq!(f.leased().await.len(), 1);
}

#[tokio::test]
async fn running_rows_whose_runtime_died_are_lost_and_live_ones_are_kept() {
    let f = fixture();
    f.row("sb-ok", "keep", SandboxState::Running, unix_millis_now())
        .await;
    f.rt.plant("sb-ok", RuntimeState::Running);
    f.row("sb-gone", "gone", SandboxState::Running, unix_millis_now())
        .await;
    f.row("sb-dead", "", SandboxState::Paused, unix_millis_now())
        .await;
    f.rt.plant("sb-dead", RuntimeState::Stopped);
    let report = f.pass().await;
    assert_eq!(actions(&report, "sandboxes"), [("lost", 2)]);
    let ok = f.get("sb-ok").await.unwrap();
    assert_eq!(
        (ok.state, ok.name.as_str()),
        (SandboxState::Running, "keep")
    );
    for id in ["sb-gone", "sb-dead"] {
        let row = f.get(id).await.unwrap();
        assert_eq!(row.state, SandboxState::Lost);
        assert_eq!(row.name, "");
        assert!(row.failure_reason.is_some());
    }
    assert_eq!(f.rt.ids(), ["sb-ok"]);
    assert_eq!(f.leased().await, ["sb-ok"]);
}

#[tokio::test]
async fn orphans_are_destroyed() {
    let f = fixture();
    f.rt.plant("sb-orphan", RuntimeState::Running);
    f.rt.plant("sb-orphan2", RuntimeState::Stopped);
    let report = f.pass().await;
    assert_eq!(actions(&report, "sandboxes"), [("orphans", 2)]);
    assert!(f.rt.ids().is_empty());
}

#[tokio::test]
async fn settled_rows_give_back_names_runtime_traces_and_slots() {
    let f = fixture();
    // What an older build left: failed and lost rows still named, holding slots, one with a trace.
    f.row("sb-f", "named", SandboxState::Failed, before_start())
        .await;
    f.row("sb-l", "", SandboxState::Lost, before_start()).await;
    f.rt.plant("sb-l", RuntimeState::Stopped);
    let report = f.pass().await;
    assert_eq!(
        actions(&report, "sandboxes"),
        [("cleaned", 1), ("names_released", 1)]
    );
    assert_eq!(actions(&report, "slots"), [("released", 2)]);
    assert!(f.rt.ids().is_empty());
    assert!(f.leased().await.is_empty());
    assert_eq!(f.get("sb-f").await.unwrap().name, "");
}

#[tokio::test]
async fn stuck_exposures_are_activated_kept_or_dropped_by_their_sandbox() {
    let f = fixture();
    f.row("sb-run", "", SandboxState::Running, unix_millis_now())
        .await;
    f.rt.plant("sb-run", RuntimeState::Running);
    f.row("sb-pau", "", SandboxState::Paused, unix_millis_now())
        .await;
    f.rt.plant("sb-pau", RuntimeState::Running);
    f.row("sb-bad", "", SandboxState::Failed, unix_millis_now())
        .await;
    let at = before_start();
    f.svc
        .writer()
        .write(move |tx| {
            tx.expose_http("sb-run", 8000, "u", at)?;
            tx.expose_http("sb-pau", 8000, "u", at)?;
            tx.expose_http("sb-bad", 8000, "u", at)?;
            // An active exposure of a settled sandbox still holds its port: released too.
            let (held, _) = tx.expose_http("sb-bad", 8002, "u", unix_millis_now())?;
            tx.mark_port_active(&held)?;
            // Fresh: its expose may still be in flight.
            tx.expose_http("sb-run", 8001, "u", unix_millis_now())?;
            Ok(())
        })
        .await
        .unwrap();
    let report = f.pass().await;
    assert_eq!(
        actions(&report, "ports"),
        [("activated", 1), ("released", 2)]
    );
    let state = |id: &'static str, port: u16| {
        let r = f.svc.reader().clone();
        async move {
            r.read(move |tx| tx.get_exposed_port(id, port))
                .await
                .unwrap()
                .map(|p| p.state)
        }
    };
    assert_eq!(state("sb-run", 8000).await, Some(PortState::Active));
    assert_eq!(state("sb-run", 8001).await, Some(PortState::Exposing));
    assert_eq!(state("sb-pau", 8000).await, Some(PortState::Exposing));
    assert_eq!(state("sb-bad", 8000).await, None);
    assert_eq!(state("sb-bad", 8002).await, None);
}

#[tokio::test]
async fn abandoned_create_claims_are_undone() {
    let f = fixture();
    f.row("sb-claimed", "", SandboxState::Running, unix_millis_now())
        .await;
    f.rt.plant("sb-claimed", RuntimeState::Running);
    let at = before_start();
    f.svc
        .writer()
        .write(move |tx| {
            let scope = crate::idempotency::V1_CREATE_SCOPE;
            let ClaimOutcome::Acquired { generation } =
                tx.claim(scope, "fp", "h", at, Duration::from_millis(10))?
            else {
                panic!("a fresh claim is acquired")
            };
            tx.set_claim_target(scope, "fp", generation, "sb-claimed")?;
            Ok(())
        })
        .await
        .unwrap();
    let report = f.pass().await;
    assert_eq!(actions(&report, "claims"), [("creates_undone", 1)]);
    f.until_gone("sb-claimed").await;
    assert!(f.rt.ids().is_empty());
    let claim = f
        .svc
        .reader()
        .read(|tx| tx.get_claim(crate::idempotency::V1_CREATE_SCOPE, "fp"))
        .await
        .unwrap();
    assert!(claim.is_none());
}
