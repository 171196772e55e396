//! Creates that wait for their template's build: [`Service::create_when_built`] answers at once
//! with a [`PendingCreate`] (its id chosen, its name held), and the create runs in the background
//! once the template is ready — Daytona's `pending_build` → `building_snapshot` → `starting`.
//!
//! Guarantees:
//! - **The request is checked first**, as a create's is ([`Service::plan_create`]); a bad one is
//!   refused and nothing is held.
//! - **A name is held once.** A pending create's name is taken for every other create that asks
//!   the daemon while it waits (this registry or the store has it: a conflict); a create elsewhere
//!   that took it meanwhile makes this one fail with the conflict, as two creates of one name do.
//! - **Its id is the sandbox's.** From the moment the create inserts its row, the row is what
//!   [`Service::get`] finds; until then, and after a failure, [`Service::pending_create`] answers.
//! - **A failure is kept** for [`FAILED_KEPT`], with why (`build_failed` when the build failed),
//!   then forgotten; a cancel ([`Service::cancel_pending`]) before the create ends it, and one
//!   that loses the race to the create deletes the sandbox it made.
//! - The registry is in memory: a daemon restart forgets pending creates (their builds go on;
//!   the callers' waits end in not-found).

use crate::sandboxes::random_id;
use crate::{Service, ServiceError};
use sandboxd_api_types as api;
use sandboxd_store::{unix_millis_now, IdlePolicy, TemplateState, UnixMillis};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

/// How long a failed pending create is kept for its callers to see.
pub const FAILED_KEPT: Duration = Duration::from_secs(600);
/// The longest a pending create waits for its template.
const BUILD_WAIT: Duration = Duration::from_secs(20 * 60);

/// Where a pending create is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PendingState {
    /// Its template builds.
    Building,
    /// Built; the sandbox is being made.
    Starting,
    /// It ended without a sandbox.
    Failed {
        reason: String,
        /// The template's build failed (not the create after it).
        build_failed: bool,
    },
}

/// A create waiting for its template.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingCreate {
    /// The sandbox's id, once made.
    pub id: String,
    /// `""` when unnamed.
    pub name: String,
    pub template: String,
    pub metadata: std::collections::BTreeMap<String, String>,
    pub env: std::collections::BTreeMap<String, String>,
    pub cpu_millis: u32,
    pub memory_mb: u64,
    pub disk_mb: u64,
    pub idle: Option<IdlePolicy>,
    pub created_at: UnixMillis,
    pub state: PendingState,
}

/// The pending creates of this process, by id.
#[derive(Debug, Default)]
pub(crate) struct Pending(Mutex<HashMap<String, PendingCreate>>);

impl Pending {
    fn with<T>(&self, f: impl FnOnce(&mut HashMap<String, PendingCreate>) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The live pending create other than `id` that holds `name`.
fn holder<'a>(
    map: &'a HashMap<String, PendingCreate>,
    name: &str,
    id: &str,
) -> Option<&'a PendingCreate> {
    map.values().find(|p| {
        !name.is_empty()
            && p.name == name
            && p.id != id
            && !matches!(p.state, PendingState::Failed { .. })
    })
}

impl Service {
    /// Whether a pending create other than `id` holds `name` (for every create's check).
    pub(crate) fn name_held_pending(&self, name: &str, id: &str) -> bool {
        self.inner
            .pending
            .with(|map| holder(map, name, id).is_some())
    }

