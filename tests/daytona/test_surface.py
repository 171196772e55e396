#!/usr/bin/env python3
"""The `daytona` Python SDK's whole public surface against the daemon, method by method.

Run by crates/sandboxd/tests/daytona_surface.rs with DAYTONA_API_URL and an admin DAYTONA_API_KEY.

The classes below are listed by introspection (public = no leading underscore; methods and
properties defined by the class or a base class of the `daytona` package itself). Every method
found must have an entry in ENTRIES, in one of two columns:
- works: the entry calls it and asserts its result;
- refused: the call must raise the SDK's own error class (a `DaytonaError`) at once, with the
  daemon's message saying what is not supported and what to use instead.
A method without an entry fails the run ("new method, classify it"), so a new SDK version cannot
pass silently; so does a public class the script neither covers nor names as left out. Every call
runs under a deadline (DEADLINE seconds, more for creates); a call over it fails, as does any other
exception.

The table `tests/daytona/surface/python.md` is regenerated from the run and compared with the
checked-in file: on a difference the run fails and writes `python.md.new` beside it (with
SURFACE_UPDATE=1 it rewrites the file instead). Its text holds no ids or timings.
"""

import asyncio
import datetime
import importlib
import inspect
import os
import sys
import threading
import time
import urllib.request
import uuid

import daytona
from daytona_api_client.exceptions import NotFoundException
from daytona import (
    CodeRunParams,
    CreateSandboxFromSnapshotParams,
    CreateSecretParams,
    CreateSnapshotParams,
    Daytona,
    DaytonaError,
    DaytonaBadRequestError,
    DaytonaFileNotFoundError,
    DaytonaGitRepoNotFoundError,
    DaytonaNotFoundError,
    FileDownloadRequest,
    FileUpload,
    Image,
    ListSandboxesQuery,
    LspCompletionPosition,
    PtySize,
    Resources,
    ScreenshotRegion,
    SessionExecuteRequest,
    UpdateSecretParams,
)

RUN = uuid.uuid4().hex[:8]
DEADLINE = 30
SLOW = 120
FIRST = 300
# An image the daemon can pull (the Rust test serves it from a registry of its own).
IMAGE = os.environ.get("SURFACE_IMAGE", "team/app:v1")
HERE = os.path.dirname(os.path.abspath(__file__))
TABLE = os.path.join(HERE, "surface", "python.md")

# The sync classes whose methods are the surface, by module; the async twins are compared by name.
SYNC = {
    "daytona._sync.daytona": ["Daytona"],
    "daytona._sync.sandbox": ["Sandbox"],
    "daytona._sync.filesystem": ["FileSystem"],
    "daytona._sync.process": ["Process"],
    "daytona.handle.pty_handle": ["PtyHandle"],
    "daytona._sync.git": ["Git"],
    "daytona._sync.code_interpreter": ["CodeInterpreter"],
    "daytona._sync.lsp_server": ["LspServer"],
    "daytona._sync.computer_use": [
        "ComputerUse", "Mouse", "Keyboard", "Screenshot", "Display", "RecordingService", "Accessibility",
    ],
    "daytona._sync.snapshot": ["SnapshotService"],
    "daytona._sync.volume": ["VolumeService"],
    "daytona._sync.secret": ["SecretService"],
    "daytona._sync.warm_pool": ["WarmPoolService"],
}
# Public classes of those modules left out, and why.
# What an async twin has beyond its sync class, and why.
ASYNC_ONLY = {
    "AsyncDaytona": {"close": "closes the client's HTTP session (the sync client has none to close)"},
}
LEFT_OUT = {
    "Image": "a client-side Dockerfile builder (tests/daytona/test_images.py)",
    "ObjectStorage": "internal: the uploader `Image` builds with local files use (tests/daytona/test_contexts.py)",
}


def members(cls):
    """Public methods and properties `cls` or a base class of the `daytona` package defines (not
    pydantic's hooks, such as `model_post_init`, that a model class overrides)."""
    from pydantic import BaseModel
    names = set()
    for klass in cls.__mro__:
        if not klass.__module__.startswith("daytona.") and klass.__module__ != "daytona":
            continue
        for name, value in vars(klass).items():
            if name.startswith("_") or hasattr(BaseModel, name):
                continue
            if inspect.isfunction(value) or isinstance(value, (property, staticmethod, classmethod)):
                names.add(name)
    return names


def surface():
    """`{"Class.method"}` of the sync classes; fails on a public class neither listed nor left out."""
    found = set()
    for module_name, classes in SYNC.items():
        module = importlib.import_module(module_name)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module_name or name.startswith("_"):
                continue
            if name in LEFT_OUT:
                continue
            assert name in classes, f"{module_name}.{name}: a new public class, classify it"
        for name in classes:
            found |= {f"{name}.{m}" for m in members(getattr(module, name))}
    return found


def async_twins():
    """The async classes whose public methods are exactly their sync twin's (checked by name)."""
    pairs = [(getattr(daytona, "Async" + n, None), n) for n in ["Daytona", "Sandbox"]]
    for module_name, classes in SYNC.items():
        if not module_name.startswith("daytona._sync."):
            continue
        twin = importlib.import_module(module_name.replace("._sync.", "._async."))
        for name in classes:
            pairs.append((getattr(twin, "Async" + name, None), name))
    from daytona.handle import async_pty_handle, pty_handle  # noqa: F401
    pairs.append((async_pty_handle.AsyncPtyHandle, "PtyHandle"))
    mirrored = set()
    for twin, name in pairs:
        assert twin is not None, f"no async twin of {name}"
        sync = next(getattr(importlib.import_module(m), name) for m, cs in SYNC.items() if name in cs)
        extra = set(ASYNC_ONLY.get(twin.__name__, {}))
        assert members(twin) - extra == members(sync), (
            f"{twin.__name__} differs from {name}: {sorted((members(twin) - extra) ^ members(sync))}")
        mirrored.add(twin.__name__)
    return sorted(mirrored)


# ---------------------------------------------------------------------------------------------
# Entries: "Class.method" -> (column, text, call). Run in this order; the table is sorted.

ENTRIES = {}
CTX = {}


def works(name, text, deadline=DEADLINE):
    def register(fn):
        assert name not in ENTRIES, name
        ENTRIES[name] = ("works", text, fn, deadline, None, None)
        return fn
    return register


def refused(name, call, says, error=DaytonaError):
    assert name not in ENTRIES, name
    ENTRIES[name] = ("refused", None, call, DEADLINE, error, says)


def sbx():
    return CTX["sbx"]


def other():
    return CTX["other"]


D = None  # the Daytona client, made in main()


# Daytona ---------------------------------------------------------------------------------------

