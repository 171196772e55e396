#!/usr/bin/env python3
"""Surface test: every public method of the real, unmodified E2B Python SDK, called against a
sandboxd daemon, is either shown to work (its result asserted) or refused at once with a typed
error of the SDK's own naming what is not supported and what to use instead.

  python test_surface.py                    the `e2b` SDK           -> tests/e2b/surface/python.md
  python test_surface.py code-interpreter   `e2b-code-interpreter`  -> tests/e2b/surface/code-interpreter-python.md
  python test_surface.py async              `e2b`'s async classes   -> tests/e2b/surface/python-async.md
  python test_surface.py code-interpreter-async   its AsyncSandbox  -> tests/e2b/surface/code-interpreter-python-async.md

The async classes (`AsyncSandbox`, …) run the sync entries through an adapter that awaits each call
on an event loop of its own, with their own entries where the async API differs (callbacks instead of
polling, an input handle instead of an iterator).

Environment as for test_sdk.py (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY, E2B_VOLUME_API_URL).

The classes are enumerated by introspection (public = no leading underscore; methods and
properties). Each name found must have an entry below saying how it is called and what is asserted,
or that it is refused and with which exception and message: a name without an entry (a new SDK
version's method) fails the run, and so does an entry whose name the SDK no longer has. Every call
runs under a deadline; a call that overruns it fails. The table of results is regenerated and
compared with the checked-in one: on a difference the run fails and writes `<table>.new` beside it
(`SURFACE_UPDATE=1` rewrites the table instead).
"""

import concurrent.futures
import datetime
import inspect
import os
import re
import sys
import tempfile
import time
import traceback
import uuid
from importlib.metadata import version

import requests

import e2b
from e2b import Sandbox

MODE = sys.argv[1] if len(sys.argv) > 1 else "e2b"
RUN = uuid.uuid4().hex[:10]
DEADLINE = 30.0
HERE = os.path.dirname(os.path.abspath(__file__))
TABLES = {
    "e2b": os.path.join(HERE, "surface", "python.md"),
    "code-interpreter": os.path.join(HERE, "surface", "code-interpreter-python.md"),
    "async": os.path.join(HERE, "surface", "python-async.md"),
    "code-interpreter-async": os.path.join(HERE, "surface", "code-interpreter-python-async.md"),
}


class Entry:
    def __init__(self, name, kind, note, fn, exc=None, text=None, deadline=DEADLINE):
        self.name, self.kind, self.note, self.fn = name, kind, note, fn
        self.exc, self.text, self.deadline = exc, text, deadline


# The entries of each SDK, in the order they run; `works` and `refused` add to SECTION's.
ENTRIES = {"e2b": {}, "code-interpreter": {}, "async": {}}
SECTION = "e2b"


def works(name, note, deadline=DEADLINE):
    """`fn(ctx)` calls `name` and asserts its result; `note` says what is asserted."""

    def register(fn):
        assert name not in ENTRIES[SECTION], name
        ENTRIES[SECTION][name] = Entry(name, "works", note, fn, deadline=deadline)
        return fn

    return register


def refused(name, exc, text, note=""):
    """`fn(ctx)` calls `name`; it must raise `exc` (the SDK's own class) at once, its message
    containing `text`."""

    def register(fn):
        assert name not in ENTRIES[SECTION], name
        ENTRIES[SECTION][name] = Entry(name, "refused", note, fn, exc=exc, text=text)
        return fn

    return register


class Ctx:
    """What the calls share: one sandbox for most of them, and what earlier calls made."""

    def __init__(self):
        self.created = []
        self.cleanups = []

    def new_sandbox(self, cls=None, purpose="surface", **kwargs):
        metadata = {"suite": f"surface-{MODE}", "run": RUN, "purpose": purpose, "n": uuid.uuid4().hex}
        sbx = (cls or Sandbox).create(metadata=metadata, **kwargs)
        self.created.append(sbx.sandbox_id)
        return sbx


def raises(exc, text, call):
    """Asserts that `call()` raises `exc` with `text` in its message."""
    try:
        call()
    except exc as e:
        assert text in str(e), e
        return
    raise AssertionError(f"no {exc.__name__}")


UNKNOWN = "nosuchsandbox0000000"


def public_names(cls):
    """Public methods and properties of `cls` (those it inherits too)."""
    names = []
    for name in dir(cls):
        if name.startswith("_"):
            continue
        attr = inspect.getattr_static(cls, name)
        if callable(getattr(cls, name, None)) or isinstance(attr, property):
            names.append(name)
    return names


def unwrap(obj):
    """The SDK's object behind the async adapter's proxy (the object itself otherwise)."""
    return getattr(obj, "_target", obj)


def own_names(cls, base):
    """Public names `cls` defines or overrides beyond `base`."""
    names = []
    for klass in cls.__mro__:
        if klass is base or issubclass(base, klass):
            break
        names += [n for n in vars(klass) if not n.startswith("_")]
    return sorted(set(names))


# ---------------------------------------------------------------------------------------------
# The `e2b` SDK
# ---------------------------------------------------------------------------------------------


def e2b_classes():
    from e2b.sandbox_sync.commands.command import Commands
    from e2b.sandbox_sync.commands.pty import Pty
    from e2b.sandbox_sync.filesystem.filesystem import Filesystem
    from e2b.template.main import TemplateBuilder

    return {
        "Sandbox": Sandbox,
        "Filesystem": Filesystem,
        "Commands": Commands,
        "CommandHandle": e2b.CommandHandle,
        "Pty": Pty,
        "WatchHandle": e2b.WatchHandle,
        "Git": e2b.Git,
        "Template": e2b.Template,
        "TemplateBuilder": TemplateBuilder,
        "Volume": e2b.Volume,
        "Secret": e2b.Secret,
        "SandboxPaginator": e2b.SandboxPaginator,
        "SnapshotPaginator": e2b.SnapshotPaginator,
        "SecretPaginator": e2b.SecretPaginator,
    }


# --- Sandbox: create and the read-only face ----------------------------------------------------


@works("Sandbox.create", "a sandbox of the default template, running, with its metadata; a timeout of the "
       "wrong type is SandboxException 400, an unknown template SandboxException \"not found\"")
def _(c):
    c.sbx = c.new_sandbox(timeout=300)
    info = c.sbx.get_info()
    assert info.metadata["run"] == RUN and info.template_id == "base", info
    raises(e2b.SandboxException, "400", lambda: c.new_sandbox(timeout="abc"))
    raises(e2b.SandboxException, "not found", lambda: c.new_sandbox(template=f"none-{RUN}"))


@works("Sandbox.sandbox_id", "a non-empty id, the one get_info names")
def _(c):
    assert c.sbx.sandbox_id and c.sbx.get_info().sandbox_id == c.sbx.sandbox_id


@works("Sandbox.connection_config", "carries the API URL and key it was given")
def _(c):
    cfg = c.sbx.connection_config
    assert cfg.api_url.rstrip("/") == os.environ["E2B_API_URL"].rstrip("/"), cfg.api_url
    assert cfg.api_key == os.environ["E2B_API_KEY"]


@works("Sandbox.sandbox_domain", "the daemon's domain (a string)")
def _(c):
    assert isinstance(c.sbx.sandbox_domain, str) and c.sbx.sandbox_domain, c.sbx.sandbox_domain


@works("Sandbox.envd_api_url", "E2B_SANDBOX_URL, where envd calls go")
def _(c):
    assert c.sbx.envd_api_url.rstrip("/") == os.environ["E2B_SANDBOX_URL"].rstrip("/"), c.sbx.envd_api_url


@works("Sandbox.envd_direct_url", "E2B_SANDBOX_URL too (it is used verbatim for envd)")
def _(c):
    assert c.sbx.envd_direct_url.rstrip("/") == os.environ["E2B_SANDBOX_URL"].rstrip("/"), c.sbx.envd_direct_url


@works("Sandbox.traffic_access_token", "None: port traffic is not restricted by default")
def _(c):
    assert c.sbx.traffic_access_token is None, c.sbx.traffic_access_token


@works("Sandbox.commands", "the sandbox's Commands")
def _(c):
    assert type(unwrap(c.sbx.commands)).__name__ == "Commands"


@works("Sandbox.files", "the sandbox's Filesystem")
def _(c):
    assert type(unwrap(c.sbx.files)).__name__ == "Filesystem"


