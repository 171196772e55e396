//! Warm pools against the real daemon: creates racing for a pool, kill -9 while it refills or
//! while a create adopts a pooled sandbox (`sandboxd_service::warm_pool`), and Daytona's SDK
//! managing them.

mod common;
mod e2b_support;

use common::{
    create_in_background, e2e, eventually, get, id_of, query, restart_and_reconcile, runtime_ids,
    tamper, wait_for_row, wait_gone, Daemon, Setup,
};
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::{Duration, Instant};

/// `GET /v1/warm-pools`' entry for `base`.
async fn base_pool(d: &Daemon) -> Value {
    let list = d.get_json("/v1/warm-pools").await;
    list["warmPools"]
        .as_array()
        .and_then(|pools| pools.iter().find(|p| p["template"] == "base").cloned())
        .unwrap_or(Value::Null)
}

/// Sets `template`'s pool to `size` through the API.
async fn set_pool(d: &Daemon, template: &str, size: u32) {
    let set = d
        .http()
        .put(d.endpoint(&format!("/v1/warm-pools/{template}")))
        .json(&json!({"size": size}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        set.status(),
        200,
        "{}",
        set.text().await.unwrap_or_default()
    );
}

/// Waits until `base`'s pool holds `ready` booted sandboxes and boots no more.
async fn await_pool(d: &Daemon, ready: u64) -> Value {
    let what = || format!("the pool never filled\n{}", d.log_tail(40));
    eventually(what, Duration::from_secs(120), || async {
        let pool = base_pool(d).await;
        (pool["ready"] == ready && pool["warming"] == 0).then_some(pool)
    })
    .await
}

/// The ids of the pool's entries, as the store holds them.
fn entries(d: &Daemon) -> BTreeSet<String> {
    query(d, "SELECT id FROM warm_pool").into_iter().collect()
}

/// What the runtime holds is exactly the sandboxes `live` and the pool's entries, and the store's
/// slots are held by exactly those: nothing leaked, nothing shared.
fn assert_holdings(d: &Daemon, live: &BTreeSet<String>) {
    let pooled = entries(d);
    let want: BTreeSet<String> = live.union(&pooled).cloned().collect();
    assert_eq!(runtime_ids(d), want, "runtime vs sandboxes and pool");
    let sandbox_slots: BTreeSet<String> = query(
        d,
        "SELECT sandbox_id FROM network_slots WHERE sandbox_id IS NOT NULL",
    )
    .into_iter()
    .collect();
    assert_eq!(&sandbox_slots, live, "slots of sandboxes");
    let pool_slots: BTreeSet<String> = query(
        d,
        "SELECT pool_id FROM network_slots WHERE pool_id IS NOT NULL",
    )
    .into_iter()
    .collect();
    assert_eq!(pool_slots, pooled, "slots of the pool");
}

/// A daemon with a pool of one `base` sandbox, filled, and failpoint `failpoints` set.
async fn pool_of_one_with(failpoints: &str) -> Daemon {
    let d = Daemon::start_with(&["--warm-pool", "base=1"], &[("FAILPOINTS", failpoints)]).await;
    await_pool(&d, 1).await;
    d
}

/// The id of the `running` row named `name`, once it is written.
async fn running_row_named(d: &Daemon, name: &str) -> String {
    let sql = format!("SELECT id FROM sandboxes WHERE name = '{name}' AND state = 'running'");
    wait_for_row(d, &sql).await
}

/// The id a pooled sandbox was renamed to by a create's adoption, once the runtime has it.
async fn adopted_under_a_create_id(d: &Daemon) -> String {
    let what = || format!("no adoption:\n{}", d.log_tail(40));
    eventually(what, Duration::from_secs(30), || async {
        runtime_ids(d).into_iter().find(|id| id.starts_with("sb"))
    })
    .await
}

/// A create named `name` succeeds again and its sandbox runs a command.
async fn assert_name_serves_again(d: &Daemon, name: &str) {
    let retry = d.create(json!({ "name": name })).await;
    assert_eq!(d.exec(&id_of(&retry), &["true"]).await.exit_code, 0);
}

/// Invariant: a warm-pool sandbox is handed out once. Two hundred creates race for a pool of ten:
/// each gets a sandbox of its own that runs with its own environment, the pool's hits and misses
/// add up to the creates, every sandbox has a slot of its own, and once they are deleted the runtime
/// holds nothing but the refilled pool.
#[test]
fn two_hundred_creates_race_for_a_pool_of_ten() {
    e2e(|| async {
        // Two hundred sandboxes and the pool: four blocks of slots.
        let blocks = sandboxd_test_support::daemon_slot_blocks(4);
        let d = Daemon::start_setup(Setup {
            args: vec!["--warm-pool".into(), "base=10".into()],
            slots: Some((blocks[0].base, blocks.iter().map(|b| b.count).sum())),
            ..Setup::default()
        })
        .await;
        let filled = await_pool(&d, 10).await;
        assert_eq!(filled["size"], 10, "{filled}");
        let pooled_before = entries(&d);
        let creates = (0..200).map(|i| {
            let (http, url) = (d.http().clone(), d.endpoint("/v1/sandboxes"));
            tokio::spawn(async move {
                let body = json!({"env": {"CREATE_NO": i.to_string()}, "timeoutSec": 0});
                let resp = http.post(url).json(&body).send().await.expect("create");
                let status = resp.status().as_u16();
                let text = resp.text().await.unwrap_or_default();
                (i, status, text)
            })
        });
        let mut ids = BTreeSet::new();
        let mut made = Vec::new();
        for create in creates.collect::<Vec<_>>() {
            let (i, status, text) = create.await.unwrap();
            assert_eq!(status, 201, "create {i}: {text}\n{}", d.log_tail(300));
            let id = id_of(&serde_json::from_str::<Value>(&text).unwrap());
            assert!(ids.insert(id.clone()), "sandbox {id} handed out twice");
            made.push((i, id));
        }
        assert!(ids.is_disjoint(&pooled_before), "a pool id leaked out");
        let pool = base_pool(&d).await;
        let (hits, misses) = (
            pool["hits"].as_u64().unwrap(),
            pool["misses"].as_u64().unwrap(),
        );
        assert!(hits >= 10, "the ten ready sandboxes were taken: {pool}");
        assert_eq!(hits + misses, 200, "{pool}");
        for (i, id) in &made {
            let script = "echo $CREATE_NO $(hostname) $(cat /etc/hostname) $(grep -c \"$(hostname)\" /etc/hosts)";
            let out = d.exec(id, &["sh", "-c", script]).await;
            assert_eq!(
                out.stdout.trim(),
                format!("{i} {id} {id} 1"),
                "sandbox {id}'s environment and name"
            );
            assert_eq!(get(&d, id).await.1["state"], "running");
        }
        let taken: BTreeSet<String> = pooled_before.difference(&entries(&d)).cloned().collect();
        assert_eq!(taken.len(), 10, "every ready entry was claimed");
        assert!(
            taken.iter().all(|id| !runtime_ids(&d).contains(id)),
            "claimed entries answer to their sandbox's id only"
        );
        assert_holdings(&d, &ids);
        let metrics = d.get_text("/metrics").await;
        assert!(
            metrics.contains(&format!(
                "sandboxd_warm_pool_hits_total{{template=\"base\"}} {hits}"
            )),
            "{metrics}"
        );
        for id in &ids {
            let resp = d.delete(&format!("/v1/sandboxes/{id}")).await;
            assert!(resp.status().is_success(), "delete {id}");
        }
        await_pool(&d, 10).await;
        assert_holdings(&d, &BTreeSet::new());
        // Emptied through sbx: every pooled sandbox goes, with its slot.
        let set = d.sbx(&["warm-pools", "set", "base", "0", "--json"]);
        assert!(
            set.status.success(),
            "{}",
            String::from_utf8_lossy(&set.stderr)
        );
        let set: Value = serde_json::from_slice(&set.stdout).unwrap();
        assert_eq!(
            (set["template"].as_str(), set["size"].as_u64()),
            (Some("base"), Some(0))
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        while !runtime_ids(&d).is_empty() || !entries(&d).is_empty() {
            assert!(
                Instant::now() < deadline,
                "an emptied pool kept {:?}",
                runtime_ids(&d)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let ls = d.sbx(&["warm-pools", "ls"]);
        let text = String::from_utf8_lossy(&ls.stdout);
        assert!(
            text.starts_with("TEMPLATE") && text.contains(&format!(" {hits} ")),
            "{text}"
        );
        assert_holdings(&d, &BTreeSet::new());
    });
}

/// Invariant: a daemon killed while its pool refills starts with the pool rebuilt: every entry the
/// dead one left (booted or half-made) is gone with its sandbox and slot, new ones fill the pool,
/// and the sandbox it had created runs on. That sandbox's record names it by its new id without
/// ever being rewritten (`Runtime::adopt`): the restarted daemon finds it, and its delete removes the
/// cgroup it was made with under its pool id.
#[test]
fn kill9_while_the_pool_refills_rebuilds_it() {
    e2e(|| async {
        let mut d = Daemon::start_with(
            &["--warm-pool", "base=2"],
            &[("FAILPOINTS", "pool.after-insert=2*off->return(60000)")],
        )
        .await;
        await_pool(&d, 2).await;
        let made_as = entries(&d);
        let acked = d.create_id().await;
        // The claim woke the filler, whose next boot holds with its entry written.
        wait_for_row(&d, "SELECT id FROM warm_pool WHERE state = 'warming'").await;
        let before = entries(&d);
        d.kill9();
        restart_and_reconcile(&mut d).await;
        await_pool(&d, 2).await;
        let after = entries(&d);
        assert!(
            after.is_disjoint(&before),
            "entries of the dead daemon kept: {before:?} {after:?}"
        );
        assert_holdings(&d, &BTreeSet::from([acked.clone()]));
        let out = d.exec(&acked, &["sh", "-c", "echo alive"]).await;
        assert_eq!(out.stdout.trim(), "alive");
        let cgroups =
            |d: &Daemon| -> Vec<_> { made_as.iter().flat_map(|key| d.cgroup_dirs(key)).collect() };
        assert!(
            !cgroups(&d).is_empty(),
            "the adopted sandbox runs in the cgroup it was made with"
        );
        let deleted = d.delete(&format!("/v1/sandboxes/{acked}")).await;
        assert_eq!(deleted.status(), 204);
        wait_gone(&acked, Duration::from_secs(30), || {
            let mut left: Vec<String> = cgroups(&d)
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            left.extend(runtime_ids(&d).into_iter().filter(|id| *id == acked));
            left
        })
        .await;
    });
}

/// Invariant: a create killed after it adopted a pooled sandbox, before its one write (held
/// while the adoption it overlaps goes on), is a create that never happened: no row, its name
/// free, the sandbox it adopted destroyed at the restart with the entry it came from, and no one
/// sees a half-claimed sandbox; a retry with the name succeeds from the refilled pool.
#[test]
fn kill9_after_an_adoption_leaves_no_half_claimed_sandbox() {
    e2e(|| async {
        let mut d = pool_of_one_with("create.before-admit=return(60000)").await;
        let claimed = entries(&d);
        let hung = create_in_background(&d, "claimed");
        // The adopted sandbox is under the create's id, which nothing else knows yet.
        let adopted = adopted_under_a_create_id(&d).await;
        assert!(
            query(&d, "SELECT id FROM sandboxes").is_empty(),
            "a row before the create's one write"
        );
        d.kill9();
        assert!(
            hung.await.unwrap().is_err(),
            "the create cannot have answered"
        );
        restart_and_reconcile(&mut d).await;
        assert!(query(&d, "SELECT id FROM sandboxes").is_empty());
        await_pool(&d, 1).await;
        assert!(entries(&d).is_disjoint(&claimed));
        assert!(
            !runtime_ids(&d).contains(&adopted),
            "the adopted sandbox outlived the restart"
        );
        assert_holdings(&d, &BTreeSet::new());
        let retry = d.create(json!({"name": "claimed"})).await;
        assert_eq!(base_pool(&d).await["hits"], 1);
        let id = id_of(&retry);
        assert_eq!(d.exec(&id, &["true"]).await.exit_code, 0);
    });
}

/// Invariant: a create whose pooled sandbox can no longer be claimed when it writes (its entry no
/// longer `ready` in the store, which no path of the daemon's is known to leave) is made cold: it
/// answers with a sandbox that runs, the one it had adopted is destroyed with its entry, the pool
/// counts a miss, and nothing is leaked.
#[test]
fn a_create_whose_pooled_entry_is_gone_at_its_claim_is_made_cold() {
    e2e(|| async {
        let d = pool_of_one_with("create.before-admit=1*return(3000)").await;
        let taken = entries(&d);
        let entry = taken.iter().next().expect("one entry").clone();
        let create = create_in_background(&d, "fallback");
        adopted_under_a_create_id(&d).await;
        // Held after its adoption: the entry stops being claimable under it.
        tamper(
            &d,
            &format!("UPDATE warm_pool SET state = 'warming' WHERE id = '{entry}'"),
        );
        let made = create.await.unwrap().unwrap();
        assert_eq!(made.status(), 201);
        let id = id_of(&made.json::<Value>().await.unwrap());
        assert_eq!(d.exec(&id, &["true"]).await.exit_code, 0);
        let pool = await_pool(&d, 1).await;
        assert_eq!(
            (pool["hits"].as_u64(), pool["misses"].as_u64()),
            (Some(0), Some(1)),
            "{pool}"
        );
        assert!(
            entries(&d).is_disjoint(&taken),
            "the entry outlived its failed claim"
        );
        assert_holdings(&d, &BTreeSet::from([id]));
    });
}

/// Invariant: a create killed after its one write, while the adoption it overlaps is held (the
/// sandbox still under its pool id), answered nothing and leaves no half-claimed sandbox: at the
/// restart its row is settled `lost` with its name and slot freed, the pooled sandbox is destroyed
/// as an orphan, and the pool is whole again.
#[test]
fn kill9_while_an_adoption_overlaps_its_write_leaves_a_lost_row_and_nothing_held() {
    e2e(|| async {
        let mut d = pool_of_one_with("create.adopting=return(60000)").await;
        let taken = entries(&d);
        let hung = create_in_background(&d, "written");
        let id = running_row_named(&d, "written").await;
        assert!(
            !runtime_ids(&d).contains(&id),
            "adopted while the adoption was held"
        );
        d.kill9();
        assert!(
            hung.await.unwrap().is_err(),
            "the create cannot have answered"
        );
        restart_and_reconcile(&mut d).await;
        let (status, row) = get(&d, &id).await;
        assert_eq!((status, &row["state"]), (200, &json!("lost")), "{row}");
        assert_eq!(row["name"], "", "a lost sandbox keeps its name: {row}");
        await_pool(&d, 1).await;
        assert!(entries(&d).is_disjoint(&taken));
        assert_holdings(&d, &BTreeSet::new());
        assert_name_serves_again(&d, "written").await;
    });
}

/// Invariant: a reconciler pass during an adoption that overlaps its create's write does not take
/// the `running` row, whose sandbox is not under its id yet, for a lost one: it waits for the
/// adoption, and the create answers with a sandbox that runs.
#[test]
fn a_reconciler_pass_waits_for_an_adoption_and_loses_nothing() {
    e2e(|| async {
        let d = pool_of_one_with("create.adopting=1*return(3000)").await;
        let create = create_in_background(&d, "adopting");
        let id = running_row_named(&d, "adopting").await;
        let report = common::reconcile(&d).await;
        let made = create.await.unwrap().unwrap();
        assert_eq!(made.status(), 201);
        assert_eq!(id_of(&made.json::<Value>().await.unwrap()), id);
        assert_eq!(report["totalActions"], 0, "{report}");
        assert_eq!(get(&d, &id).await.1["state"], "running");
        assert_eq!(d.exec(&id, &["true"]).await.exit_code, 0);
        assert_eq!(base_pool(&d).await["hits"], 1);
    });
}

/// Invariant: an adoption that fails after its create's write (which it overlaps) fails the
/// create and leaves nothing: the row is undone, so its name is free, and the pooled sandbox is
/// destroyed under its pool id with its entry gone, its slot freed; the pool fills again.
#[test]
fn an_adoption_that_fails_after_the_write_undoes_the_row_and_leaks_nothing() {
    e2e(|| async {
        let d = pool_of_one_with("create.adopt=1*return").await;
        let taken = entries(&d);
        let failed = d
            .post_json("/v1/sandboxes", &json!({"name": "unadopted"}))
            .await;
        let status = failed.status();
        let text = failed.text().await.unwrap();
        assert!(status.is_server_error(), "{status}: {text}");
        assert!(text.contains("failpoint create.adopt"), "{text}");
        assert!(query(&d, "SELECT id FROM sandboxes").is_empty());
        await_pool(&d, 1).await;
        assert!(entries(&d).is_disjoint(&taken));
        assert_holdings(&d, &BTreeSet::new());
        assert_name_serves_again(&d, "unadopted").await;
    });
}

/// Daytona's `warm_pool` (the real SDK, `tests/daytona/test_warm_pool.py`) drives the shared pools:
/// a pool for a snapshot fills, serves a create that takes the create's environment, is resized,
/// refused twice for one snapshot, and deleted; the daemon counted that create as the pool's hit.
#[test]
fn daytonas_warm_pools_are_the_daemons() {
    e2b_support::e2b_test(async {
        let (_, daytona) = e2b_support::python_sdks();
        let d = e2b_support::start().await;
        let api = format!("{}/api", d.url());
        let env = [
            ("DAYTONA_API_URL", api.as_str()),
            ("DAYTONA_API_KEY", e2b_support::API_KEY),
        ];
        e2b_support::run_script(&d, &daytona, &["tests/daytona/test_warm_pool.py"], &env).await;
        let pool = base_pool(&d).await;
        assert_eq!(
            (pool["hits"].as_u64(), pool["size"].as_u64()),
            (Some(1), Some(0)),
            "{pool}"
        );
        let deadline = Instant::now() + Duration::from_secs(30);
        while !entries(&d).is_empty() || !runtime_ids(&d).is_empty() {
            assert!(
                Instant::now() < deadline,
                "a deleted pool kept {:?}",
                runtime_ids(&d)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

/// A template's pool serves its sandboxes with the template's files (an image template: a
/// snapshot), and the template is not deleted under its pooled sandboxes: 409 while it has a pool,
/// 204 once the pool is emptied and its sandboxes gone.
#[test]
fn a_templates_pool_serves_its_files_and_holds_the_template() {
    e2e(|| async {
        let d = Daemon::start().await;
        let id = d.create_id().await;
        let wrote = d
            .exec(&id, &["sh", "-c", "echo from-snap > /home/user/snap.txt"])
            .await;
        assert_eq!(wrote.exit_code, 0);
        let snap = d
            .post_json(
                &format!("/v1/sandboxes/{id}/snapshot"),
                &json!({"name": "pooled"}),
            )
            .await;
        assert_eq!(snap.status(), 201);
        set_pool(&d, "pooled", 1).await;
        let deadline = Instant::now() + Duration::from_secs(60);
        while query(
            &d,
            "SELECT id FROM warm_pool WHERE template = 'pooled' AND state = 'ready'",
        )
        .is_empty()
        {
            assert!(
                Instant::now() < deadline,
                "the pool never filled: {}",
                d.log_tail(40)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let made = id_of(&d.create(json!({"template": "pooled"})).await);
        let pools = d.get_json("/v1/warm-pools").await;
        let pool = pools["warmPools"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["template"] == "pooled")
            .cloned();
        assert_eq!(
            pool.as_ref().map(|p| p["hits"].clone()),
            Some(json!(1)),
            "{pools}"
        );
        let out = d.exec(&made, &["cat", "/home/user/snap.txt"]).await;
        assert_eq!(out.stdout.trim(), "from-snap");
        for sandbox in [&id, &made] {
            assert_eq!(
                d.delete(&format!("/v1/sandboxes/{sandbox}")).await.status(),
                204
            );
        }
        let refused = d.delete("/v1/templates/pooled").await;
        assert_eq!(
            refused.status(),
            409,
            "{}",
            refused.text().await.unwrap_or_default()
        );
        set_pool(&d, "pooled", 0).await;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let status = d.delete("/v1/templates/pooled").await.status();
            if status == 204 {
                break;
            }
            assert_eq!(status, 409);
            assert!(
                Instant::now() < deadline,
                "the emptied pool kept its sandboxes"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(entries(&d).is_empty());
    });
}

/// The steps a response names in its `Server-Timing` header (`name;dur=MS, …`), each with a
/// duration that parses.
fn server_timing(response: &reqwest::Response) -> Vec<String> {
    let value = response
        .headers()
        .get("server-timing")
        .unwrap_or_else(|| panic!("no Server-Timing on {}", response.url()))
        .to_str()
        .unwrap()
        .to_string();
    value
        .split(", ")
        .map(|entry| {
            let (name, dur) = entry
                .split_once(";dur=")
                .unwrap_or_else(|| panic!("{value}"));
            let ms: f64 = dur.parse().unwrap_or_else(|_| panic!("{value}"));
            assert!((0.0..60_000.0).contains(&ms), "{value}");
            name.to_string()
        })
        .collect()
}

/// A create names its steps in `Server-Timing` (`sandboxd_service::timing`): a cold one boots a
/// sandbox (`runtime-create`, `start`, `ready`), one from the pool adopts one (`adopt`) while it
/// writes once (`admit`), and gives its agent its environment (`init`) only when it has one the
/// pool's agents were not booted with; an exec names its lookup and its agent call, a resume its
/// thaw, the end of the terminals its pause cut off and its write, a delete its lookup, claim and
/// halt.
#[test]
fn creates_execs_resumes_and_deletes_name_their_steps_in_server_timing() {
    e2e(|| async {
        let d = Daemon::start().await;
        let cold = d.post_json("/v1/sandboxes", &json!({})).await;
        let steps = server_timing(&cold);
        assert_eq!(cold.status(), 201);
        for step in ["prepare", "admit", "runtime-create", "start", "ready"] {
            assert!(steps.iter().any(|s| s == step), "{step} not in {steps:?}");
        }
        set_pool(&d, "base", 1).await;
        await_pool(&d, 1).await;
        let with_env = d
            .post_json("/v1/sandboxes", &json!({"env": {"A": "1"}}))
            .await;
        assert_eq!(with_env.status(), 201);
        let mut steps = server_timing(&with_env);
        steps.sort();
        assert_eq!(
            steps,
            ["admit", "adopt", "init", "prepare"],
            "a pooled create boots nothing\n{}",
            d.log_tail(40)
        );
        await_pool(&d, 1).await;
        let pooled = d.post_json("/v1/sandboxes", &json!({})).await;
        let mut steps = server_timing(&pooled);
        assert_eq!(pooled.status(), 201);
        steps.sort();
        assert_eq!(
            steps,
            ["admit", "adopt", "prepare"],
            "a pooled create boots nothing\n{}",
            d.log_tail(40)
        );
        let id = id_of(&pooled.json::<Value>().await.unwrap());
        let exec = d
            .post_json(
                &format!("/v1/sandboxes/{id}/exec"),
                &json!({"cmd": ["true"]}),
            )
            .await;
        assert_eq!(exec.status(), 200);
        assert_eq!(server_timing(&exec), ["resolve", "agent"]);
        let paused = d
            .post_json(&format!("/v1/sandboxes/{id}/pause"), &json!({}))
            .await;
        assert_eq!(paused.status(), 200);
        let resumed = d
            .post_json(&format!("/v1/sandboxes/{id}/resume"), &json!({}))
            .await;
        assert_eq!(resumed.status(), 200);
        assert_eq!(server_timing(&resumed), ["thaw", "terminals", "record"]);
        let deleted = d.delete(&format!("/v1/sandboxes/{id}")).await;
        assert_eq!(deleted.status(), 204);
        assert_eq!(server_timing(&deleted), ["resolve", "claim", "halt"]);
        let missing = d
            .http()
            .get(d.endpoint("/v1/sandboxes"))
            .send()
            .await
            .unwrap();
        assert!(
            missing.headers().get("server-timing").is_none(),
            "a list times no steps"
        );
    });
}

/// Invariant: a pool counts an entry `ready` only once a create can take it. Its agent's call home
/// makes the store's entry `ready` before the filler has warmed it up and offered it; until then
/// the pool says it is warming, so a client that waited for a ready pool is not made cold.
#[test]
fn a_pool_counts_ready_only_what_a_create_can_take() {
    e2e(|| async {
        let d = Daemon::start_with(
            &["--warm-pool", "base=1"],
            &[("FAILPOINTS", "pool.after-ready=1*return(3000)")],
        )
        .await;
        wait_for_row(&d, "SELECT id FROM warm_pool WHERE state = 'ready'").await;
        let pool = base_pool(&d).await;
        assert_eq!(
            (&pool["ready"], &pool["warming"]),
            (&json!(0), &json!(1)),
            "called home, not yet offered: {pool}"
        );
        await_pool(&d, 1).await;
        d.create_id().await;
        assert_eq!(base_pool(&d).await["hits"], 1, "the create took it");
    });
}

/// A pooled sandbox boots with the default policy (nothing out); a create that asks for egress
/// still takes it from the pool, and the adopted sandbox has its default route from its first
/// command (`Runtime::set_egress_lists` on adoption), where one without egress has none.
#[test]
fn a_pooled_create_asking_for_egress_is_let_out() {
    e2e(|| async {
        let d = Daemon::start_with(&["--warm-pool", "base=2"], &[]).await;
        await_pool(&d, 2).await;
        let routes = "awk 'NR > 1 && $2 == \"00000000\"' /proc/net/route | wc -l";
        let open = id_of(&d.create(json!({"network": {"egress": true}})).await);
        let closed = id_of(&d.create(json!({})).await);
        assert_eq!(base_pool(&d).await["hits"], 2, "both came from the pool");
        let open_routes = d.exec(&open, &["sh", "-c", routes]).await;
        assert_eq!(open_routes.stdout.trim(), "1", "{open_routes:?}");
        let closed_routes = d.exec(&closed, &["sh", "-c", routes]).await;
        assert_eq!(closed_routes.stdout.trim(), "0", "{closed_routes:?}");
    });
}
