//! Tests of the sandboxes table and its queries.

use super::*;
use crate::test_util::{new_sandbox, open_temp};

/// Invariant: a non-empty sandbox name belongs to at most one sandbox (`idx_sandboxes_name`).
/// 100 concurrent creates with one name: exactly one wins, 99 get the typed conflict.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_same_name_inserts_yield_one_winner() {
    let (_dir, store, _t) = open_temp();
    let tasks: Vec<_> = (0..100)
        .map(|i| {
            let w = store.writer().clone();
            tokio::spawn(async move {
                w.write(move |tx| tx.insert_sandbox(new_sandbox(&format!("sbx-{i}"), "web", i)))
                    .await
            })
        })
        .collect();
    let (mut ok, mut conflict) = (0, 0);
    for t in tasks {
        match t.await.unwrap() {
            Ok(s) => {
                assert_eq!(s.name, "web");
                ok += 1
            }
            Err(StoreError::NameConflict { name }) => {
                assert_eq!(name, "web");
                conflict += 1
            }
            Err(e) => panic!("unexpected {e:?}"),
        }
    }
    assert_eq!((ok, conflict), (1, 99));
    let (all, _) = store
        .reader()
        .read(|tx| tx.list_sandboxes(&SandboxFilter::default()))
        .await
        .unwrap();
    assert_eq!(all.len(), 1);
}

#[tokio::test]
async fn unnamed_sandboxes_coexist_and_id_conflict_is_not_a_name_conflict() {
    let (_dir, store, _t) = open_temp();
    let w = store.writer();
    for id in ["a", "b", "c"] {
        w.write(move |tx| tx.insert_sandbox(new_sandbox(id, "", 1)))
            .await
            .unwrap();
    }
    let err = w
        .write(|tx| tx.insert_sandbox(new_sandbox("a", "fresh-name", 2)))
        .await
        .unwrap_err();
    assert!(
        matches!(err, StoreError::SandboxExists { ref id } if id == "a"),
        "{err:?}"
    );
}

#[tokio::test]
async fn get_by_id_or_name_prefers_id() {
    let (_dir, store, _t) = open_temp();
    let w = store.writer();
    w.write(|tx| {
        tx.insert_sandbox(new_sandbox("sbx-1", "alpha", 1))?;
        // A sandbox whose *name* equals another's id.
        tx.insert_sandbox(new_sandbox("sbx-2", "sbx-1", 2))?;
        Ok(())
    })
    .await
    .unwrap();
    let (by_id, by_name, missing, empty) = store
        .reader()
        .read(|tx| {
            Ok((
                tx.get_sandbox("sbx-1")?,
                tx.get_sandbox("alpha")?,
                tx.get_sandbox("nope")?,
                tx.get_sandbox("")?,
            ))
        })
        .await
        .unwrap();
    assert_eq!(by_id.unwrap().id, "sbx-1");
    assert_eq!(by_name.unwrap().id, "sbx-1");
    assert!(missing.is_none());
    assert!(empty.is_none(), "the empty name matches no sandbox");
}