@works("Sandbox.pty", "the sandbox's Pty")
def _(c):
    assert type(unwrap(c.sbx.pty)).__name__ == "Pty"


@works("Sandbox.git", "the sandbox's Git")
def _(c):
    assert isinstance(unwrap(c.sbx.git), e2b.Git)


@works("Sandbox.is_running", "True for the running sandbox")
def _(c):
    assert c.sbx.is_running() is True


@works("Sandbox.get_info", "state running, metadata, start before end (instance and class forms)")
def _(c):
    info = Sandbox.get_info(c.sbx.sandbox_id)
    assert info.state.value == "running" and info.metadata["run"] == RUN, info
    assert info.started_at < info.end_at, info


@works("Sandbox.get_metrics", "its history: a sample with cpu_count >= 1 and memory used and total, kept, "
       "so the next call has it and one newer; a range that ended an hour ago is empty; an unknown id is "
       "SandboxNotFoundException")
def _(c):
    raises(e2b.SandboxNotFoundException, UNKNOWN, lambda: Sandbox.get_metrics(UNKNOWN))
    m = c.sbx.get_metrics()
    assert len(m) >= 1 and m[-1].cpu_count >= 1 and m[-1].mem_total > 0 and m[-1].mem_used > 0, m
    later = c.sbx.get_metrics()
    assert len(later) >= 2 and later[-2].timestamp == m[-1].timestamp, (m, later)
    assert later[-1].timestamp >= later[-2].timestamp, later
    hour_ago = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
    assert c.sbx.get_metrics(end=hour_ago) == [], "a range in the past"


@works("Sandbox.set_timeout", "end_at moves out, then back in; an unknown id is SandboxNotFoundException")
def _(c):
    raises(e2b.SandboxNotFoundException, UNKNOWN, lambda: Sandbox.set_timeout(UNKNOWN, 60))
    before = c.sbx.get_info().end_at
    c.sbx.set_timeout(1200)
    after = c.sbx.get_info().end_at
    assert (after - before).total_seconds() > 600, (before, after)
    c.sbx.set_timeout(300)
    assert c.sbx.get_info().end_at < after


@works("Sandbox.list", "a paginator; the metadata filter finds the sandbox")
def _(c):
    pager = Sandbox.list(query=e2b.SandboxQuery(metadata={"run": RUN}), limit=1)
    c.sandbox_pager = pager
    items = pager.next_items()
    assert [s.sandbox_id for s in items] == [c.sbx.sandbox_id], items


@works("SandboxPaginator.has_next", "False after the only page")
def _(c):
    assert c.sandbox_pager.has_next is False


@works("SandboxPaginator.next_token", "None after the only page")
def _(c):
    assert c.sandbox_pager.next_token is None


@works("SandboxPaginator.next_items", "pages of `limit`, 2 then 1, over three sandboxes")
def _(c):
    tag = f"page-{RUN}"
    made = [c.new_sandbox(purpose=tag, timeout=60) for _ in range(3)]
    try:
        pager = Sandbox.list(query=e2b.SandboxQuery(metadata={"purpose": tag}), limit=2)
        pages = []
        while pager.has_next:
            pages.append(pager.next_items())
        assert [len(p) for p in pages] == [2, 1], pages
        assert {s.sandbox_id for p in pages for s in p} == {s.sandbox_id for s in made}
    finally:
        for s in made:
            s.kill()


@works("Sandbox.get_host", "`{port}-{id}.{domain}`")
def _(c):
    host = c.sbx.get_host(8000)
    assert host.startswith(f"8000-{c.sbx.sandbox_id}."), host


@works("Sandbox.download_url", "a URL that serves the file's bytes")
def _(c):
    c.sbx.files.write("/home/user/dl.txt", "download me")
    url = c.sbx.download_url("/home/user/dl.txt")
    r = requests.get(url, headers=sandbox_headers(c.sbx), timeout=10)
    assert r.status_code == 200 and r.text == "download me", (r.status_code, r.text)


@works("Sandbox.upload_url", "a URL that takes a multipart upload; the file is then read back")
def _(c):
    url = c.sbx.upload_url("/home/user/ul.txt")
    r = requests.post(url, files={"file": ("ul.txt", b"uploaded")}, headers=sandbox_headers(c.sbx), timeout=10)
    assert r.status_code == 200, (r.status_code, r.text)
    assert c.sbx.files.read("/home/user/ul.txt") == "uploaded"