# The default snapshot (the code interpreter) may be prepared at a daemon's first use of it.
@works("Daytona.create", "two sandboxes (a python one and one from `base`) start with their labels; an "
       "unknown snapshot is `DaytonaNotFoundError`", FIRST)
def _():
    try:
        D.create(CreateSandboxFromSnapshotParams(snapshot=f"no-such-{RUN}", labels={"surface": RUN}))
        raise AssertionError("a sandbox was made from an unknown snapshot")
    except DaytonaNotFoundError:
        pass
    CTX["sbx"] = D.create(CreateSandboxFromSnapshotParams(
        language="python", name=f"surface-{RUN}", labels={"surface": RUN}, env_vars={"FROM": "create"}),
        timeout=FIRST)
    CTX["other"] = D.create(CreateSandboxFromSnapshotParams(snapshot="base", labels={"surface": RUN}),
                            timeout=SLOW)
    for s in (sbx(), other()):
        assert s.state == "started" and s.labels["surface"] == RUN, s.state


@works("Daytona.get", "by id and by name; an unknown name is `DaytonaNotFoundError`")
def _():
    assert D.get(sbx().id).id == sbx().id
    assert D.get(f"surface-{RUN}").id == sbx().id
    try:
        D.get(f"no-such-{RUN}")
        raise AssertionError("an unknown name was found")
    except DaytonaNotFoundError:
        pass


@works("Daytona.list", "a label filter lists exactly the two sandboxes")
def _():
    ids = {s.id for s in D.list(ListSandboxesQuery(labels={"surface": RUN}))}
    assert ids == {sbx().id, other().id}, ids


@works("Daytona.stop", "the sandbox is `stopped`", SLOW)
def _():
    D.stop(other())
    assert D.get(other().id).state == "stopped"


@works("Daytona.start", "the sandbox is `started` and runs commands", SLOW)
def _():
    D.start(other())
    assert other().process.exec("echo up").result.strip() == "up"


# Sandbox: properties and client-side parts ---------------------------------------------------

@works("Sandbox.fs", "a `FileSystem`")
def _():
    assert type(sbx().fs).__name__ == "FileSystem"


@works("Sandbox.git", "a `Git`")
def _():
    assert type(sbx().git).__name__ == "Git"


@works("Sandbox.process", "a `Process`")
def _():
    assert type(sbx().process).__name__ == "Process"


@works("Sandbox.code_interpreter", "a `CodeInterpreter`")
def _():
    assert type(sbx().code_interpreter).__name__ == "CodeInterpreter"


@works("Sandbox.computer_use", "a `ComputerUse` (client-side; its calls are refused)")
def _():
    assert type(sbx().computer_use).__name__ == "ComputerUse"


@works("Sandbox.create_lsp_server", "an `LspServer` for a language and a project (client-side)")
def _():
    CTX["lsp"] = sbx().create_lsp_server("python", "/home/user/lsp")
    assert type(CTX["lsp"]).__name__ == "LspServer"


@works("Sandbox.refresh_data", "the record is read again: `started`, same labels")
def _():
    sbx().refresh_data()
    assert sbx().state == "started" and sbx().labels["surface"] == RUN


@works("Sandbox.get_user_home_dir", "`/home/user`")
def _():
    assert sbx().get_user_home_dir() == "/home/user"


@works("Sandbox.get_user_root_dir", "`/home/user` (the SDK's alias of the home directory)")
def _():
    assert sbx().get_user_root_dir() == "/home/user"


@works("Sandbox.get_work_dir", "an absolute directory")
def _():
    assert sbx().get_work_dir().startswith("/")


@works("Sandbox.set_labels", "the labels are replaced and echoed")
def _():
    got = sbx().set_labels({"surface": RUN, "extra": "yes"})
    assert got["extra"] == "yes", got


@works("Sandbox.set_public", "the sandbox is public, then private again")
def _():
    sbx().set_public(True)
    assert sbx().public is True
    sbx().set_public(False)
    assert sbx().public is False


@works("Sandbox.set_autostop_interval", "the record says 30 minutes; a negative one is `DaytonaError`")
def _():
    raises(lambda: sbx().set_autostop_interval(-1), DaytonaError, "a negative interval")
    sbx().set_autostop_interval(30)
    assert sbx().auto_stop_interval == 30


@works("Sandbox.set_auto_pause_interval", "the record says 10 minutes and auto-stop off (one or the other); 0 "
       "turns it off; a negative one is `DaytonaError`")
def _():
    raises(lambda: sbx().set_auto_pause_interval(-1), DaytonaError, "a negative interval")
    sbx().set_auto_pause_interval(10)
    sbx().refresh_data()
    assert (sbx().auto_pause_interval, sbx().auto_stop_interval) == (10, 0), sbx().auto_pause_interval
    sbx().set_auto_pause_interval(0)
    sbx().refresh_data()
    assert sbx().auto_pause_interval == 0


@works("Sandbox.set_auto_archive_interval", "the record says 60 minutes")
def _():
    sbx().set_auto_archive_interval(60)
    assert sbx().auto_archive_interval == 60


@works("Sandbox.set_auto_delete_interval", "the record says 120 minutes")
def _():
    sbx().set_auto_delete_interval(120)
    assert sbx().auto_delete_interval == 120


@works("Sandbox.refresh_activity", "answers without an error")
def _():
    sbx().refresh_activity()


@works("Sandbox.get_preview_link", "a URL and a token for port 8080")
def _():
    link = sbx().get_preview_link(8080)
    assert link.url.startswith("http") and link.token, link


@works("Sandbox.create_signed_preview_url", "a URL with a token for port 8080")
def _():
    signed = sbx().create_signed_preview_url(8080, expires_in_seconds=60)
    assert signed.url.startswith("http") and signed.token and signed.port == 8080, signed
    CTX["signed"] = signed


@works("Sandbox.expire_signed_preview_url", "the signed link is ended")
def _():
    sbx().expire_signed_preview_url(8080, CTX["signed"].token)


@works("Sandbox.upload_url", "a signed URL that uploads a file without a token")
def _():
    url = sbx().upload_url("/home/user/signed.txt", ttl_seconds=60)
    CTX["upload_url"] = url
    assert url.startswith("http"), url


@works("Sandbox.download_url", "a signed URL that downloads the file without a token")
def _():
    url = sbx().download_url("/home/user/signed.txt", ttl_seconds=60)
    sbx().fs.upload_file(b"signed body", "/home/user/signed.txt")
    with urllib.request.urlopen(url, timeout=DEADLINE) as answer:
        assert answer.read() == b"signed body"