    /// Checks `req` (whose template is being built) and answers at once with its pending create;
    /// the sandbox is made for `owner` once the template is ready, then given `idle`.
    pub async fn create_when_built(
        &self,
        owner: &str,
        req: api::CreateSandbox,
        idle: Option<IdlePolicy>,
    ) -> Result<PendingCreate, ServiceError> {
        let mut plan = self.plan_create(req)?;
        plan.owner = owner.to_string();
        let pending = PendingCreate {
            id: random_id("sb", 14),
            name: plan.name.clone(),
            template: plan.template.clone(),
            metadata: plan.metadata.clone(),
            env: plan.env.clone(),
            cpu_millis: plan.cpu_millis,
            memory_mb: plan.memory_mb,
            disk_mb: plan.disk_mb,
            idle,
            created_at: unix_millis_now(),
            state: PendingState::Building,
        };
        let name = pending.name.clone();
        let held = self.inner.pending.with(|map| {
            let taken = holder(map, &name, "").is_some();
            if !taken {
                map.insert(pending.id.clone(), pending.clone());
            }
            !taken
        });
        if !held {
            return Err(ServiceError::NameConflict(name));
        }
        if !name.is_empty() {
            let n = name.clone();
            let in_store = self
                .reader()
                .read_by_key(move |tx| tx.get_sandbox_by_name(&n))
                .await;
            if !matches!(in_store, Ok(None)) {
                self.inner.pending.with(|map| map.remove(&pending.id));
                in_store?;
                return Err(ServiceError::NameConflict(name));
            }
        }
        let svc = self.clone();
        let id = pending.id.clone();
        tokio::spawn(async move { svc.finish_pending(id, plan).await });
        Ok(pending)
    }

    /// The pending (or failed) create of id or name `key`, if there is one.
    pub fn pending_create(&self, key: &str) -> Option<PendingCreate> {
        self.inner.pending.with(|map| {
            map.get(key)
                .or_else(|| map.values().find(|p| !p.name.is_empty() && p.name == key))
                .cloned()
        })
    }

    /// Every pending (or failed) create, oldest first.
    pub fn pending_creates(&self) -> Vec<PendingCreate> {
        let mut all: Vec<PendingCreate> = self
            .inner
            .pending
            .with(|map| map.values().cloned().collect());
        all.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        all
    }

    /// Ends the pending create of id or name `key` before its sandbox is made (one already made is
    /// deleted by the create's end); the create as it was.
    pub fn cancel_pending(&self, key: &str) -> Option<PendingCreate> {
        let found = self.pending_create(key)?;
        self.inner.pending.with(|map| map.remove(&found.id))
    }

    async fn finish_pending(&self, id: String, plan: crate::sandboxes::CreatePlan) {
        let template = plan.template.clone();
        let built = self.await_template(&template, BUILD_WAIT).await;
        let failure = match built {
            Ok(t) if t.state == TemplateState::Ready => None,
            Ok(t) => Some((
                format!("the image build failed: {}", t.error.unwrap_or_default()),
                true,
            )),
            Err(e) => Some((crate::error::chain(&e), false)),
        };
        if let Some((reason, build_failed)) = failure {
            return self.fail_pending(&id, reason, build_failed).await;
        }
        let live = self.inner.pending.with(|map| match map.get_mut(&id) {
            Some(p) => {
                p.state = PendingState::Starting;
                true
            }
            None => false,
        });
        if !live {
            return; // cancelled
        }
        let idle = self.pending_create(&id).and_then(|p| p.idle);
        let made = self.create_with_id(id.clone(), plan).await;
        let made = match (made, idle) {
            (Ok(s), Some(policy)) => self.set_idle_policy(&s.id, policy).await,
            (made, _) => made,
        };
        match made {
            Ok(_) => {
                let cancelled = self.inner.pending.with(|map| map.remove(&id)).is_none();
                if cancelled {
                    if let Err(e) = self.delete(&id).await {
                        tracing::warn!(sandbox_id = %id, error = %crate::error::chain(&e), "cannot delete the sandbox of a cancelled create");
                    }
                }
            }
            Err(e) => {
                // A sandbox it made without its policy is not kept.
                if !matches!(e, ServiceError::NameConflict(_)) {
                    let _ = self.delete(&id).await;
                }
                self.fail_pending(&id, crate::error::chain(&e), false).await
            }
        }
    }

