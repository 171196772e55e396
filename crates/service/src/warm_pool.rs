//! Warm pools: per template, sandboxes booted ahead of any create, so a create takes one instead of
//! booting its own.
//!
//! Contract:
//! - **Filling.** [`Service::run_warm_pools`] keeps each template's pool at the size asked for
//!   (`--warm-pool TEMPLATE=N`, `PUT /v1/warm-pools/{template}`, kept in the store). It boots one
//!   sandbox at a time exactly as a create would ([`Service::prepare`], [`Service::spec`]) under an
//!   id of its own (`wp…`), recorded as a `warming` entry holding its network slot; the entry is
//!   `ready` once its agent calls home (`readiness::pooled_event`). The filler then runs `true` in
//!   it once ([`Service::warm_up`]), so a create's first command does not pay for the agent's and
//!   the root's first use, and offers it to creates ([`WarmPools::offer`]). An entry is no
//!   sandbox: no list, count, event, webhook or timeout sees it.
//! - **Claiming.** A create whose template has a pool, and that asks nothing a booted sandbox
//!   cannot take afterwards ([`Service::pool_for`]: the template's own root and tier, the default
//!   network and disk, no volumes, secrets or start commands), takes the oldest entry the filler
//!   offered ([`WarmPools::take`]: each is taken once, by one). The runtime adopts the booted
//!   sandbox under the create's id ([`sandboxd_runtime::Runtime::adopt`]), its CPU and memory
//!   become the create's, and its agent takes the create's environment (`POST /init`, unless it
//!   booted with it). Meanwhile, overlapping the adoption, one write inserts the row, claims the
//!   entry (`sandboxd_store::warm_pool`: an entry is handed out once, and its slot moves to the
//!   sandbox) and marks it `running`: one commit, where a cold create has two, and none waited for
//!   on its own. The create answers once both are done. With none ready (or one that could not be
//!   adopted before anything was written, then destroyed) the create is made cold, counted as a
//!   miss; an adoption that fails after the write fails the create (its row undone). Either way
//!   the filler is woken, and boots replacements once creates have paused for [`REFILL_QUIET`] (at
//!   most [`REFILL_MAX_DELAY`] later), so a burst's creates do not compete with their
//!   replacements' boots.
//! - **Crashes.** A daemon that starts discards every entry a previous one left (its sandbox is
//!   destroyed, its row and slot freed) and fills the pools again: an entry's boot may have been cut
//!   short anywhere. A create cut short answered nothing. Before its write committed it left no
//!   row: the sandbox it had adopted is an orphan, destroyed. After, with the adoption unfinished,
//!   it left a `running` row whose sandbox is not under its id: settled `lost` (its name and slot
//!   freed), and the pooled sandbox, under its pool id, destroyed as an orphan.
//! - **Orphans.** The sandbox reconciler destroys runtime sandboxes with neither a row nor an entry,
//!   and settles `lost` the running rows with no runtime sandbox. It does both holding
//!   [`WarmPools::adopting`] exclusively, and creates hold it shared from before their write and
//!   their rename of a pooled sandbox until both are done (or the sandbox destroyed), so a sandbox
//!   being adopted is never taken for an orphan, under its old id or its new one, nor its row for a
//!   lost sandbox's.

use crate::sandboxes::{random_id, CreatePlan, Prepared};
use crate::{Service, ServiceError};
use sandboxd_api_types as api;
use sandboxd_runtime::Isolation;
use sandboxd_store::{unix_millis_now, PoolEntry, PoolState};
use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Mutex;
use std::time::Duration;
use tokio::sync::Notify;
use tokio::time::Instant;

mod claim;

/// The largest pool a template may have.
pub const MAX_POOL_SIZE: u32 = 1000;
/// How long the filler waits after a boot failed before it tries again.
const REFILL_BACKOFF: Duration = Duration::from_secs(1);
/// After a create took a pooled sandbox (or found none), the filler boots replacements only once
/// this long has passed without another, so a burst of creates and the first commands they run do
/// not share the cores with the boots of their own replacements...
const REFILL_QUIET: Duration = Duration::from_millis(100);
/// ...but never later than this after it was first woken.
const REFILL_MAX_DELAY: Duration = Duration::from_secs(1);
/// How long a pooled sandbox's warm-up command may take ([`Service::warm_up`]).
const WARM_UP_DEADLINE: Duration = Duration::from_secs(5);

