//! Git through `/v1` and `sbx git` end to end, with the checks the Daytona git routes get
//! (`tests/daytona/test_files.py`): a real daemon, and a real git server on the host
//! (`tests/support/git_server.py`: `git http-backend` behind basic auth, pushes allowed) on the
//! host's own address, which the sandbox's `allowOut` names.
//!
//! Through `/v1`: a clone without credentials, or with a wrong password, is a 401
//! `git_auth_failed`; with them it succeeds and the clone's `.git/config` holds neither the
//! password nor the user; status sees a new and an edited file; add → commit (the hash is the
//! sandbox's `git rev-parse HEAD`) → push lands the commit, with its author, in the host's bare
//! repository; nothing left to commit is a 409; branches are created, listed, checked out and
//! deleted (a second create is a 409, a missing branch a 404); a commit pushed from the host comes
//! back with pull; a name git would read as an option (`-D`) is a 400 `invalid_request`; an
//! unknown sandbox is a 404 `not_found`, a directory that is no repository a 404
//! `git_repo_not_found`.
//!
//! Through the real `sbx` binary: the same round trip on a second clone, the password from
//! `--password-stdin` or `SBX_GIT_PASSWORD`, failures as `error: … (code)` with exit code 1.
//!
//! Throughout, the git server's password never appears in the daemon's log.

mod common;
mod e2b_support;

use common::{assert_success, id_of, stderr, stdout, Daemon};
use e2b_support::call;
use reqwest::Method as M;
use sandboxd_test_support::workspace_root;
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const USER: &str = "alice";
const HOME: &str = "/home/user";

/// The host's git server (`tests/support/git_server.py`) over one bare repository, `repo.git`,
/// whose `main` has one commit; killed when dropped.
struct GitServer {
    child: Child,
    /// `http://IP:PORT/repo.git`.
    url: String,
    /// The host's address the server listens on.
    ip: String,
    /// Holds `repo.git` and `work`, a clone of it the host commits in.
    root: tempfile::TempDir,
}

impl GitServer {
    fn start(password: &str) -> GitServer {
        let root = tempfile::tempdir().expect("temp dir");
        let bare = root.path().join("repo.git");
        let work = root.path().join("work");
        host_git(
            &["init", "--quiet", "--bare", "--initial-branch=main"],
            &bare,
        );
        host_git(
            &["clone", "--quiet", &bare.display().to_string(), "."],
            &work,
        );
        std::fs::write(work.join("README.md"), "hello\n").expect("write README");
        host_git(&["add", "README.md"], &work);
        host_git(&["commit", "--quiet", "-m", "first"], &work);
        host_git(&["push", "--quiet", "origin", "HEAD:main"], &work);
        let mut child = Command::new("python3")
            .arg(workspace_root().join("tests/support/git_server.py"))
            .arg(root.path())
            .env("GIT_SERVER_USER", USER)
            .env("GIT_SERVER_PASSWORD", password)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run python3 tests/support/git_server.py");
        let mut base = String::new();
        let stdout = child.stdout.take().expect("the server's stdout");
        BufReader::new(stdout)
            .read_line(&mut base)
            .expect("the server prints its URL");
        let base = base.trim().to_string();
        assert!(base.starts_with("http://"), "the git server said {base:?}");
        let ip = base["http://".len()..]
            .split(':')
            .next()
            .unwrap_or_default()
            .to_string();
        GitServer {
            child,
            url: format!("{base}/repo.git"),
            ip,
            root,
        }
    }

    fn work(&self) -> PathBuf {
        self.root.path().join("work")
    }

    /// `git rev-parse REV` in the bare repository.
    fn rev(&self, rev: &str) -> String {
        host_git(&["rev-parse", rev], &self.root.path().join("repo.git"))
    }

    /// Commits `file` (content `file`) on the host and pushes it to `main`.
    fn push_from_host(&self, file: &str) {
        let work = self.work();
        host_git(&["pull", "--quiet", "--ff-only"], &work);
        std::fs::write(work.join(file), file).expect("write the host's file");
        host_git(&["add", file], &work);
        host_git(&["commit", "--quiet", "-m", file], &work);
        host_git(&["push", "--quiet", "origin", "HEAD:main"], &work);
    }
}

