#!/usr/bin/env python3
"""Acceptance test: sandboxd's Daytona toolbox file system and git through the real, unmodified
`daytona` Python SDK.

Files: both ways including binary (all 256 byte values) and a 5 MB file, bulk upload and download
(a missing path fails alone), list with depth, info, folder with a mode, move (not over an existing
file), delete (recursive or not), find, search, replace, permissions; missing paths raise the SDK's
not-found errors.

Git: a real git server run by this script (tests/support/git_server.py: `git http-backend` behind
basic auth on the host's own address; the sandbox reaches it because it is created over /v1 with
`network.allowOut` naming that address, then driven through `daytona.get(id)`). Clone without
credentials fails with the SDK's auth error, with them succeeds and leaves no credentials in
`.git/config`; add → commit → push is seen in the server's repository; a commit pushed from the
host is pulled; branches are created, listed, checked out and deleted; a clone at a commit is
detached there.

Environment: DAYTONA_API_URL (the daemon's URL + `/api`), DAYTONA_API_KEY (a daemon token),
SANDBOXD_TEST_GIT_PASSWORD (optional: the git server's password, so the caller can check the daemon
never logged it). Exit status 0 = every check passed. Run by crates/sandboxd/tests/daytona_files.rs.
"""

import os
import shutil
import subprocess
import sys
import tempfile
import uuid

import httpx
import runner
from daytona import (
    CreateSandboxFromSnapshotParams,
    Daytona,
    DaytonaAuthenticationError,
    DaytonaConflictError,
    DaytonaError,
    DaytonaNotFoundError,
    FileDownloadRequest,
    FileUpload,
)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import git_server  # noqa: E402 (tests/support/git_server.py, the tree's one git server)

RUN = uuid.uuid4().hex[:8]
DAYTONA = Daytona()
API = os.environ["DAYTONA_API_URL"].rstrip("/")
TOKEN = os.environ["DAYTONA_API_KEY"]
GIT_USER = "alice"
GIT_PASSWORD = os.environ.get("SANDBOXD_TEST_GIT_PASSWORD") or f"pw-{uuid.uuid4().hex}"
HOME = "/home/user"
SANDBOXES = []
GIT = {}


def files_sandbox():
    if "files" not in GIT:
        sbx = DAYTONA.create(CreateSandboxFromSnapshotParams(snapshot="base", labels={"suite": RUN}))
        SANDBOXES.append(sbx)
        GIT["files"] = sbx
    return GIT["files"]


# --- files ---------------------------------------------------------------------------------------


def test_binary_and_large_files_round_trip():
    fs = files_sandbox().fs
    every_byte = bytes(range(256)) * 16
    fs.upload_file(every_byte, f"{HOME}/bytes.bin")
    assert fs.download_file(f"{HOME}/bytes.bin") == every_byte
    big = os.urandom(5 * 1024 * 1024)
    with tempfile.TemporaryDirectory() as tmp:
        local = os.path.join(tmp, "big.bin")
        with open(local, "wb") as f:
            f.write(big)
        fs.upload_file(local, "nested/dir/big.bin")  # relative: from the home
        back = os.path.join(tmp, "back.bin")
        fs.download_file(f"{HOME}/nested/dir/big.bin", back)
        with open(back, "rb") as f:
            assert f.read() == big
    streamed = b"".join(fs.download_file_stream(f"{HOME}/nested/dir/big.bin"))
    assert streamed == big
    assert fs.get_file_info(f"{HOME}/nested/dir/big.bin").size == len(big)


def test_bulk_transfers_answer_per_file():
    fs = files_sandbox().fs
    fs.upload_files(
        [FileUpload(b"one", f"{HOME}/bulk/1.txt"), FileUpload(b"two\x00\xff", f"{HOME}/bulk/sub/2.bin")]
    )
    got = fs.download_files(
        [
            FileDownloadRequest(source=f"{HOME}/bulk/1.txt"),
            FileDownloadRequest(source=f"{HOME}/bulk/missing.txt"),
            FileDownloadRequest(source=f"{HOME}/bulk/sub/2.bin"),
        ]
    )
    assert [r.result for r in got] == [b"one", None, b"two\x00\xff"], got
    assert got[1].error and got[1].error_details.status_code == 404, got[1]
    try:
        fs.download_file(f"{HOME}/bulk/missing.txt")
        raise AssertionError("a missing file downloaded")
    except DaytonaNotFoundError:
        pass