@works("Sandbox.rotate_signing_key", "a URL signed before the rotation is refused after it")
def _():
    url = sbx().download_url("/home/user/signed.txt", ttl_seconds=60)
    sbx().rotate_signing_key()
    try:
        urllib.request.urlopen(url, timeout=DEADLINE)
        raise AssertionError("a URL of the old key still downloads")
    except urllib.error.HTTPError as e:
        assert e.code in (401, 403), e.code


@works("Sandbox.update_env", "a later command sees the variable")
def _():
    sbx().update_env({"SURFACE_VAR": "set-later"})
    assert sbx().process.exec("echo $SURFACE_VAR").result.strip() == "set-later"


@works("Sandbox.update_secrets", "`{}` detaches none and is accepted")
def _():
    sbx().update_secrets({})


@works("Sandbox.resize", "memory grows to 2 GiB on the running sandbox")
def _():
    sbx().resize(Resources(memory=2))
    sbx().refresh_data()
    assert sbx().memory == 2, sbx().memory


@works("Sandbox.wait_for_resize_complete", "returns at once (no resize in flight)")
def _():
    sbx().wait_for_resize_complete(timeout=DEADLINE)


@works("Sandbox.stop", "the sandbox is `stopped`", SLOW)
def _():
    other().stop(timeout=SLOW)
    assert other().state == "stopped"


@works("Sandbox.wait_for_sandbox_stop", "returns for a stopped sandbox")
def _():
    other().wait_for_sandbox_stop(timeout=DEADLINE)


@works("Sandbox.start", "the sandbox is `started` again", SLOW)
def _():
    other().start(timeout=SLOW)
    assert other().state == "started"


@works("Sandbox.wait_for_sandbox_start", "returns for a started sandbox")
def _():
    other().wait_for_sandbox_start(timeout=DEADLINE)


@works("Sandbox.pause", "the sandbox is `paused` with its memory; `start` resumes it", SLOW)
def _():
    other().process.exec("nohup sleep 1000 >/dev/null 2>&1 &")
    other().pause(timeout=SLOW)
    assert other().state == "paused", other().state
    other().start(timeout=SLOW)
    assert "sleep 1000" in other().process.exec("ps -eo args").result


@works("Sandbox.create_snapshot", "a snapshot of the sandbox's files, listed by name", SLOW)
def _():
    other().process.exec("echo snap > /home/user/snap.txt")
    other().create_snapshot(f"surface-snap-{RUN}", timeout=SLOW)
    assert D.snapshot.get(f"surface-snap-{RUN}").name == f"surface-snap-{RUN}"


@works("Sandbox.fork", "a new sandbox with the files of the first", SLOW)
def _():
    fork = other().fork(timeout=SLOW)
    try:
        assert fork.id != other().id
        assert fork.process.exec("cat /home/user/snap.txt").result.strip() == "snap"
    finally:
        D.delete(fork)


refused("Sandbox.archive", lambda: sbx().archive(), "archiving is not supported")
refused("Sandbox.recover", lambda: sbx().recover(timeout=DEADLINE), "recover is not supported")
refused("Sandbox.create_ssh_access", lambda: sbx().create_ssh_access(), "SSH access is not supported")
refused("Sandbox.revoke_ssh_access", lambda: sbx().revoke_ssh_access("token"), "SSH access is not supported")
refused("Sandbox.validate_ssh_access", lambda: sbx().validate_ssh_access("token"), "SSH access is not supported")


@works("Sandbox.set_ttl", "`auto_destroy_at` is that many minutes from now; 0 drops it")
def _():
    sbx().set_ttl(600)
    sbx().refresh_data()
    at = datetime.datetime.fromisoformat(sbx().auto_destroy_at.replace("Z", "+00:00"))
    left = (at - datetime.datetime.now(datetime.timezone.utc)).total_seconds()
    assert 600 * 60 - 120 < left <= 600 * 60, left
    sbx().set_ttl(0)
    sbx().refresh_data()
    assert sbx().auto_destroy_at is None, sbx().auto_destroy_at


@works("Sandbox.update_network_settings", "the lists change on the running sandbox and its record shows them; "
       "a domain makes its own forwarder its resolver, empty lists give it the host's back")
def _():
    before = sbx().fs.download_file("/etc/resolv.conf")
    sbx().update_network_settings(network_allow_list="1.1.1.1", domain_allow_list="example.com")
    sbx().refresh_data()
    assert (sbx().network_allow_list, sbx().domain_allow_list) == ("1.1.1.1/32", "example.com")
    assert sbx().fs.download_file("/etc/resolv.conf") != before
    sbx().update_network_settings(network_allow_list="", domain_allow_list="")
    sbx().refresh_data()
    assert (sbx().network_allow_list, sbx().domain_allow_list) == (None, None)
    assert sbx().fs.download_file("/etc/resolv.conf") == before


def _plausible(sample):
    assert sample.cpu_count >= 1 and 0 <= sample.cpu_used_pct <= 100, sample
    assert 0 < sample.mem_used <= sample.mem_total, sample
    age = datetime.datetime.now(datetime.timezone.utc) - sample.timestamp
    assert abs(age.total_seconds()) < 60, sample.timestamp


@works("Sandbox.get_metrics_latest", "a sample taken now: CPUs, CPU share, memory in use under its limit")
def _():
    CTX["latest"] = sbx().get_metrics_latest()
    _plausible(CTX["latest"])


@works("Sandbox.get_metrics", "its history since its creation, oldest first: the latest sample is kept, and "
       "one taken now ends it; a range that ended an hour ago is empty")
def _():
    samples = sbx().get_metrics()
    assert len(samples) >= 2, samples
    assert [s.timestamp for s in samples] == sorted(s.timestamp for s in samples), samples
    assert CTX["latest"].timestamp in [s.timestamp for s in samples], (CTX["latest"], samples)
    _plausible(samples[-1])
    hour_ago = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(hours=1)
    assert sbx().get_metrics(hour_ago - datetime.timedelta(minutes=5), hour_ago) == []


# FileSystem --------------------------------------------------------------------------------

@works("FileSystem.create_folder", "the folder exists; a mode that is not octal is `DaytonaBadRequestError`")
def _():
    try:
        sbx().fs.create_folder("/home/user/bad", "999")
        raise AssertionError("a folder was made with mode 999")
    except DaytonaBadRequestError:
        pass
    sbx().fs.create_folder("/home/user/surf", "755")
    info = sbx().fs.get_file_info("/home/user/surf")
    assert info.is_dir, info


@works("FileSystem.upload_file", "bytes land at the path")
def _():
    sbx().fs.upload_file(b"alpha beta\n", "/home/user/surf/a.txt")


@works("FileSystem.upload_files", "two files land at their paths")
def _():
    sbx().fs.upload_files([FileUpload(b"one\n", "/home/user/surf/b.txt"),
                           FileUpload(b"two\n", "/home/user/surf/c.txt")])


