//! Network posture against the real binary: the allow and deny lists set through `sbx create`, shown as
//! enforced, and refused when they cannot be enforced. (Enforcement itself is proved at the runtime
//! level, `crates/runtime/tests/egress.rs`, against an "outside" network namespace.)

mod common;

use common::{assert_success, e2e, id_of, stderr, stdout, Daemon};
use serde_json::{json, Value};

/// `sbx create --allow-out/--deny-out` sets the lists; the sandbox shows them as enforced (canonical:
/// `/32` added, sorted, a block inside another dropped); an entry that cannot be enforced is refused.
#[test]
fn sbx_create_sets_network_lists_and_the_sandbox_shows_them() {
    e2e(|| async {
        let daemon = Daemon::start().await;
        let created = daemon.sbx(&[
            "create",
            "--json",
            "--allow-out",
            "10.1.0.0/16",
            "--allow-out",
            "1.1.1.1",
            "--allow-out",
            "10.0.0.0/8",
            "--deny-out",
            "0.0.0.0/0",
        ]);
        assert_success("sbx create --allow-out", &created);
        let sandbox: Value = serde_json::from_str(&stdout(&created)).unwrap();
        let expected = json!({"egress": false, "allowOut": ["1.1.1.1/32", "10.0.0.0/8"],
                              "denyOut": ["0.0.0.0/0"]});
        assert_eq!(sandbox["network"], expected, "{sandbox}");
        let id = id_of(&sandbox);
        let got = daemon.get_json(&format!("/v1/sandboxes/{id}")).await;
        assert_eq!(got["network"], expected);
        assert_eq!(daemon.exec(&id, &["true"]).await.exit_code, 0);

        let refused = daemon.sbx(&["create", "--deny-out", "example.com"]);
        assert!(!refused.status.success());
        assert!(
            stderr(&refused).contains("domain names in network.denyOut are not supported"),
            "{}",
            stderr(&refused)
        );
        assert_eq!(
            daemon.list_all().await.len(),
            1,
            "the refused create made nothing"
        );
    });
}
