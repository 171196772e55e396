//! Three members in one process on loopback ports: init, join, uniqueness across nodes, the secret.

use sandboxd_cluster::{Cluster, ClusterConfig, Command, Member, Outcome};
use std::net::TcpListener;
use std::time::Duration;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn node(dir: &std::path::Path, id: u64, secret: &str) -> Cluster {
    let port = free_port();
    let member = Member {
        cluster_addr: format!("127.0.0.1:{port}"),
        api_addr: format!("127.0.0.1:{}", port + 1),
    };
    let config = ClusterConfig::new(
        id,
        member,
        format!("127.0.0.1:{port}").parse().unwrap(),
        secret.into(),
        dir.join(id.to_string()),
    );
    Cluster::start(config).await.expect("a node starts")
}

async fn three(dir: &std::path::Path) -> Vec<Cluster> {
    let first = node(dir, 1, "s3cret").await;
    first.initialize().await.unwrap();
    let mut nodes = vec![first];
    for id in [2, 3] {
        let n = node(dir, id, "s3cret").await;
        n.join(&nodes[0].member().cluster_addr, Duration::from_secs(20))
            .await
            .expect("joins");
        nodes.push(n);
    }
    nodes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_name_claims_from_every_node_have_one_winner() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = three(dir.path()).await;
    // Leases first: a reservation on a node the log does not know is refused.
    for n in &nodes {
        n.propose(Command::Lease {
            node: n.id(),
            member: n.member().clone(),
            capacity: Default::default(),
            at_ms: 0,
            until_ms: i64::MAX / 2,
        })
        .await
        .unwrap();
    }
    let mut tasks = Vec::new();
    for i in 0..60 {
        let n = nodes[i % 3].clone();
        tasks.push(tokio::spawn(async move {
            n.propose(Command::Reserve {
                id: format!("sb{i}"),
                owner: n.id(),
                name: "shared".into(),
                token_digest: String::new(),
                summary: Default::default(),
                at_ms: i as i64,
            })
            .await
            .unwrap()
        }));
    }
    let mut won = Vec::new();
    for (i, t) in tasks.into_iter().enumerate() {
        match t.await.unwrap() {
            Outcome::Applied => won.push(format!("sb{i}")),
            Outcome::NameTaken { .. } => {}
            other => panic!("unexpected outcome {other:?}"),
        }
    }
    assert_eq!(won.len(), 1, "exactly one claim wins: {won:?}");
    // Every replica converges on the winner.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    for n in &nodes {
        while n.read(|s| s.holder_of_name("shared").map(str::to_string)) != Some(won[0].clone()) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "node {} never applied the winner",
                n.id()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let status = nodes[1].status();
    assert_eq!(status.members.len(), 3);
    assert!(
        status.members.iter().all(|m| m.role == "voter"),
        "{status:?}"
    );
    assert!(status.leader_id.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_the_wrong_secret_cannot_join() {
    let dir = tempfile::tempdir().unwrap();
    let first = node(dir.path(), 1, "right").await;
    first.initialize().await.unwrap();
    let intruder = node(dir.path(), 2, "wrong").await;
    let err = intruder
        .join(&first.member().cluster_addr, Duration::from_millis(500))
        .await
        .expect_err("refused");
    assert!(err.to_string().contains("401"), "{err}");
    assert_eq!(first.members().len(), 1);
}