@works("FileSystem.upload_file_stream", "a stream lands at the path")
def _():
    sbx().fs.upload_file_stream(b"streamed\n", "/home/user/surf/d.txt")


@works("FileSystem.download_file", "the uploaded bytes come back")
def _():
    assert sbx().fs.download_file("/home/user/surf/a.txt") == b"alpha beta\n"


@works("FileSystem.download_files", "two files come back in order")
def _():
    got = sbx().fs.download_files([FileDownloadRequest("/home/user/surf/b.txt"),
                                   FileDownloadRequest("/home/user/surf/c.txt")])
    assert [g.result for g in got] == [b"one\n", b"two\n"], got


@works("FileSystem.download_file_stream", "the streamed bytes come back")
def _():
    assert b"".join(sbx().fs.download_file_stream("/home/user/surf/d.txt")) == b"streamed\n"


@works("FileSystem.get_file_info", "size of a file; a missing path is `DaytonaFileNotFoundError`")
def _():
    assert sbx().fs.get_file_info("/home/user/surf/a.txt").size == 11
    try:
        sbx().fs.get_file_info("/home/user/surf/none")
        raise AssertionError("a missing path was found")
    except DaytonaFileNotFoundError:
        pass


@works("FileSystem.list_files", "the folder lists its four files")
def _():
    names = sorted(f.name for f in sbx().fs.list_files("/home/user/surf"))
    assert names == ["a.txt", "b.txt", "c.txt", "d.txt"], names


@works("FileSystem.find_files", "finds the line holding `beta`")
def _():
    found = sbx().fs.find_files("/home/user/surf", "beta")
    assert [m.file for m in found] == ["/home/user/surf/a.txt"], found


@works("FileSystem.search_files", "the glob `*.txt` finds the four files")
def _():
    found = sbx().fs.search_files("/home/user/surf", "*.txt")
    assert len(found.files) == 4, found


@works("FileSystem.replace_in_files", "`beta` becomes `gamma`")
def _():
    sbx().fs.replace_in_files(["/home/user/surf/a.txt"], "beta", "gamma")
    assert sbx().fs.download_file("/home/user/surf/a.txt") == b"alpha gamma\n"


@works("FileSystem.set_file_permissions", "the mode becomes 600")
def _():
    sbx().fs.set_file_permissions("/home/user/surf/a.txt", mode="600")
    assert sbx().fs.get_file_info("/home/user/surf/a.txt").permissions.endswith("600") or \
        sbx().fs.get_file_info("/home/user/surf/a.txt").mode.endswith("rw-------")


@works("FileSystem.move_files", "the file is at its new path only")
def _():
    sbx().fs.move_files("/home/user/surf/d.txt", "/home/user/surf/e.txt")
    names = sorted(f.name for f in sbx().fs.list_files("/home/user/surf"))
    assert names == ["a.txt", "b.txt", "c.txt", "e.txt"], names


@works("FileSystem.delete_file", "the folder is gone (recursive)")
def _():
    sbx().fs.delete_file("/home/user/surf", recursive=True)
    try:
        sbx().fs.get_file_info("/home/user/surf")
        raise AssertionError("a deleted folder was found")
    except DaytonaFileNotFoundError:
        pass


# Process: exec, code, sessions, PTYs ---------------------------------------------------------

@works("Process.exec", "exit code and output, with cwd and env")
def _():
    out = sbx().process.exec("echo $X; pwd; exit 3", cwd="/tmp", env={"X": "y"})
    assert (out.exit_code, out.result) == (3, "y\n/tmp\n"), out


@works("Process.code_run", "python prints its result and sees `env`; an error is a non-zero exit")
def _():
    out = sbx().process.code_run("import os; print(6 * 7, os.environ['W'])", params=CodeRunParams(env={"W": "w"}))
    assert out.exit_code == 0 and out.result.strip() == "42 w", out
    assert sbx().process.code_run("1/0").exit_code != 0


@works("Process.create_session", "the session is listed")
def _():
    sbx().process.create_session("surf")


@works("Process.execute_session_command", "shell state is kept between commands")
def _():
    sbx().process.execute_session_command("surf", SessionExecuteRequest(command="export K=kept"))
    out = sbx().process.execute_session_command("surf", SessionExecuteRequest(command="echo $K"))
    assert out.exit_code == 0 and out.output.strip() == "kept", out
    CTX["cmd"] = out.cmd_id
    CTX["reader"] = sbx().process.execute_session_command(
        "surf", SessionExecuteRequest(command="read line; echo got $line", run_async=True)).cmd_id


@works("Process.get_session", "the session lists its commands; an unknown one is `DaytonaNotFoundError`")
def _():
    try:
        sbx().process.get_session(f"no-such-{RUN}")
        raise AssertionError("an unknown session was found")
    except DaytonaNotFoundError:
        pass
    session = sbx().process.get_session("surf")
    assert session.session_id == "surf" and len(session.commands) == 3, session


@works("Process.list_sessions", "the session is listed")
def _():
    assert "surf" in [s.session_id for s in sbx().process.list_sessions()]


@works("Process.get_session_command", "the command's exit code")
def _():
    assert sbx().process.get_session_command("surf", CTX["cmd"]).exit_code == 0


@works("Process.get_session_command_logs", "the command's output")
def _():
    assert sbx().process.get_session_command_logs("surf", CTX["cmd"]).output.strip() == "kept"


@works("Process.send_session_command_input", "a running command reads the input")
def _():
    sbx().process.send_session_command_input("surf", CTX["reader"], "hello\n")


@works("Process.get_session_command_logs_async", "the followed logs stream the command's output")
def _():
    seen = []
    asyncio.run(sbx().process.get_session_command_logs_async(
        "surf", CTX["reader"], seen.append, seen.append))
    assert "got hello" in "".join(seen), seen


@works("Process.delete_session", "the session is no longer listed")
def _():
    sbx().process.delete_session("surf")
    assert "surf" not in [s.session_id for s in sbx().process.list_sessions()]


refused("Process.get_entrypoint_session", lambda: sbx().process.get_entrypoint_session(),
        "the entrypoint session is not kept")
refused("Process.get_entrypoint_logs", lambda: sbx().process.get_entrypoint_logs(),
        "the entrypoint session is not kept")
# A refused WebSocket upgrade: the SDK shows the status line only, whose reason phrase is our message.
refused("Process.get_entrypoint_logs_async",
        lambda: asyncio.run(sbx().process.get_entrypoint_logs_async(print, print)),
        "501 the entrypoint session is not kept")


@works("Process.create_pty_session", "a PTY with its size runs a shell")
def _():
    CTX["pty"] = sbx().process.create_pty_session("surf-pty", pty_size=PtySize(rows=24, cols=80))


