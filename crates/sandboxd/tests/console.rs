//! The web console in a real browser: Debian's chromium, headless, driven by playwright-core
//! (`scripts/console-browser`) through `tests/console/test_console.mjs`. A screenshot of each step
//! is kept in `target/test-artifacts/console/`.

mod common;

use common::{e2e, Daemon};
use sandboxd_test_support::workspace_root;
use std::process::Stdio;

/// Invariant: the console shows nothing but its sign-in without a key; with one, a person can
/// create a sandbox, use its terminal, upload a file, pause and delete it, and the table follows
/// the event stream.
#[test]
fn the_console_works_in_a_real_browser() {
    e2e(|| async {
        let root = workspace_root();
        assert!(
            root.join("tests/console/node_modules/playwright-core")
                .exists(),
            "playwright-core is not installed: run scripts/console-browser"
        );
        let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        assert!(
            std::path::Path::new(&chromium).exists(),
            "no chromium at {chromium}: apt install chromium (scripts/test does)"
        );
        let d = Daemon::start().await;
        let artifacts = root.join("target/test-artifacts/console");
        let out = tokio::process::Command::new("node")
            .arg("tests/console/test_console.mjs")
            .current_dir(&root)
            .env("SANDBOXD_URL", d.url())
            .env("SANDBOXD_TOKEN", d.token())
            .env("CHROMIUM", &chromium)
            .env("CONSOLE_ARTIFACTS", &artifacts)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .expect("run node");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "the console test failed (screenshots in {}):\n{stdout}\n{stderr}",
            artifacts.display()
        );
        assert!(stdout.contains("console: ok"), "{stdout}");
        assert!(
            d.list_all().await.is_empty(),
            "the console test left a sandbox"
        );
    });
}