#[tokio::test]
async fn round_trips_every_field() {
    let (_dir, store, _t) = open_temp();
    let mut n = new_sandbox("sbx-rt", "rt", 10);
    n.metadata.insert("team".into(), "a".into());
    n.env.insert("FOO".into(), "bar".into());
    n.network = serde_json::json!({"allow": ["1.1.1.1"]});
    n.expires_at = Some(99);
    let expected = n.clone();
    let inserted = store
        .writer()
        .write(move |tx| tx.insert_sandbox(n))
        .await
        .unwrap();
    let read = store
        .reader()
        .read(|tx| tx.get_sandbox_by_id("sbx-rt"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(inserted, read);
    assert_eq!(read.metadata, expected.metadata);
    assert_eq!(read.env, expected.env);
    assert_eq!(read.network, expected.network);
    assert_eq!(read.expires_at, Some(99));
    assert_eq!(read.updated_at, 10);
    assert_eq!(read.generation, 0);
    assert!(
        !format!("{read:?}").contains("tok-sbx-rt"),
        "Debug redacts the agent token"
    );
}

/// Lookups by key, name and agent token (the proxy's route for old SDKs) search an index, never
/// the whole table.
#[tokio::test]
async fn lookups_search_an_index() {
    let (_dir, store, _t) = open_temp();
    let plans = store
        .reader()
        .read(|tx| {
            let plan = |condition: &str| -> Result<String> {
                let sql = format!("EXPLAIN QUERY PLAN SELECT id FROM sandboxes WHERE {condition}");
                let mut stmt = tx.conn().prepare(&sql)?;
                let rows = stmt.query_map(["k"], |r| r.get::<_, String>(3))?;
                Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?.join("; "))
            };
            Ok([BY_KEY, BY_NAME, BY_AGENT_TOKEN].map(|c| (c, plan(c))))
        })
        .await
        .unwrap();
    for (condition, plan) in plans {
        let plan = plan.unwrap();
        assert!(!plan.contains("SCAN"), "{condition}: {plan}");
        assert!(plan.contains("USING"), "{condition}: {plan}");
    }
}

/// State changes are conditional: only a sandbox in one of `from` moves, and each move bumps the
/// generation.
#[tokio::test]
async fn set_state_applies_only_from_listed_states() {
    let (_dir, store, _t) = open_temp();
    let w = store.writer();
    w.write(|tx| tx.insert_sandbox(new_sandbox("s", "", 1)))
        .await
        .unwrap();
    use SandboxState::*;
    let (a, b, c, d) = w
        .write(|tx| {
            Ok((
                tx.set_state("s", &[Running], Stopping, None, 2)?,
                tx.set_state("s", &[Creating, Starting], Running, None, 3)?,
                tx.set_state("s", &[Creating], Failed, Some("late"), 4)?,
                tx.set_state("s", &[], Failed, None, 5)?,
            ))
        })
        .await
        .unwrap();
    assert_eq!((a, b, c, d), (false, true, false, false));
    let s = store
        .reader()
        .read(|tx| tx.get_sandbox_by_id("s"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(s.state, Running);
    assert_eq!(s.generation, 1);
    assert_eq!(s.updated_at, 3);
    assert!(w
        .write(|tx| tx.set_state("s", &SandboxState::ALL, Failed, Some("oom"), 6))
        .await
        .unwrap());
    let s = store
        .reader()
        .read(|tx| tx.get_sandbox_by_id("s"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (s.state, s.failure_reason.as_deref()),
        (Failed, Some("oom"))
    );
}

#[tokio::test]
async fn list_pages_by_created_at_and_filters() {
    let (_dir, store, _t) = open_temp();
    store
        .writer()
        .write(|tx| {
            for i in 0..25i64 {
                let mut n = new_sandbox(&format!("s{i:02}"), "", 100 - i % 5);
                n.metadata.insert("parity".into(), (i % 2).to_string());
                n.metadata.insert("k".into(), "v".into());
                n.state = if i % 3 == 0 {
                    SandboxState::Running
                } else {
                    SandboxState::Paused
                };
                tx.insert_sandbox(n)?;
            }
            Ok(())
        })
        .await
        .unwrap();
    // Walk every page of 7.
    let mut seen = Vec::new();
    let mut cursor = None;
    loop {
        let filter = SandboxFilter {
            cursor: cursor.clone(),
            limit: 7,
            ..Default::default()
        };
        let (page, next) = store
            .reader()
            .read(move |tx| tx.list_sandboxes(&filter))
            .await
            .unwrap();
        assert!(page.len() <= 7);
        seen.extend(page.into_iter().map(|s| (s.created_at, s.id)));
        match next {
            Some(c) => cursor = Some(c),
            None => break,
        }
    }
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(seen, sorted, "ordered, no duplicates");
    assert_eq!(seen.len(), 25, "nothing skipped");

    let filter = SandboxFilter {
        metadata: vec![("parity".into(), "0".into()), ("k".into(), "v".into())],
        states: vec![SandboxState::Running],
        ..Default::default()
    };
    let (page, next) = store
        .reader()
        .read(move |tx| tx.list_sandboxes(&filter))
        .await
        .unwrap();
    let mut ids: Vec<_> = page.iter().map(|s| s.id.clone()).collect();
    ids.sort();
    // even and divisible by 3: 0, 6, 12, 18, 24
    assert_eq!(ids, ["s00", "s06", "s12", "s18", "s24"]);
    assert!(next.is_none());

    let filter = SandboxFilter {
        metadata: vec![("parity".into(), "2".into())],
        ..Default::default()
    };
    let (page, _) = store
        .reader()
        .read(move |tx| tx.list_sandboxes(&filter))
        .await
        .unwrap();
    assert!(page.is_empty());

    for bad in [
        "garbage",
        "",
        ":sb1",
        "12:",
        "012:sb1",
        "-5:sb1",
        "+5:sb1",
        "1:SB1",
        "1:sb 1",
        "1234567890123456789:sb1",
    ] {
        let filter = SandboxFilter {
            cursor: Some(bad.into()),
            ..Default::default()
        };
        let err = store
            .reader()
            .read(move |tx| tx.list_sandboxes(&filter))
            .await
            .unwrap_err();
        assert!(matches!(err, StoreError::InvalidCursor), "{bad:?}: {err:?}");
    }
}

/// Whatever matches [`CURSOR_PATTERN`] (the shape documented for clients) is a cursor the store
/// takes, even one no listing returned.
#[tokio::test]
async fn every_cursor_of_the_documented_shape_is_accepted() {
    let (_dir, store, _t) = open_temp();
    for good in ["0:a", "1733000000000:sbabc123", "999999999999999999:x_y-z"] {
        let filter = SandboxFilter {
            cursor: Some(good.into()),
            ..Default::default()
        };
        let (page, next) = store
            .reader()
            .read(move |tx| tx.list_sandboxes(&filter))
            .await
            .unwrap_or_else(|e| panic!("{good:?}: {e}"));
        assert!(page.is_empty() && next.is_none());
    }
}

#[tokio::test]
async fn expired_sandboxes_excludes_future_and_deleting() {
    let (_dir, store, _t) = open_temp();
    store
        .writer()
        .write(|tx| {
            for (id, exp) in [
                ("past", Some(50)),
                ("now", Some(100)),
                ("future", Some(101)),
                ("never", None),
            ] {
                let mut n = new_sandbox(id, "", 1);
                n.expires_at = exp;
                tx.insert_sandbox(n)?;
            }
            let mut n = new_sandbox("gone", "", 1);
            n.expires_at = Some(1);
            n.state = SandboxState::Deleting;
            tx.insert_sandbox(n)?;
            Ok(())
        })
        .await
        .unwrap();
    let ids: Vec<String> = store
        .reader()
        .read(|tx| tx.expired_sandboxes(100))
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.id)
        .collect();
    assert_eq!(ids, ["past", "now"]);
}

#[tokio::test]
async fn released_name_can_be_taken_by_a_new_sandbox() {
    let (_dir, store, _t) = open_temp();
    let w = store.writer();
    w.write(|tx| tx.insert_sandbox(new_sandbox("old", "web", 1)))
        .await
        .unwrap();
    let err = w
        .write(|tx| tx.insert_sandbox(new_sandbox("new", "web", 2)))
        .await
        .unwrap_err();
    assert!(matches!(err, StoreError::NameConflict { .. }), "{err:?}");
    assert!(w.write(|tx| tx.release_name("old")).await.unwrap());
    assert!(
        !w.write(|tx| tx.release_name("old")).await.unwrap(),
        "a second release frees nothing"
    );
    assert!(!w.write(|tx| tx.release_name("ghost")).await.unwrap());
    let taken = w
        .write(|tx| tx.insert_sandbox(new_sandbox("new", "web", 2)))
        .await
        .unwrap();
    assert_eq!(taken.name, "web");
    let old = store
        .reader()
        .read(|tx| tx.get_sandbox_by_id("old"))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(old.name, "");
}

#[tokio::test]
async fn delete_reports_whether_it_existed() {
    let (_dir, store, _t) = open_temp();
    let w = store.writer();
    w.write(|tx| tx.insert_sandbox(new_sandbox("d", "named", 1)))
        .await
        .unwrap();
    assert!(w.write(|tx| tx.delete_sandbox("d")).await.unwrap());
    assert!(!w.write(|tx| tx.delete_sandbox("d")).await.unwrap());
    // The name is free again.
    w.write(|tx| tx.insert_sandbox(new_sandbox("d2", "named", 2)))
        .await
        .unwrap();
}

/// A sandbox's lifecycle is stored as given; auto-resume without auto-pause is unrepresentable
/// (the column's CHECK refuses it, so no flow can write a sandbox that waits for a resume it would
/// never get).
#[tokio::test]
async fn lifecycle_round_trips_and_resume_needs_pause() {
    let (_dir, store, _t) = open_temp();
    let w = store.writer();
    let mut n = new_sandbox("p", "", 1);
    n.lifecycle = Lifecycle {
        auto_pause: true,
        auto_resume: true,
        timeout_ms: 60_000,
        pause_files_only: false,
    };
    let inserted = w.write(move |tx| tx.insert_sandbox(n)).await.unwrap();
    assert_eq!(inserted.lifecycle.timeout_ms, 60_000);
    assert!(inserted.lifecycle.auto_pause && inserted.lifecycle.auto_resume);
    let mut n = new_sandbox("f", "", 1);
    n.lifecycle.auto_pause = true;
    n.lifecycle.pause_files_only = true;
    let inserted = w.write(move |tx| tx.insert_sandbox(n)).await.unwrap();
    assert!(inserted.lifecycle.pause_files_only);
    // Resume without pause; a files-only pause without pause, or with auto-resume.
    let refusals: [fn(&mut Lifecycle); 3] = [
        |l| l.auto_resume = true,
        |l| l.pause_files_only = true,
        |l| {
            *l = Lifecycle {
                auto_pause: true,
                auto_resume: true,
                timeout_ms: 0,
                pause_files_only: true,
            }
        },
    ];
    for (i, refuse) in refusals.into_iter().enumerate() {
        let mut n = new_sandbox(&format!("r{i}"), "", 1);
        refuse(&mut n.lifecycle);
        let refused = w.write(move |tx| tx.insert_sandbox(n)).await;
        assert!(
            matches!(&refused, Err(StoreError::Sqlite(e)) if e.to_string().contains("CHECK")),
            "{i}: {refused:?}"
        );
    }
}

/// The deadline of an auto-pausing sandbox goes only once it is paused and still due; a deadline
/// moved meanwhile (a resume, a new timeout) stands; a running or deleting-at-deadline one keeps its.
#[tokio::test]
async fn a_paused_deadline_is_dropped_only_when_due() {
    let (_dir, store, _t) = open_temp();
    let w = store.writer();
    let dropped = w
        .write(|tx| {
            for (id, auto_pause, state, expires_at) in [
                ("due", true, SandboxState::Paused, 100),
                ("stopped", true, SandboxState::Stopped, 100),
                ("moved", true, SandboxState::Paused, 200),
                ("running", true, SandboxState::Running, 100),
                ("kill", false, SandboxState::Paused, 100),
            ] {
                let mut n = new_sandbox(id, "", 1);
                n.state = state;
                n.expires_at = Some(expires_at);
                n.lifecycle.auto_pause = auto_pause;
                tx.insert_sandbox(n)?;
            }
            ["due", "stopped", "moved", "running", "kill", "absent"]
                .map(|id| tx.drop_paused_deadline(id, 150))
                .into_iter()
                .collect::<Result<Vec<_>>>()
        })
        .await
        .unwrap();
    assert_eq!(dropped, [true, true, false, false, false, false]);
    let deadlines = store
        .reader()
        .read(|tx| {
            ["due", "moved", "running", "kill"]
                .map(|id| tx.get_sandbox_by_id(id).map(|s| s.unwrap().expires_at))
                .into_iter()
                .collect::<Result<Vec<_>>>()
        })
        .await
        .unwrap();
    assert_eq!(deadlines, [None, Some(200), Some(100), Some(100)]);
}