@works("PtyHandle.session_id", "the PTY's id")
def _():
    assert CTX["pty"].session_id == "surf-pty"


@works("PtyHandle.wait_for_connection", "returns once connected")
def _():
    CTX["pty"].wait_for_connection(timeout=DEADLINE)


@works("PtyHandle.is_connected", "true")
def _():
    assert CTX["pty"].is_connected() is True


@works("PtyHandle.send_input", "the shell echoes the input")
def _():
    seen = bytearray()
    CTX["pty"].send_input("echo pty-$((6*7))\n")
    deadline = time.monotonic() + DEADLINE
    while b"pty-42" not in seen:
        assert time.monotonic() < deadline, bytes(seen)
        CTX["pty"].wait(on_data=seen.extend, timeout=1)


@works("PtyHandle.resize", "the PTY's size changes")
def _():
    info = CTX["pty"].resize(PtySize(rows=30, cols=100))
    assert (info.rows, info.cols) == (30, 100), info


@works("Process.list_pty_sessions", "the PTY is listed")
def _():
    assert "surf-pty" in [p.id for p in sbx().process.list_pty_sessions()]


@works("Process.get_pty_session_info", "the PTY's size")
def _():
    info = sbx().process.get_pty_session_info("surf-pty")
    assert (info.rows, info.cols) == (30, 100), info


@works("Process.resize_pty_session", "the PTY's size changes")
def _():
    info = sbx().process.resize_pty_session("surf-pty", PtySize(rows=40, cols=120))
    assert (info.rows, info.cols) == (40, 120), info


@works("PtyHandle.disconnect", "the connection closes; the PTY lives on")
def _():
    CTX["pty"].disconnect()
    assert "surf-pty" in [p.id for p in sbx().process.list_pty_sessions()]


@works("Process.connect_pty_session", "attaches to the PTY again")
def _():
    CTX["pty"] = sbx().process.connect_pty_session("surf-pty")
    CTX["pty"].wait_for_connection(timeout=DEADLINE)


@works("PtyHandle.kill", "the PTY ends")
def _():
    CTX["pty"].kill()


@works("PtyHandle.wait", "the killed PTY's result")
def _():
    CTX["pty"].wait(timeout=DEADLINE)


@works("PtyHandle.exit_code", "an exit code, or none for a killed shell")
def _():
    assert CTX["pty"].exit_code is None or isinstance(CTX["pty"].exit_code, int)


@works("PtyHandle.error", "a string or none")
def _():
    assert CTX["pty"].error is None or isinstance(CTX["pty"].error, str)


@works("Process.kill_pty_session", "the PTY is no longer listed")
def _():
    pty = sbx().process.create_pty_session("surf-pty2")
    pty.disconnect()
    sbx().process.kill_pty_session("surf-pty2")
    deadline = time.monotonic() + DEADLINE
    while "surf-pty2" in [p.id for p in sbx().process.list_pty_sessions() if p.active]:
        assert time.monotonic() < deadline
        time.sleep(0.2)


# Code interpreter ------------------------------------------------------------------------------

@works("CodeInterpreter.run_code", "state is kept between runs; stdout streams")
def _():
    sbx().code_interpreter.run_code("n = 21")
    seen = []
    out = sbx().code_interpreter.run_code("print(n * 2)", on_stdout=lambda m: seen.append(m.output))
    assert out.stdout == "42\n" and "".join(seen) == "42\n", (out, seen)


@works("CodeInterpreter.create_context", "a context with its cwd")
def _():
    CTX["context"] = sbx().code_interpreter.create_context(cwd="/tmp")
    assert CTX["context"].cwd == "/tmp", CTX["context"]


@works("CodeInterpreter.list_contexts", "the context is listed")
def _():
    assert CTX["context"].id in [c.id for c in sbx().code_interpreter.list_contexts()]


@works("CodeInterpreter.delete_context", "the context is no longer listed")
def _():
    sbx().code_interpreter.delete_context(CTX["context"])
    assert CTX["context"].id not in [c.id for c in sbx().code_interpreter.list_contexts()]


# Git (a repository, a bare one as its remote) -----------------------------------------------

REPO, BARE = "/home/user/repo", "/home/user/bare.git"


@works("Git.init", "a repository and a bare one")
def _():
    sbx().git.init(REPO, initial_branch="main")
    sbx().git.init(BARE, bare=True)


@works("Git.configure_user", "the repository's user is set")
def _():
    sbx().git.configure_user("Surface", "surface@example.com", scope="local", path=REPO)


@works("Git.set_config", "a local setting is written")
def _():
    sbx().git.set_config("surface.run", RUN, scope="local", path=REPO)


@works("Git.get_config", "the setting is read back")
def _():
    assert sbx().git.get_config("surface.run", scope="local", path=REPO) == RUN


@works("Git.add", "a new file is staged")
def _():
    sbx().fs.upload_file(b"hello\n", f"{REPO}/hello.txt")
    sbx().git.add(REPO, ["hello.txt"])


@works("Git.status", "the staged file, on branch main; a folder that is no repository is "
       "`DaytonaGitRepoNotFoundError`")
def _():
    try:
        sbx().git.status("/tmp")
        raise AssertionError("/tmp has a git status")
    except DaytonaGitRepoNotFoundError:
        pass
    status = sbx().git.status(REPO)
    assert status.current_branch == "main" and [f.name for f in status.file_status] == ["hello.txt"], status


@works("Git.commit", "a commit hash")
def _():
    assert len(sbx().git.commit(REPO, "first", "Surface", "surface@example.com").sha) >= 7


@works("Git.create_branch", "the branch is listed")
def _():
    sbx().git.create_branch(REPO, "feature")


@works("Git.branches", "main and feature")
def _():
    assert sorted(sbx().git.branches(REPO).branches) == ["feature", "main"]


@works("Git.checkout_branch", "the current branch is feature")
def _():
    sbx().git.checkout_branch(REPO, "feature")
    assert sbx().git.status(REPO).current_branch == "feature"
    sbx().git.checkout_branch(REPO, "main")


@works("Git.delete_branch", "only main is left")
def _():
    sbx().git.delete_branch(REPO, "feature")
    assert sbx().git.branches(REPO).branches == ["main"]


@works("Git.restore", "a changed file is restored from the index")
def _():
    sbx().fs.upload_file(b"changed\n", f"{REPO}/hello.txt")
    sbx().git.restore(REPO, ["hello.txt"])
    assert sbx().fs.download_file(f"{REPO}/hello.txt") == b"hello\n"