def sandbox_headers(sbx):
    """The headers an envd URL needs when E2B_SANDBOX_URL routes by header."""
    return {"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "49983"}


@works("Sandbox.get_mcp_url", "`https://{host of port 50005}/mcp`")
def _(c):
    url = c.sbx.get_mcp_url()
    assert url.endswith("/mcp") and c.sbx.sandbox_id in url, url


@refused("Sandbox.get_mcp_token", e2b.FileNotFoundException, "/etc/mcp-gateway/.token",
         "the SDK reads the gateway's token file, and no MCP gateway runs here: `create(mcp=...)` is "
         "refused with SandboxException \"mcp servers are not supported\"")
def _(c):
    try:
        c.new_sandbox(mcp={"exa": {"apiKey": "x"}})
        raise AssertionError("a create with mcp servers was accepted")
    except e2b.SandboxException as e:
        assert "mcp servers are not supported" in str(e), e
    c.sbx.get_mcp_token()


@works("Sandbox.update_network", "a name in `allow_out` makes the sandbox's own forwarder its resolver at "
       "once, an empty update gives it the host's back; `rules` are not added to a sandbox created without "
       "secrets or rules (SandboxException; one created with them changes them: test_secrets.py)")
def _(c):
    before = c.sbx.files.read("/etc/resolv.conf")
    c.sbx.update_network({"allow_out": ["example.com"]})
    during = c.sbx.files.read("/etc/resolv.conf")
    assert during != before and during.startswith("nameserver "), during
    try:
        c.sbx.update_network({"rules": {"example.com": [{"transform": {"headers": {"X": "y"}}}]}})
        raise AssertionError("new rules were taken")
    except e2b.SandboxException as e:
        assert "do not pass the egress gateway" in str(e), e
    assert c.sbx.files.read("/etc/resolv.conf") == during, "a refused update changed the sandbox"
    c.sbx.update_network({})
    assert c.sbx.files.read("/etc/resolv.conf") == before


@refused("Sandbox.fork", e2b.SandboxException, "forks need the gvisor tier",
         "on the namespace tier; a sandbox created with isolation gvisor forks")
def _(c):
    c.sbx.fork(count=1)


# --- Filesystem --------------------------------------------------------------------------------


@works("Filesystem.write", "an EntryInfo naming the path; read back equal")
def _(c):
    info = c.sbx.files.write("/home/user/s/a.txt", "alpha")
    assert info.path == "/home/user/s/a.txt", info


@works("Filesystem.read", "text, bytes and a relative path (home)")
def _(c):
    assert c.sbx.files.read("/home/user/s/a.txt") == "alpha"
    assert bytes(c.sbx.files.read("/home/user/s/a.txt", format="bytes")) == b"alpha"
    assert c.sbx.files.read("s/a.txt") == "alpha"


@works("Filesystem.write_files", "two files in one call, both read back")
def _(c):
    from e2b.sandbox.filesystem.filesystem import WriteEntry

    out = c.sbx.files.write_files([WriteEntry(path="/home/user/s/b.txt", data="beta"),
                                   WriteEntry(path="/home/user/s/c.txt", data=b"gamma")])
    assert sorted(e.path for e in out) == ["/home/user/s/b.txt", "/home/user/s/c.txt"], out
    assert c.sbx.files.read("/home/user/s/c.txt") == "gamma"


@works("Filesystem.list", "names and types of a directory's entries")
def _(c):
    kinds = {e.name: e.type.value for e in c.sbx.files.list("/home/user/s")}
    assert kinds == {"a.txt": "file", "b.txt": "file", "c.txt": "file"}, kinds


@works("Filesystem.exists", "True for a file, False for a missing one")
def _(c):
    assert c.sbx.files.exists("/home/user/s/a.txt") and not c.sbx.files.exists("/home/user/s/zz")


@works("Filesystem.get_info", "name, type, size of a file; missing path is FileNotFoundException")
def _(c):
    info = c.sbx.files.get_info("/home/user/s/a.txt")
    assert (info.name, info.type.value, info.size) == ("a.txt", "file", 5), info
    try:
        c.sbx.files.get_info("/home/user/s/zz")
        raise AssertionError("a missing path has info")
    except e2b.FileNotFoundException:
        pass


@works("Filesystem.make_dir", "True when made, False when there")
def _(c):
    assert c.sbx.files.make_dir("/home/user/s/d") is True
    assert c.sbx.files.make_dir("/home/user/s/d") is False


@works("Filesystem.rename", "the new path; the old one is gone")
def _(c):
    moved = c.sbx.files.rename("/home/user/s/b.txt", "/home/user/s/d/b.txt")
    assert moved.path == "/home/user/s/d/b.txt" and not c.sbx.files.exists("/home/user/s/b.txt")


@works("Filesystem.remove", "the file is gone")
def _(c):
    c.sbx.files.remove("/home/user/s/d/b.txt")
    assert not c.sbx.files.exists("/home/user/s/d/b.txt")


@works("Filesystem.watch_dir", "a WatchHandle (its events under WatchHandle.get_new_events)")
def _(c):
    c.watch = c.sbx.files.watch_dir("/home/user/s/d")
    assert isinstance(c.watch, e2b.WatchHandle)


@works("WatchHandle.get_new_events", "the write of a new file shows up")
def _(c):
    c.sbx.files.write("/home/user/s/d/new.txt", "x")
    events, deadline = [], time.time() + 10
    while time.time() < deadline and not any(e.name == "new.txt" for e in events):
        events += c.watch.get_new_events()
        time.sleep(0.2)
    assert any(e.name == "new.txt" for e in events), events


@works("WatchHandle.stop", "returns")
def _(c):
    c.watch.stop()


# --- Commands and their handles ----------------------------------------------------------------


@works("Commands.run", "stdout, stderr, exit code, envs, cwd, user; non-zero exit raises CommandExitException")
def _(c):
    r = c.sbx.commands.run("echo out; echo err >&2; echo $X; pwd", envs={"X": "x"}, cwd="/tmp")
    assert (r.exit_code, r.stdout, r.stderr) == (0, "out\nx\n/tmp\n", "err\n"), r
    assert c.sbx.commands.run("whoami", user="root").stdout == "root\n"
    try:
        c.sbx.commands.run("exit 3")
        raise AssertionError("exit 3 did not raise")
    except e2b.CommandExitException as e:
        assert e.exit_code == 3


@works("Commands.list", "a background command's pid is listed")
def _(c):
    c.bg = c.sbx.commands.run("sleep 3; echo done-later", background=True)
    assert c.bg.pid in [p.pid for p in c.sbx.commands.list()]


@works("CommandHandle.pid", "a positive int")
def _(c):
    assert isinstance(c.bg.pid, int) and c.bg.pid > 0


@works("CommandHandle.disconnect", "returns; the command runs on (Commands.connect then waits for it)")
def _(c):
    c.bg.disconnect()


@works("Commands.connect", "a handle on the running command; wait() gets its output")
def _(c):
    again = c.sbx.commands.connect(c.bg.pid)
    assert "done-later" in again.wait().stdout


@works("CommandHandle.wait", "the CommandResult (exit code and output)")
def _(c):
    r = c.sbx.commands.run("echo waited", background=True).wait()
    assert (r.exit_code, r.stdout) == (0, "waited\n"), r


@works("Commands.send_stdin", "a line reaches `head -n 1`")
def _(c):
    h = c.sbx.commands.run("head -n 1", background=True, stdin=True)
    c.sbx.commands.send_stdin(h.pid, "typed\n")
    assert h.wait().stdout == "typed\n"


@works("Commands.close_stdin", "`cat` sees EOF and exits 0")
def _(c):
    h = c.sbx.commands.run("cat", background=True, stdin=True)
    c.sbx.commands.send_stdin(h.pid, "x\n")
    c.sbx.commands.close_stdin(h.pid)
    assert h.wait().stdout == "x\n"


@works("Commands.stream_input", "chunks from an iterator reach the process")
def _(c):
    h = c.sbx.commands.run("cat", background=True, stdin=True)
    c.sbx.commands.stream_input(h.pid, iter(["a", "b\n"]))
    c.sbx.commands.close_stdin(h.pid)
    assert h.wait().stdout == "ab\n"


@works("CommandHandle.send_stdin", "a line reaches the process")
def _(c):
    h = c.sbx.commands.run("head -n 1", background=True, stdin=True)
    h.send_stdin("via-handle\n")
    assert h.wait().stdout == "via-handle\n"


@works("CommandHandle.close_stdin", "`cat` sees EOF and exits")
def _(c):
    h = c.sbx.commands.run("cat", background=True, stdin=True)
    h.close_stdin()
    assert h.wait().exit_code == 0


@works("Commands.kill", "True for a running command, which ends; False for an unknown pid")
def _(c):
    h = c.sbx.commands.run("sleep 100", background=True)
    assert c.sbx.commands.kill(h.pid) is True
    try:
        h.wait()
    except e2b.CommandExitException:
        pass
    assert c.sbx.commands.kill(999999) is False


def gone(sbx, pid):
    """Whether `pid` leaves the sandbox's process list within 5 s (a killed process is listed
    until it has been reaped)."""
    deadline = time.time() + 5
    while pid in [p.pid for p in sbx.commands.list()]:
        if time.time() > deadline:
            return False
        time.sleep(0.1)
    return True


@works("CommandHandle.kill", "True; the command ends")
def _(c):
    h = c.sbx.commands.run("sleep 100", background=True)
    assert h.kill() is True
    assert gone(c.sbx, h.pid), "still listed 5 s after kill"


# --- Pty ---------------------------------------------------------------------------------------


@works("Pty.create", "a handle with a pid (its shell's output is read under Pty.stream_input)")
def _(c):
    c.pty = c.sbx.pty.create(e2b.PtySize(rows=24, cols=80))
    assert c.pty.pid > 0


@works("Pty.resize", "`stty size` in the pty then reports the new size (read under Pty.stream_input)")
def _(c):
    c.sbx.pty.resize(c.pty.pid, e2b.PtySize(rows=30, cols=100))


@works("Pty.send_stdin", "the shell runs what is typed (read under Pty.stream_input)")
def _(c):
    c.sbx.pty.send_stdin(c.pty.pid, b"stty size; echo pty-$((40+2))\n")


@works("Pty.stream_input", "chunks from an iterator are typed into the shell; its output holds what "
       "send_stdin typed, the resized size and the streamed command's output")
def _(c):
    c.sbx.pty.stream_input(c.pty.pid, iter([b"echo str", b"eamed; exit\n"]))
    out = []
    c.pty.wait(on_pty=lambda d: out.append(bytes(d)))
    text = b"".join(out).decode(errors="replace")
    assert "pty-42" in text and "30 100" in text and "streamed" in text, text


@works("Pty.connect", "a handle on a running pty; kill ends it")
def _(c):
    h = c.sbx.pty.create(e2b.PtySize(rows=24, cols=80))
    h.disconnect()
    again = c.sbx.pty.connect(h.pid)
    assert again.pid == h.pid
    c.pty2 = h


@works("Pty.kill", "True for a running pty; it is no longer listed")
def _(c):
    assert c.sbx.pty.kill(c.pty2.pid) is True
    assert gone(c.sbx, c.pty2.pid), "still listed 5 s after kill"


# --- Git (runs git in the sandbox) -------------------------------------------------------------


REPO = "/home/user/repo"


@works("Git.init", "a repository on branch main")
def _(c):
    c.sbx.git.init(REPO, initial_branch="main")
    assert c.sbx.files.exists(f"{REPO}/.git")


@works("Git.configure_user", "user.name and user.email set (global)")
def _(c):
    c.sbx.git.configure_user("Surface", "surface@example.com")
    assert c.sbx.git.get_config("user.name") == "Surface"


@works("Git.set_config", "a repository-scoped value (read back under Git.get_config)")
def _(c):
    c.sbx.git.set_config("core.surface", "yes", scope="local", path=REPO)


@works("Git.get_config", "the value set_config wrote; None for an unset key")
def _(c):
    assert c.sbx.git.get_config("core.surface", scope="local", path=REPO) == "yes"
    assert c.sbx.git.get_config("core.nosuchkey", scope="local", path=REPO) is None


@works("Git.status", "an untracked file is reported")
def _(c):
    c.sbx.files.write(f"{REPO}/one.txt", "1\n")
    st = c.sbx.git.status(REPO)
    assert any(f.name == "one.txt" for f in st.file_status), st


@works("Git.add", "the file is staged")
def _(c):
    c.sbx.git.add(REPO)
    st = c.sbx.git.status(REPO)
    assert any(f.staged for f in st.file_status), st


@works("Git.commit", "a commit; the tree is clean after")
def _(c):
    c.sbx.git.commit(REPO, "first")
    assert c.sbx.git.status(REPO).is_clean


@works("Git.create_branch", "a new branch, checked out")
def _(c):
    c.sbx.git.create_branch(REPO, "feature")
    assert c.sbx.git.branches(REPO).current_branch == "feature"


@works("Git.checkout_branch", "back on main")
def _(c):
    c.sbx.git.checkout_branch(REPO, "main")
    assert c.sbx.git.branches(REPO).current_branch == "main"


@works("Git.branches", "the local branches and the current one")
def _(c):
    b = c.sbx.git.branches(REPO)
    assert set(b.branches) >= {"main", "feature"} and b.current_branch == "main", b


@works("Git.delete_branch", "the branch is gone")
def _(c):
    c.sbx.git.delete_branch(REPO, "feature")
    assert "feature" not in c.sbx.git.branches(REPO).branches


@works("Git.remote_add", "a remote (a bare repository in the sandbox; read back under Git.remote_get)")
def _(c):
    c.sbx.commands.run("git init -q --bare /home/user/remote.git")
    c.sbx.git.remote_add(REPO, "origin", "/home/user/remote.git")


@works("Git.remote_get", "the remote's URL; None for an unknown remote")
def _(c):
    assert c.sbx.git.remote_get(REPO, "origin") == "/home/user/remote.git"
    assert c.sbx.git.remote_get(REPO, "nope") is None


@works("Git.push", "main reaches the remote")
def _(c):
    c.sbx.git.push(REPO, remote="origin", branch="main")
    r = c.sbx.commands.run("git --git-dir=/home/user/remote.git log --oneline main")
    assert "first" in r.stdout, r.stdout


@works("Git.clone", "a clone of the remote holds the committed file")
def _(c):
    c.sbx.git.clone("/home/user/remote.git", "/home/user/clone", branch="main")
    assert c.sbx.files.read("/home/user/clone/one.txt") == "1\n"


@works("Git.pull", "a commit pushed from the clone arrives")
def _(c):
    c.sbx.files.write("/home/user/clone/two.txt", "2\n")
    c.sbx.git.add("/home/user/clone")
    c.sbx.git.commit("/home/user/clone", "second")
    c.sbx.git.push("/home/user/clone")
    c.sbx.git.pull(REPO, remote="origin", branch="main")
    assert c.sbx.files.read(f"{REPO}/two.txt") == "2\n"


@works("Git.restore", "a modified file is restored")
def _(c):
    c.sbx.files.write(f"{REPO}/one.txt", "changed\n")
    c.sbx.git.restore(REPO, ["one.txt"])
    assert c.sbx.files.read(f"{REPO}/one.txt") == "1\n"


@works("Git.reset", "a hard reset to HEAD~1 drops the last commit's file")
def _(c):
    c.sbx.git.reset(REPO, mode="hard", target="HEAD~1")
    assert not c.sbx.files.exists(f"{REPO}/two.txt")


@works("Git.dangerously_authenticate", "a credential helper is stored in the global config")
def _(c):
    c.sbx.git.dangerously_authenticate("someone", "not-a-real-token", host="git.example.com")
    assert c.sbx.git.get_config("credential.helper") is not None


# --- Sandbox lifecycle: snapshots, pause, connect ----------------------------------------------


@works("Sandbox.create_snapshot", "a snapshot id; a sandbox created from it has the file; an unknown sandbox "
       "is SandboxNotFoundException", deadline=90)
def _(c):
    raises(e2b.SandboxNotFoundException, UNKNOWN, lambda: Sandbox.create_snapshot(UNKNOWN))
    c.sbx.files.write("/home/user/snap.txt", "snapped")
    snap = c.sbx.create_snapshot()
    c.snapshot = snap
    s2 = Sandbox.create(snap.snapshot_id, metadata={"run": RUN, "n": uuid.uuid4().hex})
    c.created.append(s2.sandbox_id)
    try:
        assert s2.files.read("/home/user/snap.txt") == "snapped"
    finally:
        s2.kill()


@works("Sandbox.list_snapshots", "a paginator listing the snapshot")
def _(c):
    c.snapshot_pager = c.sbx.list_snapshots()
    ids = [s.snapshot_id for s in c.snapshot_pager.next_items()]
    assert c.snapshot.snapshot_id in ids, ids


@works("SnapshotPaginator.next_items", "the snapshot, on the only page")
def _(c):
    pager = c.sbx.list_snapshots(limit=5)
    assert c.snapshot.snapshot_id in [s.snapshot_id for s in pager.next_items()]


@works("SnapshotPaginator.has_next", "False after the only page")
def _(c):
    assert c.snapshot_pager.has_next is False


@works("SnapshotPaginator.next_token", "None after the only page")
def _(c):
    assert c.snapshot_pager.next_token is None


@works("Sandbox.delete_snapshot", "True, then False for the deleted id")
def _(c):
    assert Sandbox.delete_snapshot(c.snapshot.snapshot_id) is True
    assert Sandbox.delete_snapshot(c.snapshot.snapshot_id) is False


@works("Sandbox.pause", "True; the sandbox is listed paused", deadline=60)
def _(c):
    c.sbx.commands.run("echo kept > /tmp/state.txt")
    assert c.sbx.pause() is True
    assert Sandbox.get_info(c.sbx.sandbox_id).state.value == "paused"


@works("Sandbox.beta_pause", "False on a sandbox already paused")
def _(c):
    assert c.sbx.beta_pause() is False


@works("Sandbox.connect", "resumes the paused sandbox; its /tmp is kept; an unknown id is "
       "SandboxNotFoundException", deadline=60)
def _(c):
    try:
        Sandbox.connect("nosuchsandbox0000000")
        raise AssertionError("connected to an unknown sandbox")
    except e2b.SandboxNotFoundException:
        pass
    again = Sandbox.connect(c.sbx.sandbox_id, timeout=300)
    assert Sandbox.get_info(c.sbx.sandbox_id).state.value == "running"
    assert again.files.read("/tmp/state.txt") == "kept\n"


# --- Templates ---------------------------------------------------------------------------------


def steps(t):
    import json

    return json.loads(e2b.Template.to_json(t))


@works("Template.from_template", "fromTemplate in the JSON")
def _(c):
    assert steps(e2b.Template().from_template("base"))["fromTemplate"] == "base"


def image_entry(method, image_prefix):
    @works(f"Template.{method}", f"fromImage `{image_prefix}…` in the JSON (built from a registry)")
    def _(c):
        j = steps(getattr(e2b.Template(), method)())
        assert j["fromImage"].startswith(image_prefix), j


for _m, _p in [
    ("from_base_image", "e2bdev/base"),
    ("from_debian_image", "debian"),
    ("from_ubuntu_image", "ubuntu"),
    ("from_python_image", "python"),
    ("from_node_image", "node"),
    ("from_bun_image", "oven/bun"),
    ("from_alpine_image", "alpine"),
    ("from_fedora_image", "fedora"),
    ("from_arch_image", "archlinux"),
]:
    image_entry(_m, _p)


@works("Template.from_image", "fromImage and registry credentials in the JSON")
def _(c):
    j = steps(e2b.Template().from_image("reg.example.com/app:v1", username="u", password="p"))
    assert j["fromImage"] == "reg.example.com/app:v1" and j["fromImageRegistry"]["username"] == "u", j


@works("Template.from_aws_registry", "an aws registry entry in the JSON")
def _(c):
    j = steps(e2b.Template().from_aws_registry("1.dkr.ecr.eu-west-1.amazonaws.com/app:v1",
                                               access_key_id="a", secret_access_key="s", region="eu-west-1"))
    assert j["fromImageRegistry"]["type"] == "aws", j


@works("Template.from_gcp_registry", "a gcp registry entry in the JSON")
def _(c):
    j = steps(e2b.Template().from_gcp_registry("eu.gcr.io/p/app:v1", service_account_json={"k": "v"}))
    assert j["fromImageRegistry"]["type"] == "gcp", j


@works("Template.from_dockerfile", "FROM/RUN/ENV/CMD parsed into steps and a start command")
def _(c):
    t = e2b.Template().from_dockerfile("FROM alpine:3\nRUN echo hi\nENV A=1\nCMD sleep 1\n")
    j = steps(t)
    assert j["fromImage"] == "alpine:3" and j["startCmd"] == "sleep 1", j
    assert any(s["type"] == "RUN" and s["args"][0] == "echo hi" for s in j["steps"]), j


@works("Template.skip_cache", "force set in the JSON")
def _(c):
    assert steps(e2b.Template().skip_cache().from_template("base"))["force"] is True


@works("Template.to_json", "the template's JSON (valid, with its steps)")
def _(c):
    j = steps(e2b.Template().from_template("base").run_cmd("true"))
    assert j["steps"][-1]["type"] == "RUN", j


@works("Template.to_dockerfile", "FROM and RUN lines")
def _(c):
    text = e2b.Template.to_dockerfile(e2b.Template().from_image("alpine:3").run_cmd("echo hi"))
    assert "FROM alpine:3" in text and "RUN echo hi" in text, text


def builder():
    return e2b.Template(file_context_path=CONTEXT).from_template("base")


CONTEXT = tempfile.mkdtemp(prefix="surface-ctx-")
with open(os.path.join(CONTEXT, "f.txt"), "w") as _f:
    _f.write("from the context\n")


def mcp_builder():
    return e2b.Template().from_template("mcp-gateway")


def dev_builder():
    return e2b.Template().from_template("devcontainer")


def builder_entry(method, call, check, note):
    @works(f"TemplateBuilder.{method}", note)
    def _(c):
        j = steps(call(builder()))
        assert check(j), j


def last(j):
    return j["steps"][-1]


for _args in [
    ("apt_install", lambda b: b.apt_install(["curl"]), lambda j: "apt-get" in last(j)["args"][0],
     "a RUN step with apt-get, as root"),
    ("pip_install", lambda b: b.pip_install("requests"), lambda j: "pip" in last(j)["args"][0], "a RUN step with pip"),
    ("npm_install", lambda b: b.npm_install("left-pad"), lambda j: "npm" in last(j)["args"][0], "a RUN step with npm"),
    ("bun_install", lambda b: b.bun_install("left-pad"), lambda j: "bun" in last(j)["args"][0], "a RUN step with bun"),
    ("run_cmd", lambda b: b.run_cmd("echo hi", user="root"), lambda j: last(j)["args"] == ["echo hi", "root"],
     "a RUN step [cmd, user]"),
    ("set_envs", lambda b: b.set_envs({"A": "1"}), lambda j: last(j)["type"] == "ENV" and last(j)["args"] == ["A", "1"],
     "an ENV step, flat [k, v]"),
    ("set_user", lambda b: b.set_user("root"), lambda j: last(j)["type"] == "USER", "a USER step"),
    ("set_workdir", lambda b: b.set_workdir("/srv"), lambda j: last(j)["type"] == "WORKDIR", "a WORKDIR step"),
    ("copy", lambda b: b.copy("f.txt", "/srv/f.txt"), lambda j: last(j)["type"] == "COPY" and last(j)["filesHash"],
     "a COPY step with a files hash"),
    ("copy_items", lambda b: b.copy_items([{"src": "f.txt", "dest": "/srv/g.txt"}]),
     lambda j: last(j)["type"] == "COPY", "a COPY step per item"),
    ("make_dir", lambda b: b.make_dir("/srv/d"), lambda j: "mkdir" in last(j)["args"][0], "a RUN step with mkdir"),
    ("make_symlink", lambda b: b.make_symlink("/a", "/b"), lambda j: "ln -s" in last(j)["args"][0], "a RUN step with ln -s"),
    ("remove", lambda b: b.remove("/srv/x"), lambda j: "rm" in last(j)["args"][0], "a RUN step with rm"),
    ("rename", lambda b: b.rename("/a", "/b"), lambda j: "mv" in last(j)["args"][0], "a RUN step with mv"),
    ("git_clone", lambda b: b.git_clone("https://example.com/r.git", "/srv/r"),
     lambda j: "git clone" in last(j)["args"][0], "a RUN step with git clone"),
    ("add_mcp_server", lambda b: mcp_builder().add_mcp_server("exa"), lambda j: "mcp" in last(j)["args"][0],
     "on `from_template(\"mcp-gateway\")`: a RUN step adding the server (client side; sandboxd has no "
     "mcp-gateway template to build it on)"),
    ("skip_cache", lambda b: b.skip_cache().run_cmd("true"), lambda j: last(j)["force"] is True, "the next step forced"),
    ("set_start_cmd", lambda b: b.set_start_cmd("sleep 1", "true"), lambda j: j["startCmd"] == "sleep 1",
     "startCmd and readyCmd"),
    ("set_ready_cmd", lambda b: b.set_ready_cmd("true"), lambda j: j["readyCmd"] == "true", "readyCmd"),
    ("beta_dev_container_prebuild", lambda b: dev_builder().beta_dev_container_prebuild("/srv/.devcontainer"),
     lambda j: "devcontainer" in last(j)["args"][0],
     "on `from_template(\"devcontainer\")`: a RUN step with the devcontainer CLI (client side; sandboxd "
     "has no devcontainer template)"),
    ("beta_set_dev_container_start", lambda b: dev_builder().beta_set_dev_container_start("/srv/.devcontainer"),
     lambda j: "devcontainer" in j["startCmd"],
     "on `from_template(\"devcontainer\")`: a devcontainer start command (client side)"),
]:
    builder_entry(*_args)


@works("Template.build", "a small template is built; a sandbox from it sees the RUN step's file", deadline=120)
def _(c):
    c.alias = f"surface-{RUN}"
    t = builder().copy("f.txt", "/home/user/f.txt").run_cmd("echo built > /home/user/built.txt")
    info = e2b.Template.build(t, c.alias)
    c.cleanups.append(lambda: Sandbox.delete_snapshot(c.alias))
    assert info.template_id == c.alias, info
    s = Sandbox.create(c.alias, metadata={"run": RUN, "n": uuid.uuid4().hex})
    c.created.append(s.sandbox_id)
    try:
        assert s.files.read("/home/user/built.txt") == "built\n"
        assert s.files.read("/home/user/f.txt") == "from the context\n"
    finally:
        s.kill()


@works("Template.exists", "True for the built name, False for another")
def _(c):
    assert e2b.Template.exists(c.alias) and not e2b.Template.exists(f"none-{RUN}")


@works("Template.alias_exists", "as exists")
def _(c):
    assert e2b.Template.alias_exists(c.alias) and not e2b.Template.alias_exists(f"none-{RUN}")


@works("Template.build_in_background", "a BuildInfo with ids, the build under way", deadline=60)
def _(c):
    c.bg_alias = f"surface-bg-{RUN}"
    c.bg_build = e2b.Template.build_in_background(builder().run_cmd("true"), c.bg_alias)
    assert c.bg_build.template_id and c.bg_build.build_id, c.bg_build


@works("Template.get_build_status", "reaches ready; an unknown build is BuildException \"not found\"",
       deadline=120)
def _(c):
    unknown = e2b.BuildInfo(template_id=f"none-{RUN}", build_id="none", alias="none", name="none", tags=[])
    raises(e2b.BuildException, "not found", lambda: e2b.Template.get_build_status(unknown))
    deadline = time.time() + 110
    while True:
        st = e2b.Template.get_build_status(c.bg_build)
        if st.status.value in ("ready", "error") or time.time() > deadline:
            break
        time.sleep(0.5)
    assert st.status.value == "ready", st
    assert Sandbox.delete_snapshot(c.bg_alias) is True


@refused("Template.assign_tags", e2b.TemplateException, "template tags are not supported")
def _(c):
    e2b.Template.assign_tags(c.alias, ["v2"])


@refused("Template.remove_tags", e2b.TemplateException, "template tags are not supported")
def _(c):
    e2b.Template.remove_tags(c.alias, ["v2"])


@refused("Template.get_tags", e2b.TemplateException, "template tags are not supported")
def _(c):
    e2b.Template.get_tags(c.alias)


# --- Volumes -----------------------------------------------------------------------------------


@works("Volume.create", "a volume with the given name and an id")
def _(c):
    c.vol = e2b.Volume.create(f"surface-{RUN}")
    assert c.vol.name == f"surface-{RUN}" and c.vol.volume_id


@works("Volume.name", "the name given")
def _(c):
    assert c.vol.name == f"surface-{RUN}"


@works("Volume.volume_id", "a non-empty id")
def _(c):
    assert c.vol.volume_id


@works("Volume.token", "a non-empty token for the content API")
def _(c):
    assert c.vol.token


@works("Volume.connect", "the same volume by id; an unknown id is VolumeNotFoundException")
def _(c):
    raises(e2b.VolumeNotFoundException, "not found", lambda: e2b.Volume.connect(f"none-{RUN}"))
    v = e2b.Volume.connect(c.vol.volume_id)
    assert v.volume_id == c.vol.volume_id and v.name == c.vol.name


@works("Volume.list", "lists the volume")
def _(c):
    assert c.vol.volume_id in [v.volume_id for v in e2b.Volume.list()]


@works("Volume.make_dir", "a directory entry")
def _(c):
    assert c.vol.make_dir("/d").type.value == "directory"


@works("Volume.write_file", "an entry with the size written")
def _(c):
    assert c.vol.write_file("/d/f.txt", "vol").size == 3


@works("Volume.read_file", "the bytes written")
def _(c):
    assert c.vol.read_file("/d/f.txt") == "vol"


@works("Volume.exists", "True, then False for a missing path")
def _(c):
    assert c.vol.exists("/d/f.txt") and not c.vol.exists("/d/none")


@works("Volume.get_info", "the volume's name (class form); an entry's stat (instance form)")
def _(c):
    assert e2b.Volume.get_info(c.vol.volume_id).name == c.vol.name
    st = c.vol.get_info("/d/f.txt")
    assert (st.name, st.size, st.type.value) == ("f.txt", 3, "file"), st


@works("Volume.update_metadata", "the mode changed")
def _(c):
    assert c.vol.update_metadata("/d/f.txt", mode=0o600).mode & 0o777 == 0o600


@works("Volume.remove", "the file is gone")
def _(c):
    c.vol.remove("/d/f.txt")
    assert not c.vol.exists("/d/f.txt")


@works("Volume.destroy", "True; no longer listed; False for an unknown id")
def _(c):
    assert e2b.Volume.destroy(c.vol.volume_id) is True
    assert e2b.Volume.destroy(c.vol.volume_id) is False
    assert c.vol.volume_id not in [v.volume_id for v in e2b.Volume.list()]


# --- Secrets -----------------------------------------------------------------------------------


@works("Secret.create", "version 1, the value never echoed")
def _(c):
    c.secret = f"surface-{RUN}"
    info = e2b.Secret.create(c.secret, "sk-value-1")
    assert info.version == 1 and "sk-value-1" not in repr(info), info


@works("Secret.get_info", "found by name and by id; an unknown name is SecretNotFoundException")
def _(c):
    raises(e2b.SecretNotFoundException, "not found", lambda: e2b.Secret.get_info(f"none-{RUN}"))
    info = e2b.Secret.get_info(c.secret)
    assert e2b.Secret.get_info(info.secret_id).name == c.secret


@works("Secret.exists", "True, then False for another name")
def _(c):
    assert e2b.Secret.exists(c.secret) and not e2b.Secret.exists(f"none-{RUN}")


@works("Secret.update", "version 2; an unknown name is SecretNotFoundException")
def _(c):
    raises(e2b.SecretNotFoundException, "not found", lambda: e2b.Secret.update(f"none-{RUN}", "v"))
    assert e2b.Secret.update(c.secret, "sk-value-2").version == 2


@works("Secret.list", "a paginator listing the secret")
def _(c):
    c.secret_pager = e2b.Secret.list(limit=100)
    assert c.secret in [s.name for s in c.secret_pager.next_items()]


@works("SecretPaginator.next_items", "pages of one, each name once")
def _(c):
    pager, names = e2b.Secret.list(limit=1), []
    while pager.has_next:
        names += [s.name for s in pager.next_items()]
    assert c.secret in names and len(names) == len(set(names)), names


@works("SecretPaginator.has_next", "False after the only page")
def _(c):
    assert c.secret_pager.has_next is False


@works("SecretPaginator.next_token", "None after the only page")
def _(c):
    assert c.secret_pager.next_token is None


@works("Secret.fill", "a placeholder naming the secret (client side)")
def _(c):
    assert c.secret in e2b.Secret.fill(c.secret)


@works("Secret.iam_token", "a token definition (client side); a create using one is SandboxException "
       "\"workload identity (iam) is not supported\"")
def _(c):
    t = e2b.Secret.iam_token(audience="sts.example.com", token_type="JWT-SVID")
    assert t is not None
    try:
        c.new_sandbox(iam={"tokens": {"aws": t}})
        raise AssertionError("a create with an iam token was accepted")
    except e2b.SandboxException as e:
        assert "workload identity (iam) is not supported" in str(e), e


@works("Secret.destroy", "True, then False")
def _(c):
    assert e2b.Secret.destroy(c.secret) is True
    assert e2b.Secret.destroy(c.secret) is False


# --- Last: kill --------------------------------------------------------------------------------


@works("Sandbox.kill", "True; a second kill is False; get_info is then SandboxNotFoundException")
def _(c):
    assert c.sbx.kill() is True
    assert Sandbox.kill(c.sbx.sandbox_id) is False
    try:
        Sandbox.get_info(c.sbx.sandbox_id)
        raise AssertionError("a killed sandbox has info")
    except e2b.SandboxNotFoundException:
        pass


# ---------------------------------------------------------------------------------------------
# The `e2b-code-interpreter` SDK: what its Sandbox adds to `e2b`'s (the rest is python.md's), and
# its result classes
# ---------------------------------------------------------------------------------------------

SECTION = "code-interpreter"


def ci_classes():
    import e2b_code_interpreter as ci

    return {
        "Sandbox": ci.Sandbox,
        "Execution": ci.Execution,
        "ExecutionError": ci.ExecutionError,
        "Logs": ci.Logs,
        "Result": ci.Result,
        "Context": ci.Context,
    }


@works("Sandbox.default_template", "`code-interpreter-v1`; create() without a template makes one "
       "whose interpreter answers", deadline=120)
def _(c):
    import e2b_code_interpreter as ci

    cls = SyncProxy(ci.AsyncSandbox) if MODE == "code-interpreter-async" else ci.Sandbox
    assert cls.default_template == "code-interpreter-v1"
    c.sbx = c.new_sandbox(cls, timeout=300)
    assert type(unwrap(c.sbx)).__name__ == unwrap(cls).__name__, type(unwrap(c.sbx))
    assert c.sbx.get_info().template_id == "code-interpreter-v1"


@works("Sandbox.run_code", "state kept between calls, the main result's text, stdout and an error "
       "with its name; an unknown language is SandboxException naming it unsupported")
def _(c):
    assert c.sbx.run_code("x = 20 + 1\nx").text == "21"
    c.execution = c.sbx.run_code("print('out')\nx * 2")
    assert c.execution.text == "42" and c.execution.logs.stdout == ["out\n"], c.execution
    c.failed = c.sbx.run_code("1/0")
    assert c.failed.error.name == "ZeroDivisionError", c.failed
    try:
        c.sbx.run_code("1", language="cobol")
        raise AssertionError("code ran in an unknown language")
    except e2b.SandboxException as e:
        assert "unsupported language" in str(e), e


@works("Execution.text", "the main result's text")
def _(c):
    assert c.execution.text == "42"


@works("Execution.to_json", "JSON with the results and logs")
def _(c):
    import json

    j = json.loads(c.execution.to_json())
    assert json.loads(j["logs"])["stdout"] == ["out\n"] and j["results"][0]["text"] == "42", j


@works("Logs.to_json", "JSON with stdout and stderr")
def _(c):
    import json

    assert json.loads(c.execution.logs.to_json())["stdout"] == ["out\n"]


@works("ExecutionError.to_json", "JSON with name, value and traceback")
def _(c):
    import json

    j = json.loads(c.failed.error.to_json())
    assert j["name"] == "ZeroDivisionError" and "traceback" in j, j


@works("Result.formats", "`text` among a result's formats; png for a plot")
def _(c):
    assert "text" in list(c.execution.results[0].formats())
    plot = c.sbx.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 2], [3, 4])\nplt.show()")
    assert any("png" in list(r.formats()) for r in plot.results), plot