def test_list_info_folder_move_delete():
    fs = files_sandbox().fs
    fs.create_folder(f"{HOME}/tree/a/b", "750")
    fs.upload_file(b"x", f"{HOME}/tree/top.txt")
    fs.upload_file(b"yy", f"{HOME}/tree/a/b/deep.txt")
    names = sorted(f.name for f in fs.list_files(f"{HOME}/tree"))
    assert names == ["a", "top.txt"], names
    deep = sorted(f.name for f in fs.list_files(f"{HOME}/tree", depth=3))
    assert deep == ["a", "b", "deep.txt", "top.txt"], deep
    info = fs.get_file_info(f"{HOME}/tree/a/b")
    assert info.is_dir and info.permissions == "0750" and info.mode == "drwxr-x---", info
    top = fs.get_file_info(f"{HOME}/tree/top.txt")
    assert not top.is_dir and top.size == 1 and top.owner == "user", top
    fs.move_files(f"{HOME}/tree/top.txt", f"{HOME}/tree/moved.txt")
    assert fs.download_file(f"{HOME}/tree/moved.txt") == b"x"
    try:
        fs.move_files(f"{HOME}/tree/moved.txt", f"{HOME}/tree/a/b/deep.txt")
        raise AssertionError("a move overwrote a file")
    except DaytonaConflictError:
        pass
    try:
        fs.delete_file(f"{HOME}/tree")
        raise AssertionError("a non-empty directory was deleted without recursive")
    except DaytonaError as e:
        assert e.status_code == 400, e
    fs.delete_file(f"{HOME}/tree/moved.txt")
    fs.delete_file(f"{HOME}/tree", recursive=True)
    for call in (
        lambda: fs.get_file_info(f"{HOME}/tree"),
        lambda: fs.list_files(f"{HOME}/tree"),
        lambda: fs.delete_file(f"{HOME}/tree"),
    ):
        try:
            call()
            raise AssertionError("a deleted path is still there")
        except DaytonaNotFoundError:
            pass


def test_find_search_replace():
    fs = files_sandbox().fs
    fs.upload_files(
        [
            FileUpload(b"alpha needle\nbeta\r\nneedle again\n", f"{HOME}/src/a.py"),
            FileUpload(b"no match here\n", f"{HOME}/src/pkg/b.py"),
            FileUpload(b"needle\x00binary", f"{HOME}/src/pkg/c.bin"),
            FileUpload(b"needle in text", f"{HOME}/src/pkg/d.txt"),
        ]
    )
    found = sorted((m.file, m.line, m.content) for m in fs.find_files(f"{HOME}/src", "needle"))
    assert found == [
        (f"{HOME}/src/a.py", 1, "alpha needle"),
        (f"{HOME}/src/a.py", 3, "needle again"),
        (f"{HOME}/src/pkg/d.txt", 1, "needle in text"),
    ], found
    assert sorted(fs.search_files(f"{HOME}/src", "**/*.py").files) == [
        f"{HOME}/src/a.py",
        f"{HOME}/src/pkg/b.py",
    ]
    assert fs.search_files(f"{HOME}/src", "*.py").files == [f"{HOME}/src/a.py"]
    assert fs.search_files(f"{HOME}/src", "**/*.none").files == []
    results = fs.replace_in_files([f"{HOME}/src/a.py", f"{HOME}/src/nope.py"], "needle", "pin")
    assert results[0].success and results[0].file == f"{HOME}/src/a.py", results
    assert results[1].success is False and results[1].error, results
    assert fs.download_file(f"{HOME}/src/a.py") == b"alpha pin\nbeta\r\npin again\n"


def test_permissions():
    sbx = files_sandbox()
    sbx.fs.upload_file(b"#!/bin/sh\necho run\n", f"{HOME}/perm.sh")
    sbx.fs.set_file_permissions(f"{HOME}/perm.sh", mode="755")
    assert sbx.fs.get_file_info(f"{HOME}/perm.sh").permissions == "0755"
    assert sbx.process.exec(f"{HOME}/perm.sh").result.strip() == "run"
    sbx.fs.set_file_permissions(f"{HOME}/perm.sh", owner="root", group="root")
    info = sbx.fs.get_file_info(f"{HOME}/perm.sh")
    assert (info.owner, info.group) == ("root", "root"), info
    try:
        sbx.fs.set_file_permissions(f"{HOME}/perm.sh", mode="9z")
        raise AssertionError("a bad mode was accepted")
    except DaytonaError as e:
        assert e.status_code == 400, e
    try:
        sbx.fs.set_file_permissions(f"{HOME}/absent", mode="600")
        raise AssertionError("a missing path got a mode")
    except DaytonaNotFoundError:
        pass


