//! Sandboxes from images that hold almost nothing: the daemon's own machinery inside a sandbox needs
//! nothing of the image but what the caller's command needs itself.
//!
//! - Daytona's sessions in an image of a static `bash` and `busybox` without its `mkfifo`, `mkdir`,
//!   `rm`, `mv` and `cat` links: a command answers with its output and exit code, the session keeps
//!   its state between commands, input reaches a running command, and a command that ends the
//!   session's shell is answered at once (a clear error), never a wait.
//!   A language server the image lacks is refused at once (409, naming the program and its
//!   package), and a call on one never started is a 404 that says to start it.
//! - An image whose `WorkingDir` is missing from its files: commands start there all the same, in
//!   its sandboxes, in a Dockerfile build `FROM` it and in a snapshot of one of its sandboxes.

mod common;
mod e2b_support;

use e2b_support::{call, e2b_test};
use reqwest::Method;
use sandboxd_test_support::registry::{require_tools, ImageBuilder, TestRegistry, REGISTRY_TOOLS};
use serde_json::json;
use std::time::Duration;

/// The static bash Debian's `bash-static` installs.
const STATIC_BASH: &str = "/bin/bash-static";
/// Longest any one call of this test may take: none may hang.
const CALL_DEADLINE: Duration = Duration::from_secs(30);

async fn within<T>(what: &str, call: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(CALL_DEADLINE, call)
        .await
        .unwrap_or_else(|_| panic!("{what} did not answer within {CALL_DEADLINE:?}"))
}

#[test]
fn sessions_run_in_an_image_without_the_tools_of_a_distribution() {
    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    assert!(
        std::path::Path::new(STATIC_BASH).exists(),
        "{STATIC_BASH} is missing: apt-get install bash-static (scripts/test installs it)"
    );
    e2b_test(async {
        let registry = TestRegistry::start();
        let image = ImageBuilder::busybox()
            .layer(|root| {
                for gone in ["mkfifo", "mkdir", "rm", "mv", "cat"] {
                    std::fs::remove_file(root.join("bin").join(gone)).unwrap();
                }
                std::fs::copy(STATIC_BASH, root.join("bin/bash")).unwrap();
            })
            .build();
        registry.push(&image, "team/minimal:v1");
        let d = e2b_support::start_with_mirror(&registry).await;
        let id = common::id_of(&d.create(json!({ "image": "team/minimal:v1" })).await);
        let t = format!("/api/toolbox/{id}/process/session");

        let (status, answer) = within(
            "create_session",
            call(&d, Method::POST, &t, Some(json!({ "sessionId": "s1" }))),
        )
        .await;
        assert!(status < 300, "create_session: {status} {answer}");
        let exec_path = format!("{t}/s1/exec");
        let exec = |command: &str, run_async: bool| {
            let body = json!({ "command": command, "runAsync": run_async });
            call(&d, Method::POST, &exec_path, Some(body))
        };

        let (status, answer) = within("echo", exec("echo hi", false)).await;
        assert_eq!(status, 200, "{answer}");
        assert_eq!(answer["stdout"], "hi\n", "{answer}");
        assert_eq!(answer["exitCode"], 0, "{answer}");

        // The session's own shell keeps its state.
        let (status, answer) = within("cd", exec("cd /tmp; X=5; false", false)).await;
        assert_eq!((status, &answer["exitCode"]), (200, &json!(1)), "{answer}");
        let (_, answer) = within("state", exec("echo $X $PWD", false)).await;
        assert_eq!(answer["stdout"], "5 /tmp\n", "{answer}");

        // Input reaches a command while it runs.
        let (status, answer) = within("read", exec("read line; echo got $line", true)).await;
        assert_eq!(status, 202, "{answer}");
        let cid = answer["cmdId"].as_str().expect("a command id").to_string();
        let input = format!("{t}/s1/command/{cid}/input");
        let (status, answer) = within(
            "input",
            call(&d, Method::POST, &input, Some(json!({ "data": "word\n" }))),
        )
        .await;
        assert!(status < 300, "input: {status} {answer}");
        // A session runs its commands in order: once the next one answers, this one has ended.
        let (status, answer) = within("after read", exec("true", false)).await;
        assert_eq!((status, &answer["exitCode"]), (200, &json!(0)), "{answer}");
        let logs = format!("{t}/s1/command/{cid}/logs");
        let (_, said) = within("logs", call(&d, Method::GET, &logs, None)).await;
        assert_eq!(said["stdout"], "got word\n", "{said}");
        let (status, _) = within(
            "late input",
            call(&d, Method::POST, &input, Some(json!({ "data": "more\n" }))),
        )
        .await;
        assert_eq!(status, 410, "input after the command ended");

        // A command that ends the shell itself is answered, not waited for forever.
        let (status, answer) = within("exit", exec("exit 3", false)).await;
        assert_eq!(status, 409, "{answer}");
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(message.contains("shell is gone"), "{answer}");

        // A language server the image lacks is a clear refusal at once; a call on a server that
        // was never started says to start it.
        let lsp = format!("/api/toolbox/{id}/lsp");
        let server = json!({ "languageId": "python", "pathToProject": "/tmp" });
        let (status, answer) = within(
            "lsp start",
            call(&d, Method::POST, &format!("{lsp}/start"), Some(server)),
        )
        .await;
        assert_eq!(status, 409, "{answer}");
        let message = answer["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("`pylsp` cannot start") && message.contains("python3-pylsp"),
            "{answer}"
        );
        let symbols = format!(
            "{lsp}/document-symbols?languageId=python&pathToProject=/tmp&uri=file:///tmp/a.py"
        );
        let (status, answer) = within("lsp symbols", call(&d, Method::GET, &symbols, None)).await;
        assert_eq!(status, 404, "{answer}");
        assert!(
            answer["message"]
                .as_str()
                .unwrap_or_default()
                .contains("start it first"),
            "{answer}"
        );

        let (status, _) = call(&d, Method::DELETE, &format!("/v1/sandboxes/{id}"), None).await;
        assert!(status < 300, "delete: {status}");
    });
}