@works("Sandbox.create_code_context", "a context with its own state, language and cwd")
def _(c):
    c.context = c.sbx.create_code_context(cwd="/tmp")
    assert c.context.id and c.context.language == "python" and c.context.cwd == "/tmp", c.context
    c.sbx.run_code("y = 5", context=c.context)
    assert c.sbx.run_code("y", context=c.context).text == "5"
    assert c.sbx.run_code("import os; os.getcwd()", context=c.context).text == "'/tmp'"


@works("Context.from_json", "a Context from its JSON form")
def _(c):
    import e2b_code_interpreter as ci

    ctx = ci.Context.from_json({"id": "abc", "language": "python", "cwd": "/tmp"})
    assert (ctx.id, ctx.language, ctx.cwd) == ("abc", "python", "/tmp"), ctx


@works("Sandbox.list_code_contexts", "the created context is listed")
def _(c):
    assert c.context.id in [x.id for x in c.sbx.list_code_contexts()]


@works("Sandbox.restart_code_context", "the context's state is gone after a restart", deadline=60)
def _(c):
    c.sbx.restart_code_context(c.context)
    r = c.sbx.run_code("y", context=c.context)
    assert r.error is not None and r.error.name == "NameError", r


@works("Sandbox.remove_code_context", "no longer listed; running code in it is NotFoundException")
def _(c):
    c.sbx.remove_code_context(c.context.id)
    assert c.context.id not in [x.id for x in c.sbx.list_code_contexts()]
    try:
        c.sbx.run_code("1", context=c.context)
        raise AssertionError("code ran in a removed context")
    except e2b.NotFoundException:
        pass
    c.sbx.kill()