/// The pools' state in this process: sizes asked for, counters, and the filler's wake-ups.
#[derive(Default)]
pub(crate) struct WarmPools {
    sizes: Mutex<BTreeMap<String, u32>>,
    stats: Mutex<HashMap<String, PoolStats>>,
    /// Woken when a size changes or a create took an entry (or found none).
    refill: Notify,
    /// When a create last took an entry or found none.
    last_claim: Mutex<Option<Instant>>,
    /// Woken when a pooled agent called home.
    ready: Notify,
    /// Held shared by adoptions, exclusively by the destruction of orphans (see the module docs).
    pub(crate) adopting: tokio::sync::RwLock<()>,
    /// The entries this process booted and warmed up, ready to be taken, by template, oldest first.
    /// Taking one removes it, so it is one create's (or the filler's, to discard it) alone.
    ready_to_take: Mutex<HashMap<String, VecDeque<PoolEntry>>>,
}

impl WarmPools {
    /// The sizes asked for, by template.
    fn sizes(&self) -> BTreeMap<String, u32> {
        self.sizes.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The counters, by template.
    fn stats(&self) -> HashMap<String, PoolStats> {
        self.stats.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Takes the oldest ready entry of `template`, for the caller alone.
    fn take(&self, template: &str) -> Option<PoolEntry> {
        let mut ready = self.ready_to_take.lock().unwrap_or_else(|p| p.into_inner());
        ready.get_mut(template)?.pop_front()
    }

    /// Wakes the filler after a create took an entry (whatever became of it) or found none: it
    /// refills once creates have paused ([`REFILL_QUIET`]).
    fn wake_after_claim(&self) {
        *self.last_claim.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
        self.refill.notify_one();
    }

    /// Offers `entry`, booted and warmed up, to the creates of its template.
    fn offer(&self, entry: PoolEntry) {
        let mut ready = self.ready_to_take.lock().unwrap_or_else(|p| p.into_inner());
        ready
            .entry(entry.template.clone())
            .or_default()
            .push_back(entry);
    }

    /// The ids of the entries offered now: those a create can take.
    fn offered(&self) -> HashSet<String> {
        let ready = self.ready_to_take.lock().unwrap_or_else(|p| p.into_inner());
        ready.values().flatten().map(|e| e.id.clone()).collect()
    }
}

#[derive(Debug, Default, Clone, Copy)]
struct PoolStats {
    hits: u64,
    misses: u64,
    last_refill_ms: Option<u64>,
}

impl Service {
    fn pools(&self) -> &WarmPools {
        &self.inner.warm_pools
    }

    /// The template whose pool may serve this create, if it has one and the create asks nothing a
    /// booted sandbox cannot take afterwards.
    pub(crate) fn pool_for(&self, plan: &CreatePlan, prepared: &Prepared) -> Option<String> {
        let sized = self
            .pools()
            .sizes()
            .get(&prepared.template)
            .is_some_and(|n| *n > 0);
        if !sized {
            return None;
        }
        match self.poolable(plan, prepared) {
            Ok(()) => Some(prepared.template.clone()),
            Err(why) => {
                tracing::debug!(template = %prepared.template, why, "a create made cold beside a warm pool");
                None
            }
        }
    }

    /// Why sandboxes of this plan cannot be pooled, if they cannot.
    fn poolable(&self, plan: &CreatePlan, prepared: &Prepared) -> Result<(), &'static str> {
        let default_disk = self
            .check_resources(None, None, None)
            .map(|(_, _, disk)| disk)
            .unwrap_or_default();
        // What the booted sandbox's network holds (who may reach its ports is the daemon's alone).
        // Whether it may send out at all changes after the boot (`Runtime::set_egress_lists`); its lists
        // and rules do not.
        let booted = |p: &crate::network::EgressPolicy| {
            (
                p.allow.clone(),
                p.deny.clone(),
                p.allow_names.clone(),
                p.deny_names.clone(),
                p.rules.clone(),
            )
        };
        let default_network = crate::network::policy(None).ok().map(|p| booted(&p));
        if plan.image.is_some() || plan.resolved.is_some() {
            Err("it is made from an image reference, not a template")
        } else if prepared.isolation != Isolation::Namespace {
            Err("only the namespace tier's sandboxes can be adopted under a create's id")
        } else if prepared.commands != crate::templates::StartCommands::default() {
            Err("the template has start commands, which must see the create's environment")
        } else if !prepared.mounts.is_empty() || prepared.gateway.is_some() {
            Err("it mounts volumes or sends traffic through the egress gateway")
        } else if default_network != Some(booted(&plan.network)) {
            Err("it asks for a network policy of its own")
        } else if plan.disk_mb != default_disk {
            Err("it asks for a disk limit of its own")
        } else {
            Ok(())
        }
    }

    /// Counts a create that `hit` (took an entry) or missed `template`'s pool, and wakes the filler.
    pub(crate) fn count_pool_claim(&self, template: &str, hit: bool) {
        {
            let mut stats = self.pools().stats.lock().unwrap_or_else(|p| p.into_inner());
            let stats = stats.entry(template.to_string()).or_default();
            if hit {
                stats.hits += 1;
            } else {
                stats.misses += 1;
            }
        }
        self.pools().wake_after_claim();
    }

    /// Every template's pool: those with a size, with sandboxes, or that served creates since the
    /// daemon started.
    pub async fn warm_pools(&self) -> Result<Vec<api::WarmPool>, ServiceError> {
        let entries = self.reader().read(|tx| tx.pool_entries()).await?;
        let (sizes, stats) = (self.pools().sizes(), self.pools().stats());
        // Ready is what a create can take: one the store calls ready (its agent called home) but
        // not offered (being warmed up, or being adopted) is not. Read after the entries: an entry
        // is offered only once the store says it is ready.
        let offered = self.pools().offered();
        let state = |e: &PoolEntry| match e.state {
            PoolState::Ready if !offered.contains(&e.id) => PoolState::Warming,
            state => state,
        };
        // Those with a size, with entries, or that served creates since the start.
        let mut templates: Vec<&String> = sizes.keys().chain(stats.keys()).collect();
        templates.extend(entries.iter().map(|e| &e.template));
        templates.sort();
        templates.dedup();
        Ok(templates
            .into_iter()
            .map(|template| {
                let of = |wanted| {
                    entries
                        .iter()
                        .filter(|e| &e.template == template && state(e) == wanted)
                        .count() as u32
                };
                let stats = stats.get(template).copied().unwrap_or_default();
                api::WarmPool {
                    template: template.clone(),
                    size: sizes.get(template).copied().unwrap_or(0),
                    ready: of(PoolState::Ready),
                    warming: of(PoolState::Warming),
                    hits: stats.hits,
                    misses: stats.misses,
                    last_refill_ms: stats.last_refill_ms,
                }
            })
            .collect())
    }

    /// Asks for `size` sandboxes of `template` kept booted (0 empties its pool); the template must
    /// exist and its sandboxes be poolable.
    pub async fn set_warm_pool(
        &self,
        template: &str,
        size: u32,
    ) -> Result<api::WarmPool, ServiceError> {
        if size > MAX_POOL_SIZE.min(self.config().net_slots) {
            return Err(ServiceError::InvalidRequest(format!(
                "size must be at most {}",
                MAX_POOL_SIZE.min(self.config().net_slots)
            )));
        }
        if size > 0 {
            let plan = self.pool_plan(template)?;
            let prepared = self.prepare("wp-check", &plan).await?;
            self.poolable(&plan, &prepared).map_err(|why| {
                ServiceError::InvalidRequest(format!(
                    "template {template:?} cannot have a warm pool: {why}"
                ))
            })?;
        }
        let name = template.to_string();
        self.writer()
            .write(move |tx| tx.set_pool_size(&name, size))
            .await?;
        {
            let mut sizes = self.pools().sizes.lock().unwrap_or_else(|p| p.into_inner());
            if size == 0 {
                sizes.remove(template);
            } else {
                sizes.insert(template.to_string(), size);
            }
        }
        self.pools().refill.notify_one();
        let pools = self.warm_pools().await?;
        Ok(pools
            .into_iter()
            .find(|p| p.template == template)
            .unwrap_or(api::WarmPool {
                template: template.to_string(),
                ..Default::default()
            }))
    }

    /// The create a pool's sandboxes are booted for: the template, everything else default.
    fn pool_plan(&self, template: &str) -> Result<CreatePlan, ServiceError> {
        self.plan_create(api::CreateSandbox {
            template: Some(template.to_string()),
            timeout_sec: Some(0),
            ..Default::default()
        })
    }

    /// Keeps the pools filled until the process ends: first discards every entry a previous daemon
    /// left, then takes the sizes `configured` (over those in the store) and boots sandboxes one at
    /// a time whenever a pool is short (see the module docs).
    pub async fn run_warm_pools(&self, configured: &[(String, u32)]) {
        self.discard_pool_entries().await;
        match self.reader().read(|tx| tx.pool_sizes()).await {
            Ok(stored) => {
                *self.pools().sizes.lock().unwrap_or_else(|p| p.into_inner()) =
                    stored.into_iter().collect()
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the warm pools' sizes"),
        }
        for (template, size) in configured {
            if let Err(e) = self.set_warm_pool(template, *size).await {
                tracing::warn!(template = %template, error = %crate::error::chain(&e), "cannot set the warm pool asked for at start");
            }
        }
        loop {
            let woken = self.pools().refill.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            self.quiet_after_claims().await;
            match self.fill_pools().await {
                Ok(true) => continue,
                Ok(false) => woken.await,
                Err(e) => {
                    tracing::warn!(error = %crate::error::chain(&e), "cannot fill a warm pool");
                    tokio::time::sleep(REFILL_BACKOFF).await;
                }
            }
        }
    }

    /// Returns once [`REFILL_QUIET`] has passed since the last claim, or [`REFILL_MAX_DELAY`] since
    /// this call.
    async fn quiet_after_claims(&self) {
        let started = Instant::now();
        loop {
            let last = *self
                .pools()
                .last_claim
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let Some(last) = last else {
                return;
            };
            let until = (last + REFILL_QUIET).min(started + REFILL_MAX_DELAY);
            if Instant::now() >= until {
                return;
            }
            tokio::time::sleep_until(until).await;
        }
    }

    /// Destroys every pooled sandbox and forgets its entry.
    async fn discard_pool_entries(&self) {
        let entries = match self.reader().read(|tx| tx.pool_entries()).await {
            Ok(entries) => entries,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the warm pools");
                return;
            }
        };
        for entry in entries {
            if let Err(e) = self.discard_pool_entry(&entry.id).await {
                tracing::warn!(pool_id = %entry.id, error = %crate::error::chain(&e), "cannot discard a pooled sandbox");
            }
        }
    }

    /// Destroys pooled sandbox `id`, then forgets its entry (kept, for a later try, while its
    /// sandbox cannot be destroyed). No create takes it: it was never offered, or the caller took it.
    async fn discard_pool_entry(&self, id: &str) -> Result<(), ServiceError> {
        self.runtime().destroy(id).await?;
        let rid = id.to_string();
        self.writer()
            .write(move |tx| tx.delete_pool_entry(&rid))
            .await?;
        Ok(())
    }

    /// One step towards the sizes asked for: boots one sandbox for the first pool short of its
    /// size, or discards one ready sandbox of a pool over it. False when every pool is at its size.
    async fn fill_pools(&self) -> Result<bool, ServiceError> {
        let entries = self.reader().read(|tx| tx.pool_entries()).await?;
        let sizes = self.pools().sizes();
        let held = |template: &str| entries.iter().filter(|e| e.template == template).count();
        // One offered over its pool's size, taken from the creates.
        let over = entries
            .iter()
            .map(|e| e.template.as_str())
            .filter(|t| held(t) > sizes.get(*t).copied().unwrap_or(0) as usize);
        if let Some(extra) = over.into_iter().find_map(|t| self.pools().take(t)) {
            if let Err(e) = self.discard_pool_entry(&extra.id).await {
                // Offered again, so the next pass retries it (a create that takes it meanwhile
                // and cannot adopt it destroys it and is made cold).
                self.pools().offer(extra);
                return Err(e);
            }
            return Ok(true);
        }
        let Some(short) = sizes
            .iter()
            .find(|(template, size)| held(template) < **size as usize)
            .map(|(template, _)| template.clone())
        else {
            return Ok(false);
        };
        self.boot_pool_entry(&short).await?;
        Ok(true)
    }

    /// Boots one sandbox for `template`'s pool and waits for its agent; on failure nothing of it is
    /// left.
    async fn boot_pool_entry(&self, template: &str) -> Result<(), ServiceError> {
        let began = Instant::now();
        let plan = self.pool_plan(template)?;
        let id = random_id("wp", 14);
        let prepared = self.prepare(&id, &plan).await?;
        self.poolable(&plan, &prepared).map_err(|why| {
            ServiceError::InvalidRequest(format!(
                "template {template:?} cannot have a warm pool: {why}"
            ))
        })?;
        let token = random_id("", 40);
        let entry = PoolEntry {
            id: id.clone(),
            template: template.to_string(),
            state: PoolState::Warming,
            agent_token: token.clone(),
            cpu_millis: plan.cpu_millis,
            memory_mb: plan.memory_mb as u32,
            disk_mb: plan.disk_mb as u32,
            created_at: unix_millis_now(),
            slot: None,
        };
        let slots = self.config().net_slots;
        let mut offered = entry.clone();
        let slot = self
            .writer()
            .write(move |tx| {
                tx.insert_pool_entry(&entry)?;
                Ok(tx
                    .lease_pool_slot(&entry.id, slots, unix_millis_now())?
                    .slot)
            })
            .await?;
        let booted = async {
            crate::failpoints::hold("pool.after-insert").await;
            let spec = self.spec(&id, &plan, &prepared, slot, &token);
            self.runtime().create(&spec).await?;
            self.runtime().start(&id).await?;
            self.await_pool_ready(&id, Instant::now() + self.config().ready_deadline)
                .await?;
            crate::failpoints::hold("pool.after-ready").await;
            self.warm_up(&id, &token).await;
            Ok(())
        }
        .await;
        if let Err(e) = booted {
            if let Err(d) = self.discard_pool_entry(&id).await {
                tracing::warn!(pool_id = %id, error = %crate::error::chain(&d), "cannot discard a pooled sandbox that did not boot");
            }
            return Err(e);
        }
        let took = began.elapsed().as_millis() as u64;
        tracing::debug!(pool_id = %id, template, took_ms = took, "warm pool sandbox ready");
        self.pools()
            .stats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(template.to_string())
            .or_default()
            .last_refill_ms = Some(took);
        (offered.state, offered.slot) = (PoolState::Ready, Some(slot));
        self.pools().offer(offered);
        Ok(())
    }

    /// Runs `true` once in pooled sandbox `id`, whose agent's token is `token`, so the first command
    /// of the create that takes it does not pay for first use: the agent's first spawn, the root's
    /// first lookups. Best effort: a root without `true` only skips the warm-up.
    async fn warm_up(&self, id: &str, token: &str) {
        let info = match self.runtime().inspect(id).await {
            Ok(Some(info)) => info,
            _ => return,
        };
        let client = sandboxd_envd::EnvdClient::new(&info.agent.socket, token);
        let opts = sandboxd_envd::ExecOptions {
            timeout: Some(WARM_UP_DEADLINE),
            ..Default::default()
        };
        let ran = tokio::time::timeout(WARM_UP_DEADLINE, client.exec(&["true".into()], opts)).await;
        if !matches!(ran, Ok(Ok(ref out)) if out.exit_code == 0) {
            tracing::debug!(pool_id = %id, outcome = ?ran, "a pooled sandbox's warm-up command did not run");
        }
    }

    /// Waits until entry `id` is ready; an error once it is gone or at `deadline`.
    async fn await_pool_ready(&self, id: &str, deadline: Instant) -> Result<(), ServiceError> {
        loop {
            let woken = self.pools().ready.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            let rid = id.to_string();
            let entry = self.reader().read(move |tx| tx.pool_entry(&rid)).await?;
            let reason = match entry {
                Some(e) if e.state == PoolState::Ready => return Ok(()),
                Some(_) if Instant::now() >= deadline => "its agent did not call home in time",
                Some(_) => {
                    tokio::select! {
                        _ = woken => {}
                        _ = tokio::time::sleep_until(deadline) => {}
                    }
                    continue;
                }
                None => "its agent reported a failure",
            };
            return Err(ServiceError::StartFailed {
                id: id.to_string(),
                reason: reason.into(),
            });
        }
    }

    /// Wakes the pool's waiters: a pooled agent's report was applied.
    pub(crate) fn pooled_agent_reported(&self) {
        self.pools().ready.notify_waiters();
    }

    /// Whether `template` has a pool: a size, or sandboxes booted for it (a template is not deleted
    /// under them).
    pub(crate) async fn has_warm_pool(&self, template: &str) -> Result<bool, ServiceError> {
        if self.pools().sizes().get(template).is_some_and(|n| *n > 0) {
            return Ok(true);
        }
        let entries = self.reader().read(|tx| tx.pool_entries()).await?;
        Ok(entries.iter().any(|e| e.template == template))
    }

    /// Whether `id` is a warm-pool entry (the sandbox reconciler's orphans exclude them).
    pub(crate) async fn is_pool_entry(&self, id: &str) -> Result<bool, ServiceError> {
        let rid = id.to_string();
        Ok(self
            .reader()
            .read(move |tx| tx.pool_entry(&rid))
            .await?
            .is_some())
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

    /// A size past the limit is the caller's 400, an unknown template a 404, and neither is kept;
    /// a size is kept, replaced and removed.
    #[tokio::test]
    async fn sizes_are_checked_and_kept() {
        let t = service();
        let err = t
            .svc
            .set_warm_pool("base", MAX_POOL_SIZE + 1)
            .await
            .unwrap_err();
        assert!(matches!(err, ServiceError::InvalidRequest(_)), "{err:?}");
        let err = t.svc.set_warm_pool("no-such", 1).await.unwrap_err();
        assert!(matches!(err, ServiceError::NotFound(_)), "{err:?}");
        assert_eq!(t.svc.warm_pools().await.unwrap(), vec![]);
        let set = t.svc.set_warm_pool("base", 3).await.unwrap();
        assert_eq!((set.template.as_str(), set.size, set.ready), ("base", 3, 0));
        t.svc.set_warm_pool("base", 5).await.unwrap();
        let sizes = t.svc.reader().read(|tx| tx.pool_sizes()).await.unwrap();
        assert_eq!(sizes, vec![("base".to_string(), 5)]);
        t.svc.set_warm_pool("base", 0).await.unwrap();
        assert_eq!(t.svc.warm_pools().await.unwrap(), vec![]);
    }

    /// A create that asks for what a booted sandbox cannot take afterwards is made cold; one that
    /// asks only for what it can (environment, labels, CPU, memory, timeout) may take one.
    #[tokio::test]
    async fn creates_asking_only_what_a_booted_sandbox_can_take_use_the_pool() {
        let t = service();
        t.svc.set_warm_pool("base", 1).await.unwrap();
        let pooled = |req: api::CreateSandbox| {
            let svc = t.svc.clone();
            async move {
                let plan = svc.plan_create(req).unwrap();
                let prepared = svc.prepare("sb-check", &plan).await.unwrap();
                svc.pool_for(&plan, &prepared)
            }
        };
        let takes = api::CreateSandbox {
            env: Some([("K".to_string(), "v".to_string())].into()),
            metadata: Some([("team".to_string(), "a".to_string())].into()),
            cpu: Some(0.5),
            memory_mb: Some(256),
            timeout_sec: Some(60),
            ..Default::default()
        };
        assert_eq!(pooled(takes).await.as_deref(), Some("base"));
        let sends_out = api::CreateSandbox {
            network: Some(api::NetworkPolicy {
                egress: true,
                allow_public_traffic: Some(false),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(
            pooled(sends_out).await.as_deref(),
            Some("base"),
            "egress is set after"
        );
        let own_network = api::CreateSandbox {
            network: Some(api::NetworkPolicy {
                egress: true,
                allow_out: vec!["10.0.0.0/8".into()],
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(pooled(own_network).await, None);
        t.svc.set_warm_pool("base", 0).await.unwrap();
        assert_eq!(pooled(api::CreateSandbox::default()).await, None, "no pool");
    }
}