    async fn fail_pending(&self, id: &str, reason: String, build_failed: bool) {
        tracing::info!(sandbox_id = %id, %reason, "a create waiting for its build failed");
        let kept = self.inner.pending.with(|map| match map.get_mut(id) {
            Some(p) => {
                p.state = PendingState::Failed {
                    reason,
                    build_failed,
                };
                true
            }
            None => false,
        });
        if kept {
            let svc = self.clone();
            let id = id.to_string();
            tokio::spawn(async move {
                tokio::time::sleep(FAILED_KEPT).await;
                svc.inner.pending.with(|map| map.remove(&id));
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::{InMemoryRuntimeForTests, TestService};
    use crate::ServiceConfig;

    fn service() -> TestService {
        TestService::new(ServiceConfig::default(), InMemoryRuntimeForTests::default())
    }

    async fn wait_for(t: &TestService, id: &str) -> Option<PendingCreate> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            match t.svc.pending_create(id) {
                Some(p) if matches!(p.state, PendingState::Failed { .. }) => return Some(p),
                None => return None,
                Some(_) => {}
            }
            assert!(tokio::time::Instant::now() < deadline, "still pending");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn named(name: &str, template: &str) -> api::CreateSandbox {
        api::CreateSandbox {
            name: Some(name.into()),
            template: Some(template.into()),
            ..Default::default()
        }
    }

    /// A pending create holds its name against other creates, pending or not, until it ends; a bad
    /// request holds nothing. (That its id becomes the sandbox's once the build is done is shown
    /// through the Daytona SDK, by `crates/sandboxd/tests/daytona_images.rs`.)
    #[tokio::test]
    async fn a_pending_create_holds_its_name_until_it_ends() {
        let t = service();
        let svc = &t.svc;
        svc.begin_template("slow", serde_json::json!({}), None)
            .await
            .unwrap();
        let pending = svc
            .create_when_built("", named("held", "slow"), None)
            .await
            .unwrap();
        assert_eq!(pending.state, PendingState::Building);
        assert_eq!(
            svc.pending_create("held").unwrap().id,
            pending.id,
            "by name"
        );
        let again = svc.create_when_built("", named("held", "slow"), None).await;
        assert!(
            matches!(again, Err(ServiceError::NameConflict(_))),
            "{again:?}"
        );
        let bad = svc
            .create_when_built(
                "",
                api::CreateSandbox {
                    cpu: Some(-1.0),
                    template: Some("slow".into()),
                    ..Default::default()
                },
                None,
            )
            .await;
        assert!(
            matches!(bad, Err(ServiceError::InvalidRequest(_))),
            "{bad:?}"
        );

        let direct = svc.create(named("held", "base")).await;
        assert!(
            matches!(direct, Err(ServiceError::NameConflict(_))),
            "{direct:?}"
        );
        // A sandbox that has the name already refuses a pending create of it.
        let other = svc
            .create(api::CreateSandbox {
                name: Some("taken".into()),
                ..Default::default()
            })
            .await
            .unwrap();
        let refused = svc
            .create_when_built("", named("taken", "slow"), None)
            .await;
        assert!(
            matches!(refused, Err(ServiceError::NameConflict(_))),
            "{refused:?}"
        );
        assert!(svc.pending_create("taken").is_none(), "nothing held");
        svc.delete(&other.id).await.unwrap();
        // Once it ends, the name is free again.
        svc.cancel_pending("held").unwrap();
        svc.create_when_built("", named("held", "slow"), None)
            .await
            .unwrap();
    }

    /// A template whose build fails fails the pending create as `build_failed`; a cancelled one
    /// is gone at once.
    #[tokio::test]
    async fn a_failed_build_fails_the_create_and_a_cancel_ends_it() {
        let t = service();
        let svc = &t.svc;
        svc.begin_template("broken", serde_json::json!({}), None)
            .await
            .unwrap();
        let pending = svc
            .create_when_built("", named("first", "broken"), None)
            .await
            .unwrap();
        let cancelled = svc
            .create_when_built("", named("second", "broken"), None)
            .await
            .unwrap();
        assert_eq!(svc.cancel_pending("second").unwrap().id, cancelled.id);
        assert_eq!(svc.pending_create(&cancelled.id), None);
        svc.writer()
            .write(|tx| {
                tx.template_failed("broken", "RUN exit 3: exit status 3", unix_millis_now())
            })
            .await
            .unwrap();
        let failed = wait_for(&t, &pending.id).await.expect("kept");
        assert!(
            matches!(&failed.state, PendingState::Failed { build_failed: true, reason } if reason.contains("exit 3")),
            "{failed:?}"
        );
        assert!(matches!(
            svc.get(&pending.id).await,
            Err(ServiceError::NotFound(_))
        ));
        assert!(svc.list_templates().await.unwrap().len() == 1);
    }
}