# ---------------------------------------------------------------------------------------------
# `e2b`'s async classes: the sync entries through an adapter, and their own where the API differs
# ---------------------------------------------------------------------------------------------

SECTION = "async"


def async_classes():
    from e2b.sandbox_async.commands.command import Commands
    from e2b.sandbox_async.commands.pty import Pty
    from e2b.sandbox_async.filesystem.filesystem import Filesystem
    from e2b.sandbox_async.git import Git
    from e2b.template.main import TemplateBuilder

    return {
        "AsyncSandbox": e2b.AsyncSandbox,
        "AsyncFilesystem": Filesystem,
        "AsyncCommands": Commands,
        "AsyncCommandHandle": e2b.AsyncCommandHandle,
        "AsyncCommandInputHandle": e2b.AsyncCommandInputHandle,
        "AsyncPty": Pty,
        "AsyncWatchHandle": e2b.AsyncWatchHandle,
        "AsyncGit": Git,
        "AsyncTemplate": e2b.AsyncTemplate,
        "TemplateBuilder": TemplateBuilder,
        "AsyncVolume": e2b.AsyncVolume,
        "AsyncSecret": e2b.AsyncSecret,
        "AsyncSandboxPaginator": e2b.AsyncSandboxPaginator,
        "AsyncSnapshotPaginator": e2b.AsyncSnapshotPaginator,
        "AsyncSecretPaginator": e2b.AsyncSecretPaginator,
    }


