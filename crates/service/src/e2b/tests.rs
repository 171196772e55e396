//! The E2B create flow's deduplication, fingerprints and connect, on the in-memory runtime.

use super::*;
use crate::test_support::{InMemoryRuntimeForTests, TestService};
use crate::ServiceConfig;
use std::sync::atomic::Ordering;

fn fixture(delay: Duration) -> TestService {
    TestService::new(
        ServiceConfig {
            net_slots: 512,
            ..ServiceConfig::default()
        },
        InMemoryRuntimeForTests {
            delay,
            ..Default::default()
        },
    )
}

/// `n` concurrent E2B creates of [`request`].
fn identical_creates(
    svc: &Service,
    n: usize,
) -> Vec<tokio::task::JoinHandle<Result<Sandbox, ServiceError>>> {
    (0..n)
        .map(|_| {
            let svc = svc.clone();
            tokio::spawn(async move { svc.e2b_create(request()).await })
        })
        .collect()
}

/// Duplicates that arrive while the first create runs wait for it and get its sandbox.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_duplicates_share_the_in_flight_create() {
    let f = fixture(Duration::from_millis(200));
    let calls = identical_creates(&f.svc, 50);
    let mut ids = std::collections::HashSet::new();
    for call in calls {
        ids.insert(call.await.unwrap().unwrap().id);
    }
    assert_eq!(ids.len(), 1, "{ids:?}");
    assert_eq!(f.rt.creates.load(Ordering::SeqCst), 1);
    // And inside the replay window, a later duplicate replays without creating.
    let again = f.svc.e2b_create(request()).await.unwrap();
    assert!(ids.contains(&again.id));
    assert_eq!(f.rt.creates.load(Ordering::SeqCst), 1);
}

/// A failed create deletes its claim: the retry creates at once instead of waiting out the lock,
/// and nothing of the failed attempt is left.
#[tokio::test]
async fn a_failed_create_deletes_its_claim_so_a_retry_starts_at_once() {
    let f = fixture(Duration::ZERO);
    f.rt.fail.store(true, Ordering::SeqCst);
    let err = f.svc.e2b_create(request()).await.unwrap_err();
    assert!(matches!(err, ServiceError::Runtime(_)), "{err:?}");
    let fp = request()
        .normalized(f.svc.config().default_timeout)
        .fingerprint();
    let claim = f.svc.create_claim(&fp).await.unwrap();
    assert_eq!(claim, None, "the failed attempt's claim is gone");
    let (left, _) = f.svc.list(Default::default()).await.unwrap();
    assert!(left.is_empty(), "{left:?}");
    f.rt.fail.store(false, Ordering::SeqCst);
    let retried = tokio::time::timeout(Duration::from_secs(5), f.svc.e2b_create(request()))
        .await
        .expect("the retry does not wait for the failed attempt's lock")
        .unwrap();
    assert_eq!(retried.state, sandboxd_store::SandboxState::Running);
}

/// Identical creates that joined an attempt whose agent never reported ready all answer with that
/// attempt's failure: one sandbox made and failed, one deadline waited out, not one per request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicates_of_a_create_that_never_became_ready_share_its_failure() {
    let f = TestService::new(
        ServiceConfig {
            net_slots: 512,
            ready_deadline: Duration::from_millis(300),
            ..ServiceConfig::default()
        },
        InMemoryRuntimeForTests::default(),
    );
    *f.rt.started.lock().unwrap() = None; // the agents never call home
    let calls = identical_creates(&f.svc, 20);
    let mut ids = std::collections::BTreeSet::new();
    for call in calls {
        match call.await.unwrap() {
            Err(ServiceError::StartFailed { id, .. }) => ids.insert(id),
            other => panic!("{other:?}"),
        };
    }
    assert_eq!(ids.len(), 1, "one failed sandbox for all: {ids:?}");
    assert_eq!(f.rt.creates.load(Ordering::SeqCst), 1);
}

/// Options that cannot be honoured, and invalid requests, are refused before anything is claimed.
#[tokio::test]
async fn refused_requests_claim_nothing() {
    let f = fixture(Duration::ZERO);
    let mut auto_resume = request();
    auto_resume.auto_resume = true;
    let mut bad_template = request();
    bad_template.template_id = "nope".into();
    let mut bad_env = request();
    bad_env.env_vars.insert("1BAD".into(), String::new());
    let mut bad_name = request();
    bad_name.allow_out = vec!["api.openai.com".into(), "bad_name.example.com".into()];
    let mut bad_deny = request();
    bad_deny.deny_out = vec!["10.0.0.0/8".into(), "::/0".into()];
    for (req, want_not_found) in [
        (auto_resume, false),
        (bad_template, true),
        (bad_env, false),
        (bad_name, false),
        (bad_deny, false),
    ] {
        let fp = req
            .clone()
            .normalized(Duration::from_secs(300))
            .fingerprint();
        let err = f.svc.e2b_create(req).await.unwrap_err();
        assert_eq!(
            matches!(err, ServiceError::NotFound(_)),
            want_not_found,
            "{err:?}"
        );
        let claim = f.svc.create_claim(&fp).await.unwrap();
        assert_eq!(claim, None);
    }
    assert_eq!(f.rt.creates.load(Ordering::SeqCst), 0);
}