@works("Git.reset", "a staged file is unstaged")
def _():
    sbx().fs.upload_file(b"new\n", f"{REPO}/new.txt")
    sbx().git.add(REPO, ["new.txt"])
    sbx().git.reset(REPO, files=["new.txt"])
    assert [f.worktree for f in sbx().git.status(REPO).file_status if f.name == "new.txt"] != []


@works("Git.remote_add", "the bare repository is `origin`")
def _():
    sbx().git.remote_add(REPO, "origin", BARE)


@works("Git.remotes", "origin is listed")
def _():
    assert "origin" in [r.name for r in sbx().git.remotes(REPO).remotes]


@works("Git.remote_get", "origin's URL")
def _():
    assert sbx().git.remote_get(REPO, "origin") == BARE


@works("Git.push", "main reaches the bare repository")
def _():
    sbx().git.push(REPO, branch="main", remote="origin", set_upstream=True)
    out = sbx().process.exec(f"git -C {BARE} log --format=%s main")
    assert out.result.strip() == "first", out


@works("Git.clone", "a clone of the bare repository holds the file")
def _():
    sbx().git.clone(f"file://{BARE}", "/home/user/clone", branch="main")
    assert sbx().fs.download_file("/home/user/clone/hello.txt") == b"hello\n"


@works("Git.pull", "the clone pulls a new commit")
def _():
    sbx().process.exec(
        f"cd {REPO} && echo two > two.txt && git add two.txt && git commit -qm second && git push -q origin main")
    sbx().git.pull("/home/user/clone")
    assert sbx().fs.download_file("/home/user/clone/two.txt") == b"two\n"


@works("Git.dangerously_authenticate", "the credentials are stored in the user's store")
def _():
    sbx().git.dangerously_authenticate("surface", "not-a-secret", host="git.example.com")
    out = sbx().process.exec("cat /home/user/.git-credentials")
    assert "git.example.com" in out.result, out


# Language servers ------------------------------------------------------------------------------
# pylsp and typescript-language-server are the host's, which a sandbox of `base` sees under /usr
# (scripts/lsp-servers installs them).

LSP_DIR = "/home/user/lsp"
LSP_PY = ("import os\n\n\nclass Greeter:\n    def hello(self):\n        return os.getcwd()\n\n\n"
          "def main():\n    Greeter().hel\n")
LSP_TS = ("export class Greeter {\n  hello(): string {\n    return 'hi'\n  }\n}\n\n"
          "export function main(): string {\n  return new Greeter().hello()\n}\n")


def lsp():
    return CTX["lsp"]


def raises(call, cls, what):
    try:
        call()
    except cls:
        return
    raise AssertionError(f"{what}: no {cls.__name__}")


@works("LspServer.start", "pylsp answers; starting it again is a no-op; an unknown language and a "
       "missing project are `DaytonaBadRequestError`", SLOW)
def _():
    sbx().fs.create_folder(LSP_DIR, "755")
    sbx().fs.upload_file(LSP_PY.encode(), f"{LSP_DIR}/app.py")
    sbx().fs.upload_file(LSP_TS.encode(), f"{LSP_DIR}/app.ts")
    raises(lambda: sbx().create_lsp_server("cobol", LSP_DIR).start(), DaytonaBadRequestError, "cobol")
    raises(lambda: sbx().create_lsp_server("python", f"{LSP_DIR}/none").start(), DaytonaBadRequestError,
           "a missing project")
    lsp().start()
    lsp().start()


@works("LspServer.did_open", "the file is open; a missing one is `DaytonaNotFoundError`")
def _():
    raises(lambda: lsp().did_open(f"{LSP_DIR}/missing.py"), DaytonaNotFoundError, "a missing file")
    lsp().did_open(f"{LSP_DIR}/app.py")


@works("LspServer.completions", "`hello()` is offered after `Greeter().hel`, inserting `hello`")
def _():
    items = lsp().completions(f"{LSP_DIR}/app.py", LspCompletionPosition(line=9, character=17)).items
    assert any(i.label.startswith("hello") and i.insert_text == "hello" for i in items), items


@works("LspServer.document_symbols", "`Greeter`, `hello` and `main`, each on its line")
def _():
    lines = {s.name: s.location.range.start.line for s in lsp().document_symbols(f"{LSP_DIR}/app.py")}
    assert (lines.get("Greeter"), lines.get("hello"), lines.get("main")) == (3, 4, 8), lines


@works("LspServer.sandbox_symbols", "typescript-language-server finds `Greeter` in the project's .ts "
       "file; pylsp, which offers none, is `DaytonaBadRequestError`", SLOW)
def _():
    CTX["ts"] = sbx().create_lsp_server("typescript", LSP_DIR)
    CTX["ts"].start()
    CTX["ts"].did_open(f"{LSP_DIR}/app.ts")
    found = CTX["ts"].sandbox_symbols("Greeter")
    assert any(s.name == "Greeter" and s.location.uri.endswith("/app.ts") for s in found), found
    raises(lambda: lsp().sandbox_symbols("Greeter"), DaytonaBadRequestError, "pylsp's workspace symbols")


@works("LspServer.workspace_symbols", "(deprecated alias) `main` is found")
def _():
    assert any(s.name == "main" for s in CTX["ts"].workspace_symbols("main"))


@works("LspServer.did_close", "the file is closed")
def _():
    lsp().did_close(f"{LSP_DIR}/app.py")


@works("LspServer.stop", "the server exits: a call then is `DaytonaNotFoundError`; stopping again "
       "is a no-op")
def _():
    lsp().stop()
    raises(lambda: lsp().document_symbols(f"{LSP_DIR}/app.py"), DaytonaNotFoundError, "a stopped server")
    lsp().stop()
    CTX["ts"].stop()


# Computer use: refused ------------------------------------------------------------------------


def cu():
    return sbx().computer_use