class Loop:
    """One event loop on a thread of its own; `call` runs a function on it (the async SDK's objects
    want a running loop even for their plain methods) and waits for what it returns, awaited."""

    loop = None

    @classmethod
    def call(cls, fn, *args, **kwargs):
        import asyncio
        import threading

        if cls.loop is None:
            cls.loop = asyncio.new_event_loop()
            threading.Thread(target=cls.loop.run_forever, daemon=True).start()

        async def on_loop():
            result = fn(*args, **kwargs)
            if inspect.isawaitable(result):
                result = await result
            return result

        return asyncio.run_coroutine_threadsafe(on_loop(), cls.loop).result()


ASYNC_MODULES = ("e2b.sandbox_async", "e2b.template_async", "e2b.volume.volume_async", "e2b.secret.secret_async",
                 "e2b_code_interpreter.code_interpreter_async")


def wrap(value):
    if isinstance(value, list):
        return [wrap(v) for v in value]
    module = type(value).__module__ if not isinstance(value, type) else value.__module__
    if module.startswith(ASYNC_MODULES) and not isinstance(value, BaseException):
        return SyncProxy(value)
    return value


class SyncProxy:
    """An async SDK object (or class) called as the sync one is: each call is awaited on [`Loop`]
    and what it returns wrapped again."""

    def __init__(self, target):
        object.__setattr__(self, "_target", target)

    def __getattr__(self, name):
        value = getattr(self._target, name)
        if callable(value) and not isinstance(value, type):

            def call(*args, **kwargs):
                args = [unwrap(a) for a in args]
                kwargs = {k: unwrap(v) for k, v in kwargs.items()}
                return wrap(Loop.call(value, *args, **kwargs))

            return call
        return wrap(value)

    def __call__(self, *args, **kwargs):
        return wrap(Loop.call(self._target, *args, **kwargs))