impl Drop for GitServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `git ARGS` on the host in `dir` (made if missing); its trimmed stdout.
fn host_git(args: &[&str], dir: &Path) -> String {
    std::fs::create_dir_all(dir).expect("make the directory");
    let out = Command::new("git")
        .args(["-c", "user.name=Host", "-c", "user.email=host@example.com"])
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("git is installed on the host (scripts/test installs it)");
    assert_success(&format!("host git {args:?}"), &out);
    stdout(&out).trim().to_string()
}

/// Panics unless the answer is `status` with the native error shape and `code`.
fn assert_error(what: &str, (status, body): (u16, Value), want: u16, code: &str) {
    assert_eq!(status, want, "{what}: {body}");
    assert_eq!(body["code"], code, "{what}: {body}");
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{what}: {body}"
    );
}

/// Panics unless the answer is `status`; its body.
fn assert_ok(what: &str, (status, body): (u16, Value), want: u16) -> Value {
    assert_eq!(status, want, "{what}: {body}");
    body
}

/// `cat PATH` in the sandbox.
async fn cat(d: &Daemon, id: &str, path: &str) -> String {
    let out = d.exec(id, &["cat", path]).await;
    assert_eq!(out.exit_code, 0, "cat {path}: {}", out.stderr);
    out.stdout
}

/// `git -C REPO rev-parse HEAD` in the sandbox.
async fn sandbox_head(d: &Daemon, id: &str, repo: &str) -> String {
    let out = d.exec(id, &["git", "-C", repo, "rev-parse", "HEAD"]).await;
    assert_eq!(out.exit_code, 0, "rev-parse in {repo}: {}", out.stderr);
    out.stdout.trim().to_string()
}

/// The statuses of a `GitStatus`'s files by name.
fn files(status: &Value) -> Value {
    let mut by_name = serde_json::Map::new();
    for f in status["fileStatus"].as_array().expect("fileStatus") {
        let name = f["name"].as_str().expect("name").to_string();
        by_name.insert(name, json!([f["staging"], f["worktree"]]));
    }
    Value::Object(by_name)
}

/// An `sbx` command aimed at `d` with the git password in `SBX_GIT_PASSWORD` when given.
fn sbx(d: &Daemon, args: &[&str], password: Option<&str>) -> std::process::Output {
    let mut cmd = d.sbx_command(args);
    cmd.env_remove("SBX_GIT_PASSWORD");
    if let Some(password) = password {
        cmd.env("SBX_GIT_PASSWORD", password);
    }
    cmd.output().expect("run sbx")
}

#[test]
fn git_through_v1_and_sbx_keeps_credentials_off_disk() {
    common::run_serially(
        &mut tokio::runtime::Builder::new_current_thread(),
        Some(Duration::from_secs(300)),
        || async {
            let password = format!("pw-{}-git", std::process::id());
            let server = GitServer::start(&password);
            let d = Daemon::start().await;
            let sandbox = d
                .create(json!({"template": "base", "network": {"allowOut": [server.ip]}}))
                .await;
            let id = id_of(&sandbox);
            through_v1(&d, &id, &server, &password).await;
            through_sbx(&d, &id, &server, &password).await;
            let log = d.log_tail(usize::MAX);
            assert!(
                !log.contains(&password),
                "the daemon logged the git password"
            );
        },
    );
}