CU = "computer use (a desktop) is not supported"
for name, call in {
    "ComputerUse.start": lambda: cu().start(),
    "ComputerUse.stop": lambda: cu().stop(),
    "ComputerUse.get_status": lambda: cu().get_status(),
    "ComputerUse.get_process_status": lambda: cu().get_process_status("xvfb"),
    "ComputerUse.restart_process": lambda: cu().restart_process("xvfb"),
    "ComputerUse.get_process_logs": lambda: cu().get_process_logs("xvfb"),
    "ComputerUse.get_process_errors": lambda: cu().get_process_errors("xvfb"),
    "Mouse.get_position": lambda: cu().mouse.get_position(),
    "Mouse.move": lambda: cu().mouse.move(1, 1),
    "Mouse.down": lambda: cu().mouse.down(1, 1),
    "Mouse.up": lambda: cu().mouse.up(1, 1),
    "Mouse.click": lambda: cu().mouse.click(1, 1),
    "Mouse.drag": lambda: cu().mouse.drag(1, 1, 2, 2),
    "Mouse.scroll": lambda: cu().mouse.scroll(1, 1, "down"),
    "Keyboard.type": lambda: cu().keyboard.type("x"),
    "Keyboard.press": lambda: cu().keyboard.press("a"),
    "Keyboard.hotkey": lambda: cu().keyboard.hotkey("ctrl+c"),
    "Keyboard.down": lambda: cu().keyboard.down("a"),
    "Keyboard.up": lambda: cu().keyboard.up("a"),
    "Screenshot.take_full_screen": lambda: cu().screenshot.take_full_screen(),
    "Screenshot.take_region": lambda: cu().screenshot.take_region(ScreenshotRegion(x=0, y=0, width=1, height=1)),
    "Screenshot.take_compressed": lambda: cu().screenshot.take_compressed(),
    "Screenshot.take_compressed_region":
        lambda: cu().screenshot.take_compressed_region(ScreenshotRegion(x=0, y=0, width=1, height=1)),
    "Display.get_info": lambda: cu().display.get_info(),
    "Display.get_windows": lambda: cu().display.get_windows(),
    "RecordingService.start": lambda: cu().recording.start(),
    "RecordingService.stop": lambda: cu().recording.stop("rec"),
    "RecordingService.list": lambda: cu().recording.list(),
    "RecordingService.get": lambda: cu().recording.get("rec"),
    "RecordingService.delete": lambda: cu().recording.delete("rec"),
    "RecordingService.download": lambda: cu().recording.download("rec", f"/tmp/surface-{RUN}.mp4"),
    "Accessibility.get_tree": lambda: cu().accessibility.get_tree(),
    "Accessibility.find_nodes": lambda: cu().accessibility.find_nodes(role="button"),
    "Accessibility.focus_node": lambda: cu().accessibility.focus_node("n"),
    "Accessibility.invoke_node": lambda: cu().accessibility.invoke_node("n"),
    "Accessibility.set_node_value": lambda: cu().accessibility.set_node_value("n", "v"),
}.items():
    # The download streams with httpx, whose error shows the status line only, whose reason phrase
    # is our message.
    refused(name, call, CU)


# Snapshots, volumes, secrets, warm pools ---------------------------------------------------

@works("SnapshotService.list", "the sandbox's snapshot and the default one are listed")
def _():
    names = {s.name for s in D.snapshot.list().items}
    assert {"code-interpreter-v1", f"surface-snap-{RUN}"} <= names, names


@works("SnapshotService.get", "by name; an unknown name is `DaytonaNotFoundError`")
def _():
    assert D.snapshot.get("code-interpreter-v1").state == "active"
    try:
        D.snapshot.get(f"no-such-{RUN}")
        raise AssertionError("an unknown snapshot was found")
    except DaytonaNotFoundError:
        pass


@works("SnapshotService.activate", "an active snapshot stays active")
def _():
    assert D.snapshot.activate(D.snapshot.get(f"surface-snap-{RUN}")).state == "active"


@works("SnapshotService.create", "a snapshot from an image string is `active`", SLOW)
def _():
    made = D.snapshot.create(CreateSnapshotParams(name=f"surface-img-{RUN}", image=IMAGE),
                             timeout=SLOW)
    assert made.state == "active", made.state


@works("SnapshotService.process_image_context", "an image without local files has no context")
def _():
    assert D.snapshot.process_image_context(None, Image.base("busybox:latest")) == []


@works("SnapshotService.delete", "both snapshots are gone")
def _():
    D.snapshot.delete(D.snapshot.get(f"surface-img-{RUN}"))
    D.snapshot.delete(f"surface-snap-{RUN}")
    names = {s.name for s in D.snapshot.list().items}
    assert not {f"surface-img-{RUN}", f"surface-snap-{RUN}"} & names, names


@works("VolumeService.create", "a volume with its name")
def _():
    CTX["volume"] = D.volume.create(f"surface-vol-{RUN}")
    assert CTX["volume"].name == f"surface-vol-{RUN}"


@works("VolumeService.get", "by name; an unknown name is `DaytonaNotFoundError`")
def _():
    assert D.volume.get(f"surface-vol-{RUN}").id == CTX["volume"].id
    try:
        D.volume.get(f"no-such-{RUN}")
        raise AssertionError("an unknown volume was found")
    except DaytonaNotFoundError:
        pass


@works("VolumeService.list", "the volume is listed")
def _():
    assert CTX["volume"].id in [v.id for v in D.volume.list()]


@works("VolumeService.delete", "the volume is no longer listed")
def _():
    D.volume.delete(CTX["volume"])
    deadline = time.monotonic() + DEADLINE
    while CTX["volume"].id in [v.id for v in D.volume.list() if v.state != "deleted"]:
        assert time.monotonic() < deadline
        time.sleep(0.2)


@works("SecretService.create", "a secret with its placeholder")
def _():
    CTX["secret"] = D.secret.create(CreateSecretParams(name=f"surface_{RUN}", value="v", hosts=["a.test"]))
    assert CTX["secret"].placeholder, CTX["secret"]


@works("SecretService.get", "by id; an unknown id is the generated client's `NotFoundException` "
       "(this service of the SDK does not wrap its errors)")
def _():
    assert D.secret.get(CTX["secret"].id).name == f"surface_{RUN}"
    try:
        D.secret.get(str(uuid.uuid4()))
        raise AssertionError("an unknown secret was found")
    except NotFoundException:
        pass


@works("SecretService.list", "the secret is listed by name")
def _():
    assert [s.id for s in D.secret.list(name=f"surface_{RUN}").items] == [CTX["secret"].id]


@works("SecretService.update", "the hosts change")
def _():
    assert D.secret.update(CTX["secret"].id, UpdateSecretParams(hosts=["b.test"])).hosts == ["b.test"]


@works("SecretService.delete", "the secret is gone")
def _():
    D.secret.delete(CTX["secret"].id)
    assert [s.id for s in D.secret.list(name=f"surface_{RUN}").items] == []


@works("WarmPoolService.create", "a pool of 1 for `base`")
def _():
    assert D.warm_pool.create("base", pool=1).pool == 1


@works("WarmPoolService.list", "the pool is listed")
def _():
    assert "base" in [p.snapshot for p in D.warm_pool.list()]


@works("WarmPoolService.update", "the pool's size becomes 2")
def _():
    assert D.warm_pool.update("base", pool=2).pool == 2


@works("WarmPoolService.delete", "the pool is no longer listed; an unknown one is the generated "
       "client's `NotFoundException` (this service of the SDK does not wrap its errors)")
def _():
    D.warm_pool.delete("base")
    assert "base" not in [p.snapshot for p in D.warm_pool.list()]
    try:
        D.warm_pool.delete("base")
        raise AssertionError("a deleted pool was deleted again")
    except NotFoundException:
        pass