class AsyncE2b:
    """The `e2b` module as the async entries see it: its async classes in place of the sync ones."""

    def __getattr__(self, name):
        from e2b.sandbox_async.git import Git

        swap = {
            "Template": SyncProxy(REAL_E2B.AsyncTemplate),
            "Volume": SyncProxy(REAL_E2B.AsyncVolume),
            "Secret": SyncProxy(REAL_E2B.AsyncSecret),
            "Git": Git,
            "WatchHandle": REAL_E2B.AsyncWatchHandle,
        }
        return swap[name] if name in swap else getattr(REAL_E2B, name)


REAL_E2B = e2b


def async_entries():
    """The sync entries under the async classes' names, less what the async classes lack, with the
    async API's own entries in place of those that differ."""
    rename = {cn: f"Async{cn}" for cn in e2b_classes() if cn != "TemplateBuilder"}
    classes = async_classes()
    exists = {f"{cn}.{m}" for cn, cls in classes.items() for m in public_names(cls)}
    out = {}
    for name, entry in ENTRIES["e2b"].items():
        cls, method = name.split(".", 1)
        new = f"{rename.get(cls, cls)}.{method}"
        if new not in exists:
            continue  # the async class has no such method (its entry would say so)
        own = ENTRIES["async"].get(new)
        note = re.sub(r"\b(Sandbox|Filesystem|Commands|CommandHandle|Pty|WatchHandle|Git|Volume|Secret)\.",
                      r"Async\1.", entry.note)
        out[new] = own or Entry(new, entry.kind, note, entry.fn, entry.exc, entry.text, entry.deadline)
        if new == "AsyncCommands.stream_input":
            # The async-only entries run here, while the shared sandbox is up.
            for extra, entry in ENTRIES["async"].items():
                if extra.split(".", 1)[1] not in [n.split(".", 1)[1] for n in ENTRIES["e2b"]] or \
                        extra.startswith(("AsyncCommandInputHandle.", "AsyncCommandHandle.")):
                    out.setdefault(extra, entry)
    for name, entry in ENTRIES["async"].items():
        out.setdefault(name, entry)
    return out


@works("AsyncSandbox.create", ENTRIES["e2b"]["Sandbox.create"].note + " (an AsyncSandbox behind the adapter)")
def _(c):
    ENTRIES["e2b"]["Sandbox.create"].fn(c)
    assert isinstance(unwrap(c.sbx), REAL_E2B.AsyncSandbox), type(unwrap(c.sbx))
    assert type(unwrap(c.sbx.commands)).__module__.startswith("e2b.sandbox_async")


@works("AsyncFilesystem.watch_dir", "the callback sees a new file")
def _(c):
    events = []
    c.watch = c.sbx.files.watch_dir("/home/user/s/d", on_event=events.append)
    c.sbx.files.write("/home/user/s/d/new.txt", "x")
    deadline = time.time() + 10
    while time.time() < deadline and not any(e.name == "new.txt" for e in events):
        time.sleep(0.2)
    assert any(e.name == "new.txt" for e in events), events


@works("AsyncCommands.stream_input", "an input handle whose sends reach the process")
def _(c):
    h = c.sbx.commands.run("cat", background=True, stdin=True)
    c.input = c.sbx.commands.stream_input(h.pid)
    c.input.send("a")
    c.input.send("b\n")
    c.input.close()
    c.sbx.commands.close_stdin(h.pid)
    assert h.wait().stdout == "ab\n"


@works("AsyncCommandInputHandle.send", "data reaches the process (see AsyncCommands.stream_input)")
def _(c):
    h = c.sbx.commands.run("head -n 1", background=True, stdin=True)
    i = c.sbx.commands.stream_input(h.pid)
    i.send("sent\n")
    i.close()
    assert h.wait().stdout == "sent\n"


@works("AsyncCommandInputHandle.close", "returns once the stream is acknowledged")
def _(c):
    assert c.input is not None