/// The lists reach the runtime's spec checked and canonical (names too), and the store's row
/// records them.
#[tokio::test]
async fn network_lists_reach_the_runtime() {
    let f = fixture(Duration::ZERO);
    let mut req = request();
    req.allow_internet_access = Some(false);
    req.allow_out = vec![
        "1.1.1.1".into(),
        "api.openai.com".into(),
        "8.8.8.9/24".into(),
        "*.Example.com.".into(),
    ];
    req.deny_out = vec!["10.0.0.0/8".into(), "bad.example.com".into()];
    let sandbox = f.svc.e2b_create(req).await.unwrap();
    let spec = f.rt.sandboxes.lock().unwrap()[&sandbox.id].spec.clone();
    let text = |nets: &[sandboxd_runtime::Ipv4Net]| -> Vec<String> {
        nets.iter().map(|n| n.to_string()).collect()
    };
    assert!(!spec.egress);
    assert_eq!(text(&spec.egress_allow), ["1.1.1.1/32", "8.8.8.0/24"]);
    assert_eq!(text(&spec.egress_deny), ["10.0.0.0/8"]);
    let names = |names: &[sandboxd_runtime::NamePattern]| -> Vec<String> {
        names.iter().map(|n| n.to_string()).collect()
    };
    assert_eq!(
        names(&spec.egress_allow_names),
        ["*.example.com", "api.openai.com"]
    );
    assert_eq!(names(&spec.egress_deny_names), ["bad.example.com"]);
    assert_eq!(
        sandbox.network,
        serde_json::json!({"egress": false,
            "allowOut": ["1.1.1.1/32", "8.8.8.0/24", "*.example.com", "api.openai.com"],
            "denyOut": ["10.0.0.0/8", "bad.example.com"]})
    );
}

fn request() -> E2bCreate {
    E2bCreate {
        template_id: "base".into(),
        timeout_sec: Some(300),
        env_vars: BTreeMap::from([("A".into(), "1".into()), ("B".into(), "2".into())]),
        metadata: BTreeMap::from([("team".into(), "x".into())]),
        allow_internet_access: Some(true),
        ..Default::default()
    }
}

#[test]
fn identical_requests_share_a_fingerprint_whatever_their_key_order() {
    let a = request();
    let mut b = request();
    // Maps are sorted: insertion order cannot matter; JSON objects are canonicalised.
    b.env_vars = BTreeMap::from([("B".into(), "2".into()), ("A".into(), "1".into())]);
    let mut a2 = a.clone();
    a2.network = Some(serde_json::json!({"allowOut": ["1.1.1.1"], "denyOut": []}));
    b.network = Some(serde_json::from_str(r#"{"denyOut":[],"allowOut":["1.1.1.1"]}"#).unwrap());
    assert_eq!(a.fingerprint(), request().fingerprint());
    assert_eq!(a2.fingerprint(), b.fingerprint());
}

#[test]
fn every_deciding_field_changes_the_fingerprint() {
    let base = request().fingerprint();
    let variants: [fn(&mut E2bCreate); 11] = [
        |r| r.template_id = "other".into(),
        |r| r.timeout_sec = Some(301),
        |r| {
            r.env_vars.insert("C".into(), "3".into());
        },
        |r| {
            r.metadata.insert("team".into(), "y".into());
        },
        |r| r.auto_pause = true,
        |r| r.auto_resume = true,
        |r| r.secure = Some(true),
        |r| r.allow_internet_access = Some(false),
        |r| r.network = Some(serde_json::json!({})),
        |r| r.allow_out = vec!["1.1.1.1".into()],
        |r| r.deny_out = vec!["1.1.1.1".into()],
    ];
    for (i, change) in variants.iter().enumerate() {
        let mut r = request();
        change(&mut r);
        assert_ne!(
            r.fingerprint(),
            base,
            "variant {i} did not change the fingerprint"
        );
    }
    // An env var moved into metadata is a different request.
    let mut moved = request();
    moved.env_vars.remove("A");
    moved.metadata.insert("A".into(), "1".into());
    assert_ne!(moved.fingerprint(), base);
}

#[test]
fn defaults_dedupe_with_their_explicit_values() {
    let implicit = E2bCreate::default().normalized(Duration::from_secs(300));
    let explicit = E2bCreate {
        template_id: "base".into(),
        timeout_sec: Some(300),
        network: Some(serde_json::Value::Null),
        ..Default::default()
    }
    .normalized(Duration::from_secs(300));
    assert_eq!(implicit.fingerprint(), explicit.fingerprint());
}

#[test]
fn derived_ids_are_valid_and_differ_per_attempt() {
    let fp = request().fingerprint();
    let id = sandbox_id_for(&fp, 0, 1_000);
    assert_eq!(id.len(), SANDBOX_ID_LEN);
    assert!(sandboxd_runtime::validate_id(&id).is_ok());
    assert_eq!(id, sandbox_id_for(&fp, 0, 1_000), "deterministic");
    assert_ne!(id, sandbox_id_for(&fp, 1, 1_000), "next generation");
    assert_ne!(
        id,
        sandbox_id_for(&fp, 0, 1_001),
        "claimed again after a sweep"
    );
}