# The end: the sandboxes go ---------------------------------------------------------------------

@works("Sandbox.delete", "the sandbox is gone: `DaytonaNotFoundError`", SLOW)
def _():
    other().delete(timeout=SLOW, wait=True)
    try:
        D.get(other().id)
        raise AssertionError("a deleted sandbox was found")
    except DaytonaNotFoundError:
        pass


@works("Daytona.delete", "the sandbox is gone: `DaytonaNotFoundError`", SLOW)
def _():
    D.delete(sbx(), timeout=SLOW, wait=True)
    try:
        D.get(sbx().id)
        raise AssertionError("a deleted sandbox was found")
    except DaytonaNotFoundError:
        pass


# ---------------------------------------------------------------------------------------------

def under_deadline(fn, seconds):
    """`fn()` on a daemon thread: ("ok", value) | ("raised", exception) | ("timeout", None)."""
    box = {}

    def run():
        try:
            box["ok"] = fn()
        except BaseException as e:  # noqa: BLE001 - reported, never swallowed
            box["raised"] = e

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        return "timeout", None
    if "raised" in box:
        return "raised", box["raised"]
    return "ok", box.get("ok")


def one_line(text):
    """`text` on one line for a table cell, the run's ids and address written as placeholders."""
    text = " ".join(str(text).split()).replace("|", "\\|")
    for key, placeholder in (("sbx", "{id}"), ("other", "{id}")):
        if key in CTX:
            text = text.replace(CTX[key].id, placeholder)
    return text.replace(os.environ.get("DAYTONA_API_URL", "\0"), "{api}")


def main():
    global D
    D = Daytona()
    found = surface()
    mirrored = async_twins()
    failures, rows = [], {}
    for name in sorted(found - ENTRIES.keys()):
        failures.append(f"{name}: new method, classify it")
    for name in sorted(ENTRIES.keys() - found):
        failures.append(f"{name}: an entry for a method the SDK does not have")
    try:
        for name, (column, text, call, deadline, error, says) in ENTRIES.items():
            if name not in found:
                continue
            started = time.monotonic()
            outcome, value = under_deadline(call, deadline)
            took = time.monotonic() - started
            if outcome == "timeout":
                failures.append(f"{name}: no answer within {deadline} s")
            elif column == "works" and outcome == "raised":
                failures.append(f"{name}: {type(value).__name__}: {value}")
            elif column == "works":
                rows[name] = ("works", text)
            elif outcome == "ok":
                failures.append(f"{name}: expected to be refused, answered {value!r}")
            elif not isinstance(value, error) or says not in str(value):
                failures.append(f"{name}: refused with {type(value).__module__}.{type(value).__name__}: {value}")
            elif took > 5:
                failures.append(f"{name}: refused only after {took:.1f} s")
            else:
                rows[name] = ("refused", f"`{type(value).__name__}`: {one_line(value)}")
            print(f"{'ok  ' if name in rows else 'FAIL'} {name}", flush=True)
    finally:
        cleanup()
    for failure in failures:
        print("FAIL", failure)
    table = render(rows, mirrored)
    compare(table)
    if failures:
        print(f"{len(failures)} failures")
        sys.exit(1)
    print("surface: ok")


def render(rows, mirrored):
    works_n = sum(1 for c, _ in rows.values() if c == "works")
    refused_n = sum(1 for c, _ in rows.values() if c == "refused")
    lines = [
        f"# `daytona` {importlib.metadata.version('daytona')} (Python) against sandboxd",
        "",
        f"works {works_n}, refused {refused_n}",
        "",
        "Generated by `tests/daytona/test_surface.py` (run by `crates/sandboxd/tests/daytona_surface.rs`);",
        "edit the script, not this file (`SURFACE_UPDATE=1` rewrites it).",
        "",
        "- Listed by introspection: the public methods and properties of the sync classes "
        + ", ".join(f"`{c}`" for cs in SYNC.values() for c in cs)
        + ", those the class or a base class of the `daytona` package defines (so not `Sandbox`'s"
        " pydantic and generated-model helpers such as `to_dict` or `model_dump`).",
        "- The async twins (" + ", ".join(f"`{m}`" for m in mirrored) + ") have exactly the same"
        " public methods (checked by name on every run) and are not called again, but for "
        + "; ".join(f"`{t}.{m}`, which {why}" for t, ms in ASYNC_ONLY.items() for m, why in ms.items())
        + ".",
        "- Left out: " + "; ".join(f"`{k}`, {v}" for k, v in LEFT_OUT.items()) + ".",
        "- Every call runs under a deadline (30 s; creates, start, stop, pause, fork and snapshots"
        " 120 s, the first create 300 s); a refused call must raise the SDK's `DaytonaError` (or a subclass) within 5 s.",
        "- API version: this SDK speaks Daytona's one REST API (`DAYTONA_API_URL`, optional"
        " `DAYTONA_ORGANIZATION_ID`, `DAYTONA_TARGET`); it has no `v2` client, project id or"
        " `DAYTONA_V2_API_URL` (its only \"v2\" is the toolbox's `files/upload-v2` route).",
        "",
        "| Class.method | column | what is asserted, or the error and its message |",
        "|---|---|---|",
    ]
    for name in sorted(rows):
        column, text = rows[name]
        lines.append(f"| `{name}` | {column} | {text} |")
    return "\n".join(lines) + "\n"


def compare(table):
    os.makedirs(os.path.dirname(TABLE), exist_ok=True)
    if os.environ.get("SURFACE_UPDATE") == "1":
        with open(TABLE, "w") as f:
            f.write(table)
        return
    current = open(TABLE).read() if os.path.exists(TABLE) else ""
    if current != table:
        with open(TABLE + ".new", "w") as f:
            f.write(table)
        print(f"FAIL the table differs from {TABLE}: the run's is {TABLE}.new")
        sys.exit(1)


def cleanup():
    """Deletes what the run made, whatever failed."""
    for key in ("other", "sbx"):
        if key in CTX:
            try:
                D.delete(CTX[key], timeout=SLOW)
            except DaytonaError:
                pass
    for name in (f"surface-snap-{RUN}", f"surface-img-{RUN}"):
        try:
            D.snapshot.delete(name)
        except DaytonaError:
            pass
    try:
        D.warm_pool.delete("base")
    except Exception:  # noqa: BLE001 - the pool may be gone already
        pass
    for sandbox in D.list(ListSandboxesQuery(labels={"surface": RUN})):
        try:
            D.delete(sandbox, timeout=SLOW)
        except DaytonaError:
            pass


if __name__ == "__main__":
    import importlib.metadata
    main()