@works("AsyncCommandHandle.stdout", "the output so far")
def _(c):
    h = c.sbx.commands.run("echo so-far", background=True)
    h.wait()
    assert h.stdout == "so-far\n"


@works("AsyncCommandHandle.stderr", "the error output so far")
def _(c):
    h = c.sbx.commands.run("echo e >&2", background=True)
    h.wait()
    assert h.stderr == "e\n"


@works("AsyncCommandHandle.exit_code", "the exit code once it ended")
def _(c):
    h = c.sbx.commands.run("true", background=True)
    h.wait()
    assert h.exit_code == 0


@works("AsyncCommandHandle.error", "None for a command that succeeded")
def _(c):
    h = c.sbx.commands.run("true", background=True)
    h.wait()
    assert h.error is None


@works("AsyncPty.create", "a handle with a pid; its on_data gets the shell's output (read under "
       "AsyncPty.stream_input)")
def _(c):
    c.pty_out = []
    c.pty = c.sbx.pty.create(e2b.PtySize(rows=24, cols=80), on_data=lambda d: c.pty_out.append(bytes(d)))
    assert c.pty.pid > 0


@works("AsyncPty.stream_input", "an input handle typing into the shell; its output holds what "
       "send_stdin typed, the resized size and the streamed command's output")
def _(c):
    i = c.sbx.pty.stream_input(c.pty.pid)
    i.send(b"echo str")
    i.send(b"eamed; exit\n")
    i.close()
    try:
        c.pty.wait()
    except e2b.CommandExitException:
        pass
    text = b"".join(c.pty_out).decode(errors="replace")
    assert "pty-42" in text and "30 100" in text and "streamed" in text, text


@works("AsyncPty.connect", "a handle on a running pty")
def _(c):
    h = c.sbx.pty.create(e2b.PtySize(rows=24, cols=80), on_data=lambda d: None)
    h.disconnect()
    again = c.sbx.pty.connect(h.pid, on_data=lambda d: None)
    assert again.pid == h.pid
    c.pty2 = h


# ---------------------------------------------------------------------------------------------
# Running and the table
# ---------------------------------------------------------------------------------------------


def run_entry(entry, ctx, pool):
    """None when the entry holds, else what went wrong."""
    future = pool.submit(entry.fn, ctx)
    started = time.time()
    try:
        future.result(timeout=entry.deadline)
    except concurrent.futures.TimeoutError:
        return f"no answer within {entry.deadline:.0f} s"
    except Exception as e:  # noqa: BLE001 - classified below
        if entry.kind == "refused":
            if not isinstance(e, entry.exc):
                return f"raised {type(e).__name__} ({e}), not {entry.exc.__name__}"
            if entry.text not in str(e):
                return f"{type(e).__name__} without {entry.text!r}: {e}"
            if time.time() - started > 10:
                return f"refused only after {time.time() - started:.0f} s"
            return None
        return f"{type(e).__name__}: {e}\n{traceback.format_exc()}"
    if entry.kind == "refused":
        return f"returned instead of raising {entry.exc.__name__}"
    return None


def table(sdk, classes, entries):
    works_n = sum(1 for e in entries if e.kind == "works")
    refused_n = len(entries) - works_n
    lines = [
        f"# Surface of `{sdk}` {version(sdk)} (Python{', async classes' if MODE.endswith('async') else ''}) "
        "against sandboxd",
        "",
        f"Generated by `tests/e2b/test_surface.py{'' if MODE == 'e2b' else ' ' + MODE}`: every public method and "
        f"property of {', '.join(f'`{c}`' for c in sorted(classes))}, found by introspection and called "
        "against the daemon under a deadline."
        + ("" if not MODE.startswith("code-interpreter") else
           " The `{0}` rows are what the code interpreter's `{0}` adds to `e2b`'s; what it inherits is in "
           "[{1}]({1}).".format(*(("AsyncSandbox", "python-async.md") if MODE.endswith("async")
                                 else ("Sandbox", "python.md")))),
        "",
        f"works {works_n}, refused {refused_n}",
        "",
        "| class.method | works/refused | what is asserted, or the error and its message |",
        "|---|---|---|",
    ]
    for e in sorted(entries, key=lambda e: e.name):
        if e.kind == "works":
            what = e.note
        else:
            what = f"`{e.exc.__name__}`, message contains \"{e.text}\""
            if e.note:
                what += f"; {e.note}"
        lines.append(f"| `{e.name}` | {e.kind} | {what} |")
    return "\n".join(lines) + "\n"


def main():
    for var in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY"):
        if not os.environ.get(var):
            print(f"{var} must be set", file=sys.stderr)
            return 2
    if MODE not in TABLES:
        print(f"unknown mode {MODE!r}: one of {', '.join(TABLES)}", file=sys.stderr)
        return 2
    global Sandbox, e2b
    if MODE == "e2b":
        sdk, classes, entries = "e2b", e2b_classes(), ENTRIES["e2b"]
    elif MODE == "async":
        sdk, classes, entries = "e2b", async_classes(), async_entries()
        Sandbox, e2b = SyncProxy(REAL_E2B.AsyncSandbox), AsyncE2b()
    elif MODE == "code-interpreter-async":
        import e2b_code_interpreter as ci

        sdk, classes = "e2b-code-interpreter", {"AsyncSandbox": ci.AsyncSandbox}
        # The result classes are the sync SDK's (code-interpreter-python.md): their entries run
        # for the calls they make, and are not this table's.
        entries = {
            (f"Async{n}" if n.startswith("Sandbox.") else n): Entry(
                f"Async{n}" if n.startswith("Sandbox.") else n, e.kind, e.note, e.fn, e.exc, e.text, e.deadline)
            for n, e in ENTRIES["code-interpreter"].items()
        }
    else:
        sdk, classes, entries = "e2b-code-interpreter", ci_classes(), ENTRIES["code-interpreter"]
    own_of = {"Sandbox": Sandbox, "AsyncSandbox": REAL_E2B.AsyncSandbox}
    found = sorted(f"{cn}.{m}" for cn, cls in classes.items() for m in (
        own_names(cls, own_of[cn]) if MODE.startswith("code-interpreter") and cn in own_of
        else public_names(cls)))

    failed = []
    for name in sorted(set(found) - set(entries)):
        failed.append((name, "new method, classify it (no entry in the surface test)"))
    for name in sorted(n for n in set(entries) - set(found) if n.split(".")[0] in classes):
        failed.append((name, "has an entry but the SDK no longer has it"))
    print(f"{sdk} {version(sdk)}: {len(found)} public names")
    ctx = Ctx()
    pool = concurrent.futures.ThreadPoolExecutor(max_workers=4)
    try:
        for entry in entries.values():
            started = time.time()
            problem = run_entry(entry, ctx, pool)
            took = time.time() - started
            if problem:
                failed.append((entry.name, problem))
                print(f"FAIL  {entry.name}: {problem}")
            else:
                print(f"ok    {entry.name} ({entry.kind}) [{took:.1f}s]")
    finally:
        for sid in set(ctx.created):
            try:
                Sandbox.kill(sid)
            except Exception:  # noqa: BLE001 - best effort
                pass
        for clean in ctx.cleanups:
            try:
                clean()
            except Exception:  # noqa: BLE001 - best effort
                pass
    text = table(sdk, classes, [entries[n] for n in entries if n in found])
    path = TABLES[MODE]
    current = open(path).read() if os.path.exists(path) else None
    if current != text:
        if os.environ.get("SURFACE_UPDATE") == "1" and not failed:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
            print(f"wrote {path}")
        elif os.environ.get("SURFACE_UPDATE") == "1":
            failed.append((path, "not rewritten: entries failed"))
        else:
            with open(path + ".new", "w") as f:
                f.write(text)
            failed.append((path, f"differs from the regenerated table: see {path}.new "
                                 "(SURFACE_UPDATE=1 rewrites it)"))
    listed = [e for n, e in entries.items() if n in found]
    works_n = sum(1 for e in listed if e.kind == "works")
    print(f"\n{sdk} ({MODE}): works {works_n}, refused {len(listed) - works_n}; {len(failed)} failed")
    for name, problem in failed:
        print(f"FAIL  {name}: {problem.splitlines()[0]}")
    sys.stdout.flush()
    # A call still hanging in its thread must not keep the process alive.
    os._exit(1 if failed else 0)


if __name__ == "__main__":
    sys.exit(main())