def test_signed_file_urls_need_no_token_open_only_their_request_and_end_with_a_rotation():
    sbx = files_sandbox()
    sbx.fs.upload_file(b"signed bytes", f"{HOME}/signed.txt")
    url = sbx.download_url(f"{HOME}/signed.txt", ttl_seconds=120)
    got = httpx.get(url)  # no token
    assert got.status_code == 200 and got.content == b"signed bytes", (got.status_code, got.text)
    other = httpx.get(url.replace("signed.txt", "other.txt"))
    assert other.status_code == 401, (other.status_code, other.text)
    assert httpx.delete(url).status_code in (401, 405), "a download URL opens no delete"
    listing = httpx.get(url.replace("/files/download", "/files"))
    assert listing.status_code == 401, "a download URL opens no listing"
    upload = sbx.upload_url(f"{HOME}/uploaded.bin")
    put = httpx.post(upload, files={"file": ("uploaded.bin", b"\x00\x01 up")})
    assert put.status_code == 200, (put.status_code, put.text)
    assert sbx.fs.download_file(f"{HOME}/uploaded.bin") == b"\x00\x01 up"
    sbx.rotate_signing_key()
    assert httpx.get(url).status_code == 401, "a rotated key still opened its old URL"


# --- git -----------------------------------------------------------------------------------------