/// An image whose configuration names a `WorkingDir` it does not hold (as `umoci config
/// --workingdir` leaves it): commands start there, made as Docker and runc make it at start (root's,
/// 0755); so do a Dockerfile build's `RUN`s `FROM` it, sandboxes of that template, and sandboxes of
/// a snapshot of a sandbox of it.
#[test]
fn a_working_directory_the_image_lacks_is_made_at_start() {
    if !require_tools(REGISTRY_TOOLS) {
        return;
    }
    e2b_test(async {
        let registry = TestRegistry::start();
        let image = ImageBuilder::busybox().workdir("/srv/app").build();
        registry.push(&image, "team/nowork:v1");
        let d = e2b_support::start_with_mirror(&registry).await;
        let id = common::id_of(&d.create(json!({ "image": "team/nowork:v1" })).await);
        let pwd = within("pwd", d.exec(&id, &["sh", "-c", "pwd; stat -c '%a %u' ."])).await;
        assert_eq!(pwd.exit_code, 0, "{pwd:?}");
        assert_eq!(pwd.stdout, "/srv/app\n755 0\n", "{pwd:?}");

        // A build `FROM` it runs its steps there, and so do the template's sandboxes.
        let dockerfile = "FROM team/nowork:v1\nRUN pwd > /built-in\n";
        let body = json!({ "name": "nowork-built", "dockerfile": dockerfile });
        let (status, answer) = call(&d, Method::POST, "/v1/templates", Some(body)).await;
        assert_eq!(status, 202, "{answer}");
        let template = within("the build", common::built(&d, "nowork-built")).await;
        assert_eq!(template["state"], "ready", "{template}");
        let built = common::id_of(&d.create(json!({ "template": "nowork-built" })).await);
        let out = within("pwd", d.exec(&built, &["sh", "-c", "cat /built-in; pwd"])).await;
        assert_eq!(out.stdout, "/srv/app\n/srv/app\n", "{out:?}");

        // A snapshot of a sandbox of it, and a sandbox of the snapshot.
        let snapshot = format!("/v1/sandboxes/{id}/snapshot");
        let (status, answer) = call(
            &d,
            Method::POST,
            &snapshot,
            Some(json!({"name": "nowork-snap"})),
        )
        .await;
        assert_eq!(status, 201, "{answer}");
        let snap = common::id_of(&d.create(json!({ "template": "nowork-snap" })).await);
        let pwd = within("pwd", d.exec(&snap, &["pwd"])).await;
        assert_eq!(pwd.stdout, "/srv/app\n", "{pwd:?}");

        for id in [id, built, snap] {
            let (status, _) = call(&d, Method::DELETE, &format!("/v1/sandboxes/{id}"), None).await;
            assert!(status < 300, "delete: {status}");
        }
    });
}
