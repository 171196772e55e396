//! The real, unmodified `daytona` Python SDK (installed by `scripts/daytona-sdks`) with a key minted
//! by `POST /v1/api-keys` as `DAYTONA_API_KEY`: it creates, runs and lists with it, and is refused
//! on its next call once the key is revoked (`tests/daytona/test_api_key.py`).

mod common;
mod e2b_support;

use e2b_support::{e2b_test, run_script};
use sandboxd_test_support::workspace_root;

/// Invariant: a revoked key is refused by the Daytona facade on the SDK's very next call.
#[test]
fn the_daytona_sdk_works_with_a_minted_key_until_it_is_revoked() {
    e2b_test(async {
        let python = workspace_root().join(".venv-daytona/bin/python");
        assert!(
            python.exists(),
            "the Daytona SDK is not installed: run scripts/daytona-sdks"
        );
        let d = e2b_support::start().await;
        let (key, id) = d.mint_key("daytona", "user").await;
        let api = format!("{}/api", d.url());
        let env = [
            ("DAYTONA_API_URL", api.as_str()),
            ("DAYTONA_API_KEY", key.as_str()),
            ("SBX_ADMIN_KEY", e2b_support::API_KEY),
            ("SBX_KEY_ID", id.as_str()),
        ];
        run_script(&d, &python, &["tests/daytona/test_api_key.py"], &env).await;
    });
}