async fn through_v1(d: &Daemon, id: &str, server: &GitServer, password: &str) {
    let g = format!("/v1/sandboxes/{id}/git");
    let url = server.url.as_str();
    let repo = format!("{HOME}/repo");

    // Credentials: none, wrong, right; none of them kept.
    let clone_path = format!("{g}/clone");
    let clone = |body: Value| call(d, M::POST, &clone_path, Some(body));
    let none = json!({"url": url, "path": "noauth"});
    assert_error(
        "clone without credentials",
        clone(none).await,
        401,
        "git_auth_failed",
    );
    let wrong = json!({"url": url, "path": "badauth", "username": USER, "password": "wrong"});
    assert_error(
        "clone, wrong password",
        clone(wrong).await,
        401,
        "git_auth_failed",
    );
    let right = json!({"url": url, "path": "repo", "username": USER, "password": password});
    let cloned = assert_ok("clone", clone(right).await, 201);
    assert_eq!(cloned, json!({"path": repo}));
    let config = cat(d, id, &format!("{repo}/.git/config")).await;
    assert!(
        !config.contains(password) && !config.contains(USER),
        "{config}"
    );
    assert!(config.contains(url), "{config}");

    // Status → add → commit → push.
    let status_path = format!("{g}/status?path={repo}");
    let status = assert_ok("status", call(d, M::GET, &status_path, None).await, 200);
    assert_eq!(
        (status["currentBranch"].as_str(), files(&status)),
        (Some("main"), json!({}))
    );
    let edit = format!("echo sandbox > {repo}/sandbox.txt && echo edited > {repo}/README.md");
    d.exec(id, &["sh", "-c", &edit]).await;
    let status = assert_ok("status", call(d, M::GET, &status_path, None).await, 200);
    assert_eq!(
        files(&status),
        json!({"sandbox.txt": ["Untracked", "Untracked"], "README.md": ["Unmodified", "Modified"]})
    );
    let add = json!({"path": repo, "files": ["."]});
    assert_ok(
        "add",
        call(d, M::POST, &format!("{g}/add"), Some(add)).await,
        204,
    );
    let status = assert_ok("status", call(d, M::GET, &status_path, None).await, 200);
    assert_eq!(
        files(&status),
        json!({"sandbox.txt": ["Added", "Unmodified"], "README.md": ["Modified", "Unmodified"]})
    );
    let commit = json!({"path": "repo", "message": "from /v1", "author": "Sandbox User",
        "email": "sbx@example.com"});
    let commit_path = format!("{g}/commit");
    let committed = call(d, M::POST, &commit_path, Some(commit.clone())).await;
    let hash = assert_ok("commit", committed, 201)["hash"]
        .as_str()
        .expect("hash")
        .to_string();
    assert_eq!(hash, sandbox_head(d, id, &repo).await);
    let again = call(d, M::POST, &commit_path, Some(commit)).await;
    assert_error("nothing to commit", again, 409, "git_conflict");
    let push = json!({"path": repo, "username": USER, "password": password});
    assert_ok(
        "push",
        call(d, M::POST, &format!("{g}/push"), Some(push)).await,
        204,
    );
    assert_eq!(server.rev("main"), hash);
    let author = host_git(
        &["log", "-1", "--format=%an <%ae>", "main"],
        &server.root.path().join("repo.git"),
    );
    assert_eq!(author, "Sandbox User <sbx@example.com>");
    let status = assert_ok("status", call(d, M::GET, &status_path, None).await, 200);
    assert_eq!(
        (
            &status["ahead"],
            &status["behind"],
            &status["branchPublished"]
        ),
        (&json!(0), &json!(0), &json!(true)),
        "{status}"
    );

    // Branches.
    let branches_path = format!("{g}/branches?path={repo}");
    let listed = call(d, M::GET, &branches_path, None).await;
    assert_eq!(
        assert_ok("branches", listed, 200),
        json!({"branches": ["main"], "current": "main"})
    );
    let feature = json!({"path": repo, "name": "feature"});
    let create_path = format!("{g}/branches");
    let create = |body: Value| call(d, M::POST, &create_path, Some(body));
    assert_ok("create a branch", create(feature.clone()).await, 201);
    let listed = call(d, M::GET, &branches_path, None).await;
    assert_eq!(
        assert_ok("branches", listed, 200),
        json!({"branches": ["feature", "main"], "current": "feature"})
    );
    assert_error(
        "a branch twice",
        create(feature).await,
        409,
        "git_branch_exists",
    );
    let checkout_path = format!("{g}/checkout");
    let checkout = |branch: &str| {
        let body = json!({"path": repo, "branch": branch});
        call(d, M::POST, &checkout_path, Some(body))
    };
    assert_ok("checkout", checkout("main").await, 204);
    let missing = checkout("no-such-branch").await;
    assert_error("a missing branch", missing, 404, "git_branch_not_found");
    let delete = format!("{g}/branches/feature?path={repo}");
    assert_ok(
        "delete a branch",
        call(d, M::DELETE, &delete, None).await,
        204,
    );
    let listed = call(d, M::GET, &branches_path, None).await;
    assert_eq!(
        assert_ok("branches", listed, 200)["branches"],
        json!(["main"])
    );

    // A commit made on the host comes back with pull.
    server.push_from_host("host.txt");
    let pull = json!({"path": repo, "username": USER, "password": password});
    assert_ok(
        "pull",
        call(d, M::POST, &format!("{g}/pull"), Some(pull)).await,
        204,
    );
    assert_eq!(cat(d, id, &format!("{repo}/host.txt")).await, "host.txt");
    assert_eq!(sandbox_head(d, id, &repo).await, server.rev("main"));

    // The caller's mistakes.
    assert_error(
        "an option as a branch",
        checkout("-D").await,
        400,
        "invalid_request",
    );
    let delete = format!("{g}/branches/-D?path={repo}");
    let refused = call(d, M::DELETE, &delete, None).await;
    assert_error("an option deleted", refused, 400, "invalid_request");
    let unknown = call(
        d,
        M::GET,
        "/v1/sandboxes/nosuchsandbox/git/status?path=repo",
        None,
    );
    assert_error("an unknown sandbox", unknown.await, 404, "not_found");
    let not_a_repo = call(d, M::GET, &format!("{g}/status?path={HOME}"), None).await;
    assert_error("not a repository", not_a_repo, 404, "git_repo_not_found");
}