def host_git(*args, cwd=None):
    cmd = ["git", "-c", "user.name=Host", "-c", "user.email=host@example.com", *args]
    return subprocess.run(cmd, cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def git_setup():
    if "sbx" in GIT:
        return GIT
    tmp = tempfile.mkdtemp(prefix="dtgit-")
    host_git("init", "--quiet", "--bare", "--initial-branch=main", f"{tmp}/repo.git")
    work = f"{tmp}/work"
    host_git("clone", "--quiet", f"{tmp}/repo.git", work)
    with open(f"{work}/README.md", "w") as f:
        f.write("hello\n")
    host_git("add", "README.md", cwd=work)
    host_git("commit", "--quiet", "-m", "first", cwd=work)
    host_git("push", "--quiet", "origin", "HEAD:main", cwd=work)
    ip = git_server.host_address()
    server = git_server.serve(tmp, GIT_USER, GIT_PASSWORD, ip)
    # The Daytona create cannot name a destination to allow; /v1's can.
    base = API[: -len("/api")] if API.endswith("/api") else API
    resp = httpx.post(
        f"{base}/v1/sandboxes",
        headers={"Authorization": f"Bearer {TOKEN}"},
        json={"template": "base", "metadata": {"suite": RUN}, "network": {"allowOut": [ip]}},
        timeout=120,
    )
    assert resp.status_code in (200, 201), resp.text
    sbx = DAYTONA.get(resp.json()["id"])
    SANDBOXES.append(sbx)
    GIT.update(
        sbx=sbx,
        tmp=tmp,
        work=work,
        first=host_git("rev-parse", "HEAD", cwd=work),
        url=f"http://{ip}:{server.server_address[1]}/repo.git",
        server=server,
    )
    return GIT


def test_clone_needs_credentials_and_keeps_none():
    g = git_setup()
    git = g["sbx"].git
    try:
        git.clone(g["url"], f"{HOME}/noauth")
        raise AssertionError("a clone without credentials succeeded")
    except DaytonaAuthenticationError:
        pass
    try:
        git.clone(g["url"], f"{HOME}/badauth", username=GIT_USER, password="wrong")
        raise AssertionError("a clone with a wrong password succeeded")
    except DaytonaAuthenticationError:
        pass
    git.clone(g["url"], "repo", username=GIT_USER, password=GIT_PASSWORD)  # relative: the home
    config = g["sbx"].fs.download_file(f"{HOME}/repo/.git/config").decode()
    assert GIT_PASSWORD not in config and GIT_USER not in config, config
    assert g["url"] in config, config
    status = git.status(f"{HOME}/repo")
    assert status.current_branch == "main" and status.file_status == [], status
    assert g["sbx"].fs.download_file(f"{HOME}/repo/README.md") == b"hello\n"


def test_add_commit_push_pull_round_trip():
    g = git_setup()
    sbx, git, repo = g["sbx"], g["sbx"].git, f"{HOME}/repo"
    sbx.fs.upload_file(b"from the sandbox\n", f"{repo}/sandbox.txt")
    sbx.fs.upload_file(b"hello, edited\n", f"{repo}/README.md")
    status = {f.name: (f.staging, f.worktree) for f in git.status(repo).file_status}
    assert status == {"sandbox.txt": ("Untracked", "Untracked"), "README.md": ("Unmodified", "Modified")}, status
    git.add(repo, ["."])
    status = {f.name: f.staging for f in git.status(repo).file_status}
    assert status == {"sandbox.txt": "Added", "README.md": "Modified"}, status
    sha = git.commit(repo, "from the sandbox", "Sandbox User", "sbx@example.com").sha
    assert len(sha) == 40, sha
    assert git.status(repo).ahead == 1
    try:
        git.commit(repo, "nothing", "Sandbox User", "sbx@example.com")
        raise AssertionError("an empty commit was made")
    except DaytonaConflictError:
        pass
    git.push(repo, username=GIT_USER, password=GIT_PASSWORD)
    assert host_git("--git-dir", f"{g['tmp']}/repo.git", "rev-parse", "main") == sha
    assert host_git("--git-dir", f"{g['tmp']}/repo.git", "log", "-1", "--format=%an <%ae>", "main") == (
        "Sandbox User <sbx@example.com>"
    )
    status = git.status(repo)
    assert (status.ahead, status.behind, status.branch_published) == (0, 0, True), status
    # A commit made elsewhere comes back with pull.
    work = g["work"]
    host_git("pull", "--quiet", "--ff-only", cwd=work)
    with open(f"{work}/host.txt", "w") as f:
        f.write("from the host\n")
    host_git("add", "host.txt", cwd=work)
    host_git("commit", "--quiet", "-m", "from the host", cwd=work)
    host_git("push", "--quiet", "origin", "HEAD:main", cwd=work)
    git.pull(repo, username=GIT_USER, password=GIT_PASSWORD)
    assert sbx.fs.download_file(f"{repo}/host.txt") == b"from the host\n"
    config = sbx.fs.download_file(f"{repo}/.git/config").decode()
    assert GIT_PASSWORD not in config, config


def test_branches_and_checkout():
    g = git_setup()
    git, repo = g["sbx"].git, f"{HOME}/repo"
    git.create_branch(repo, "feature")
    listed = git.branches(repo)
    assert sorted(listed.branches) == ["feature", "main"] and listed.current == "feature", listed
    assert git.status(repo).current_branch == "feature"
    try:
        git.create_branch(repo, "feature")
        raise AssertionError("a branch was created twice")
    except DaytonaConflictError:
        pass
    git.checkout_branch(repo, "main")
    assert git.status(repo).current_branch == "main"
    try:
        git.checkout_branch(repo, "no-such-branch")
        raise AssertionError("a missing branch was checked out")
    except DaytonaNotFoundError:
        pass
    git.delete_branch(repo, "feature")
    assert git.branches(repo).branches == ["main"]


def test_clone_at_a_branch_and_commit():
    g = git_setup()
    sbx, git = g["sbx"], g["sbx"].git
    git.clone(g["url"], f"{HOME}/at-commit", commit_id=g["first"], username=GIT_USER, password=GIT_PASSWORD)
    head = sbx.process.exec(f"git -C {HOME}/at-commit rev-parse HEAD").result.strip()
    assert head == g["first"], head
    assert git.status(f"{HOME}/at-commit").current_branch == "HEAD"
    git.clone(g["url"], f"{HOME}/at-branch", branch="main", username=GIT_USER, password=GIT_PASSWORD)
    assert git.status(f"{HOME}/at-branch").current_branch == "main"
    try:
        git.clone(g["url"], f"{HOME}/no-branch", branch="nope", username=GIT_USER, password=GIT_PASSWORD)
        raise AssertionError("a missing branch was cloned")
    except DaytonaNotFoundError:
        pass
    try:
        git.status(f"{HOME}/not-a-repo")
        raise AssertionError("a missing repository had a status")
    except DaytonaNotFoundError:
        pass


def test_stored_credentials_serve_later_commands():
    """Last of the git tests: the stored credentials serve every later command of the sandbox."""
    g = git_setup()
    git = g["sbx"].git
    host = g["url"].split("/")[2]
    git.dangerously_authenticate(GIT_USER, GIT_PASSWORD, host=host, protocol="http")
    git.clone(g["url"], f"{HOME}/stored")  # no credentials with the call
    assert git.status(f"{HOME}/stored").current_branch == "main"
    stored = g["sbx"].fs.download_file(f"{HOME}/.git-credentials").decode()
    ip = host.split(":")[0]  # the store writes the port percent-encoded
    assert f"http://{GIT_USER}:" in stored and ip in stored, "not in the user's store"
    config = g["sbx"].fs.download_file(f"{HOME}/stored/.git/config").decode()
    assert GIT_PASSWORD not in config
    try:
        git.dangerously_authenticate(GIT_USER, "pw", host=host, protocol="ftp")
        raise AssertionError("an ftp credential was stored")
    except DaytonaError:
        pass


def cleanup():
    for sbx in SANDBOXES:
        try:
            DAYTONA.delete(sbx)
        except DaytonaError:
            pass
    if "server" in GIT:
        GIT["server"].shutdown()
        shutil.rmtree(GIT["tmp"], ignore_errors=True)


if __name__ == "__main__":
    runner.run(globals(), cleanup)