async fn through_sbx(d: &Daemon, id: &str, server: &GitServer, password: &str) {
    let repo = format!("{HOME}/viasbx");
    let url = server.url.as_str();

    let refused = sbx(d, &["git", id, "clone", url, "viasbx"], None);
    assert_eq!(refused.status.code(), Some(1), "{}", stdout(&refused));
    assert!(
        stderr(&refused).contains("(git_auth_failed)"),
        "{}",
        stderr(&refused)
    );
    let mut child = d
        .sbx_command(&["git", id, "clone", url, "viasbx", "--username", USER])
        .arg("--password-stdin")
        .env_remove("SBX_GIT_PASSWORD")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run sbx");
    let mut stdin = child.stdin.take().expect("sbx's stdin");
    writeln!(stdin, "{password}").expect("write the password");
    drop(stdin);
    let cloned = child.wait_with_output().expect("sbx exits");
    assert_success("sbx git clone", &cloned);
    assert_eq!(stdout(&cloned), format!("{repo}\n"));
    let config = cat(d, id, &format!("{repo}/.git/config")).await;
    assert!(!config.contains(password), "{config}");

    d.exec(id, &["sh", "-c", &format!("echo new > {repo}/new.txt")])
        .await;
    let status = sbx(d, &["git", id, "status", "viasbx", "--json"], None);
    assert_success("sbx git status", &status);
    let status: Value = serde_json::from_slice(&status.stdout).expect("GitStatus JSON");
    assert_eq!(
        files(&status),
        json!({"new.txt": ["Untracked", "Untracked"]})
    );
    let text = sbx(d, &["git", id, "status", "viasbx"], None);
    assert!(stdout(&text).contains("new.txt"), "{}", stdout(&text));
    assert_success(
        "sbx git add",
        &sbx(d, &["git", id, "add", &repo, "new.txt"], None),
    );
    let args = [
        "git", id, "commit", "viasbx", "-m", "from sbx", "--author", "Sbx", "--email", "s@x.io",
    ];
    let committed = sbx(d, &args, None);
    assert_success("sbx git commit", &committed);
    let hash = stdout(&committed).trim().to_string();
    assert_eq!(hash, sandbox_head(d, id, &repo).await);
    let push = ["git", id, "push", "viasbx", "--username", USER];
    assert_success("sbx git push", &sbx(d, &push, Some(password)));
    assert_eq!(server.rev("main"), hash);

    let branch = sbx(d, &["git", id, "branch", "viasbx", "topic"], None);
    assert_success("sbx git branch", &branch);
    let listed = sbx(d, &["git", id, "branches", "viasbx"], None);
    assert_eq!(stdout(&listed), "  main\n* topic\n");
    let checkout = sbx(d, &["git", id, "checkout", "viasbx", "main"], None);
    assert_success("sbx git checkout", &checkout);

    server.push_from_host("again.txt");
    let pull = ["git", id, "pull", "viasbx", "--username", USER];
    assert_success("sbx git pull", &sbx(d, &pull, Some(password)));
    assert_eq!(cat(d, id, &format!("{repo}/again.txt")).await, "again.txt");

    let option = sbx(d, &["git", id, "checkout", "viasbx", "--", "-D"], None);
    assert_eq!(option.status.code(), Some(1));
    assert!(
        stderr(&option).contains("(invalid_request)"),
        "{}",
        stderr(&option)
    );
    let unknown = sbx(d, &["git", "nosuchsandbox", "status", "viasbx"], None);
    assert_eq!(unknown.status.code(), Some(1));
    assert!(
        stderr(&unknown).contains("(not_found)"),
        "{}",
        stderr(&unknown)
    );
}
