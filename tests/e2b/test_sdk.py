#!/usr/bin/env python3
"""Acceptance test: the real, unmodified `e2b` Python SDK against a sandboxd daemon.

Environment (as a user would set it):
  E2B_API_URL      http://127.0.0.1:PORT   the daemon's listener (control API)
  E2B_SANDBOX_URL  http://127.0.0.1:PORT   the same listener (envd and ports, routed by E2b-Sandbox-* headers)
  E2B_API_KEY      a daemon token
  E2B_DOMAIN       unset

Run: `python test_sdk.py` (exit status 0 = every check passed) or `pytest test_sdk.py`.

Every sandbox a check creates carries a unique metadata value, because the daemon deduplicates identical
create bodies for 10 seconds.
"""

import atexit
import os
import sys
import time
import traceback
import uuid

import requests

from e2b import (
    CommandExitException,
    PtySize,
    Sandbox,
    SandboxNotRunningException,
    SandboxQuery,
    Volume,
)
from e2b.sandbox.sandbox_api import SandboxState

RUN = uuid.uuid4().hex[:12]
API_URL = os.environ.get("E2B_API_URL", "")
_created = []


def new_sandbox(purpose, **kwargs):
    metadata = {"suite": "sdk-py", "run": RUN, "purpose": purpose}
    metadata.update(kwargs.pop("metadata", {}))
    sbx = Sandbox.create(metadata=metadata, **kwargs)
    _created.append(sbx.sandbox_id)
    return sbx


# --- control API and commands ------------------------------------------------------------------


def test_create_with_metadata_and_envs():
    sbx = new_sandbox("create", envs={"GREETING": "hello from env", "OTHER": "2"})
    try:
        info = sbx.get_info()
        assert info.sandbox_id == sbx.sandbox_id
        assert info.metadata["purpose"] == "create", info.metadata
        assert info.state == SandboxState.RUNNING
        assert info.template_id == "base"
        r = sbx.commands.run("echo $GREETING-$OTHER")
        assert r.stdout == "hello from env-2\n", repr(r.stdout)
        # Per-command envs on top of the sandbox's.
        r = sbx.commands.run("echo $GREETING $EXTRA", envs={"EXTRA": "x"})
        assert r.stdout == "hello from env x\n", repr(r.stdout)
        assert sbx.is_running()
    finally:
        sbx.kill()


def test_commands_run_foreground():
    sbx = new_sandbox("commands")
    try:
        r = sbx.commands.run("echo out; echo err >&2; pwd")
        assert r.exit_code == 0
        assert r.stdout == "out\n/home/user\n", repr(r.stdout)
        assert r.stderr == "err\n", repr(r.stderr)
        r = sbx.commands.run("pwd", cwd="/tmp")
        assert r.stdout == "/tmp\n", repr(r.stdout)
        r = sbx.commands.run("whoami", user="root")
        assert r.stdout == "root\n", repr(r.stdout)
        seen = []
        sbx.commands.run("for i in 1 2 3; do echo $i; done", on_stdout=seen.append)
        assert "".join(seen) == "1\n2\n3\n", seen
        try:
            sbx.commands.run("echo partial; echo failing >&2; exit 3")
        except CommandExitException as e:
            assert e.exit_code == 3, e.exit_code
            assert e.stdout == "partial\n", repr(e.stdout)
            assert e.stderr == "failing\n", repr(e.stderr)
        else:
            raise AssertionError("a non-zero exit must raise CommandExitException")
    finally:
        sbx.kill()


def test_files():
    sbx = new_sandbox("files")
    try:
        info = sbx.files.write("/home/user/notes.txt", "line one\nline two\n")
        assert info.path == "/home/user/notes.txt", info
        assert sbx.files.read("/home/user/notes.txt") == "line one\nline two\n"
        payload = bytes(range(256)) * 64
        sbx.files.write("/home/user/blob.bin", payload)
        got = sbx.files.read("/home/user/blob.bin", format="bytes")
        assert bytes(got) == payload, len(got)
        # A relative path is relative to the user's home.
        assert sbx.files.read("notes.txt") == "line one\nline two\n"

        assert sbx.files.make_dir("/home/user/dir/sub") is True
        assert sbx.files.make_dir("/home/user/dir/sub") is False, "already exists"
        sbx.files.write("/home/user/dir/a.txt", "a")
        names = sorted(e.name for e in sbx.files.list("/home/user/dir"))
        assert names == ["a.txt", "sub"], names
        kinds = {e.name: e.type.value for e in sbx.files.list("/home/user/dir")}
        assert kinds == {"a.txt": "file", "sub": "dir"}, kinds

        moved = sbx.files.rename("/home/user/dir/a.txt", "/home/user/dir/b.txt")
        assert moved.path == "/home/user/dir/b.txt", moved
        assert not sbx.files.exists("/home/user/dir/a.txt")
        assert sbx.files.exists("/home/user/dir/b.txt")
        assert sbx.files.read("/home/user/dir/b.txt") == "a"
        sbx.files.remove("/home/user/dir/b.txt")
        assert not sbx.files.exists("/home/user/dir/b.txt")
        sbx.files.remove("/home/user/dir")
        assert not sbx.files.exists("/home/user/dir")
        # Files written by the SDK are seen by commands, and the other way round.
        sbx.commands.run("echo from-shell > /home/user/shell.txt")
        assert sbx.files.read("/home/user/shell.txt") == "from-shell\n"
    finally:
        sbx.kill()


def test_get_host_reaches_a_server_in_the_sandbox():
    sbx = new_sandbox("host")
    try:
        sbx.commands.run("mkdir -p /tmp/www && echo served-by-sandbox > /tmp/www/index.html")
        sbx.commands.run(
            "cd /tmp/www && nohup python3 -m http.server 8000 >/dev/null 2>&1 &"
        )
        host = sbx.get_host(8000)
        assert host.startswith(f"8000-{sbx.sandbox_id}."), host
        # With E2B_SANDBOX_URL set, get_host names `{port}-{id}.{domain}` where domain is the daemon's
        # `domain:port`. `*.localhost` does not resolve everywhere, so connect to the daemon and send
        # the host as the Host header, as a resolver or reverse proxy would.
        daemon = os.environ["E2B_SANDBOX_URL"].rstrip("/")
        body = None
        deadline = time.time() + 15
        while time.time() < deadline:
            r = requests.get(f"{daemon}/index.html", headers={"Host": host}, timeout=5)
            if r.status_code == 200:
                body = r.text
                break
            time.sleep(0.2)
        assert body == "served-by-sandbox\n", body
        # The E2B headers route the same way.
        r = requests.get(
            f"{daemon}/index.html",
            headers={"E2b-Sandbox-Id": sbx.sandbox_id, "E2b-Sandbox-Port": "8000"},
            timeout=5,
        )
        assert r.status_code == 200 and r.text == "served-by-sandbox\n", (r.status_code, r.text)
    finally:
        sbx.kill()


def test_set_timeout_and_metrics():
    sbx = new_sandbox("timeout", timeout=60)
    try:
        before = sbx.get_info().end_at
        sbx.set_timeout(1800)
        after = sbx.get_info().end_at
        assert (after - before).total_seconds() > 1500, (before, after)
        sbx.set_timeout(120)
        assert sbx.get_info().end_at < after
        metrics = sbx.get_metrics()
        assert len(metrics) >= 1, metrics
        m = metrics[-1]
        assert m.cpu_count >= 1 and m.mem_total > 0 and m.mem_used > 0, m
    finally:
        sbx.kill()


def test_list_with_metadata_filter_and_paging():
    tag = f"list-{RUN}"
    ids = set()
    for i in range(3):
        ids.add(new_sandbox("list", metadata={"listing": tag, "i": str(i)}).sandbox_id)
    other = new_sandbox("list", metadata={"listing": f"other-{RUN}"})
    try:
        paginator = Sandbox.list(query=SandboxQuery(metadata={"listing": tag}), limit=2)
        pages = []
        while paginator.has_next:
            pages.append(paginator.next_items())
        assert [len(p) for p in pages] == [2, 1], [len(p) for p in pages]
        listed = {s.sandbox_id for p in pages for s in p}
        assert listed == ids, (listed, ids)
        for s in (s for p in pages for s in p):
            assert s.metadata["listing"] == tag
            assert s.state == SandboxState.RUNNING
        # Special characters survive the SDK's encoding of the filter.
        odd = new_sandbox("list", metadata={"odd key": "a&b=c d"})
        found = Sandbox.list(query=SandboxQuery(metadata={"odd key": "a&b=c d", "run": RUN}))
        assert [s.sandbox_id for s in found.next_items()] == [odd.sandbox_id]
        running = Sandbox.list(
            query=SandboxQuery(metadata={"listing": tag}, state=[SandboxState.PAUSED])
        ).next_items()
        assert running == [], running
    finally:
        for sid in ids | {other.sandbox_id}:
            Sandbox.kill(sid)


def test_pause_and_resume_keep_processes():
    sbx = new_sandbox("pause")
    try:
        r = sbx.commands.run("nohup sleep 1000 >/dev/null 2>&1 & echo $!")
        pid = r.stdout.strip()
        assert pid.isdigit(), r.stdout
        sbx.commands.run("echo kept > /tmp/state.txt")
        pause = getattr(sbx, "pause", None) or sbx.beta_pause
        assert pause() is True
        info = Sandbox.get_info(sbx.sandbox_id)
        assert info.state == SandboxState.PAUSED, info.state
        paused = Sandbox.list(
            query=SandboxQuery(metadata={"run": RUN, "purpose": "pause"}, state=[SandboxState.PAUSED])
        ).next_items()
        assert [s.sandbox_id for s in paused] == [sbx.sandbox_id]
        assert pause() is False, "pausing a paused sandbox reports False"

        resumed = Sandbox.connect(sbx.sandbox_id, timeout=300)
        assert resumed.sandbox_id == sbx.sandbox_id
        assert Sandbox.get_info(sbx.sandbox_id).state == SandboxState.RUNNING
        r = resumed.commands.run(f"kill -0 {pid} && echo alive")
        assert r.stdout == "alive\n", "the process started before the pause survives"
        assert resumed.files.read("/tmp/state.txt") == "kept\n"
        # connect() on a running sandbox just hands it back.
        again = sbx.connect()
        assert again.commands.run("echo ok").stdout == "ok\n"
    finally:
        sbx.kill()


# Whether a `sleep 4242` runs in the sandbox (the pattern does not match the grep itself; a pid of
# an earlier boot may be reused, so the process is known by its argument).
SLEEPER_ALIVE = (
    "for c in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $c; echo; done 2>/dev/null"
    " | grep -q 'sleep 424[2]' && echo alive || echo gone"
)


def test_filesystem_pause_reboots_from_files():
    # pause(mode="filesystem") keeps only the files: the sandbox is listed paused, a second pause
    # reports False, and connect() boots it again on them: what it wrote is there, what ran is gone.
    sbx = new_sandbox("fs-pause")
    try:
        sbx.commands.run("echo kept > /home/user/state.txt")
        sbx.commands.run("nohup sleep 4242 >/dev/null 2>&1 &")
        assert sbx.commands.run(SLEEPER_ALIVE).stdout == "alive\n"
        assert sbx.pause(mode="filesystem") is True
        assert Sandbox.get_info(sbx.sandbox_id).state == SandboxState.PAUSED
        assert sbx.pause(mode="filesystem") is False, "pausing a paused sandbox reports False"
        resumed = Sandbox.connect(sbx.sandbox_id, timeout=300)
        assert Sandbox.get_info(sbx.sandbox_id).state == SandboxState.RUNNING
        assert resumed.files.read("/home/user/state.txt") == "kept\n"
        assert resumed.commands.run(SLEEPER_ALIVE).stdout == "gone\n", "a cold boot"
    finally:
        sbx.kill()


def served(host, path="/who"):
    """What the sandbox server behind `host` (`{port}-{id}.{domain}`) answers at `path`."""
    daemon = os.environ["E2B_SANDBOX_URL"].rstrip("/")
    deadline = time.time() + 15
    while time.time() < deadline:
        r = requests.get(f"{daemon}{path}", headers={"Host": host}, timeout=5)
        if r.status_code == 200:
            return r.text
        time.sleep(0.2)
    return None


def test_fork():
    # On the gVisor tier (E2B_TIER=gvisor) fork(count=3) gives three sandboxes that go on from the
    # source's memory and files, diverge on their own and serve on their own ports; the source is
    # untouched. On the namespace tier a fork is refused, naming the tier that forks.
    sbx = new_sandbox("fork")
    try:
        if os.environ.get("E2B_TIER") != "gvisor":
            try:
                results = sbx.fork(count=1)
            except Exception as e:  # noqa: BLE001 - the refusal is the point
                assert "gvisor" in str(e), e
            else:
                raise AssertionError(f"a namespace sandbox forked: {results}")
            return
        sbx.commands.run("echo source > /home/user/mark")
        sbx.commands.run(
            "nohup sh -c 'i=0; while :; do i=$((i+1)); echo $i > /tmp/count.new; mv /tmp/count.new /tmp/count; sleep 0.05; done' "
            ">/dev/null 2>&1 &"
        )
        time.sleep(0.5)
        forks = sbx.fork(count=3, timeout=120)
        assert len(forks) == 3, forks
        for f in forks:
            assert isinstance(f, Sandbox), f
            _created.append(f.sandbox_id)
        ids = {f.sandbox_id for f in forks}
        assert len(ids) == 3 and sbx.sandbox_id not in ids, ids
        for i, f in enumerate(forks):
            assert f.files.read("/home/user/mark") == "source\n"
            assert int(f.commands.run("cat /tmp/count").stdout) > 0, "the fork counts on"
            assert f.commands.run("cat /run/sandboxd/generation").stdout == "1\n"
            f.files.write("/home/user/mark", f"fork {i}\n")
            f.commands.run(f"cd /tmp && echo {i} > who && (nohup python3 -m http.server 8000 >/dev/null 2>&1 &)")
        for i, f in enumerate(forks):
            assert f.files.read("/home/user/mark") == f"fork {i}\n", "forks diverge on their own"
            assert served(f.get_host(8000)) == f"{i}\n", f"fork {i} serves on its own port"
        assert sbx.files.read("/home/user/mark") == "source\n", "the source is untouched"
        assert Sandbox.get_info(sbx.sandbox_id).state == SandboxState.RUNNING
    finally:
        sbx.kill()


def test_timeout_pauses_and_a_command_resumes():
    # lifecycle on_timeout "pause": the timeout pauses the sandbox in place instead of killing it, and
    # with auto_resume the next command resumes it, with the process started before still alive.
    lifecycle = {"on_timeout": "pause", "auto_resume": True}
    sbx = new_sandbox("autopause", timeout=2, lifecycle=lifecycle)
    try:
        assert sbx.get_info().lifecycle == lifecycle, sbx.get_info().lifecycle
        pid = sbx.commands.run("nohup sleep 1000 >/dev/null 2>&1 & echo $!").stdout.strip()
        assert pid.isdigit(), pid
        state = lambda: Sandbox.get_info(sbx.sandbox_id).state  # noqa: E731
        deadline = time.time() + 8
        while time.time() < deadline and state() != SandboxState.PAUSED:
            time.sleep(0.3)
        assert state() == SandboxState.PAUSED, "not paused 8 s after a 2 s timeout"
        time.sleep(1.5)  # past its deadline and another expiry sweep: kept, still paused
        assert state() == SandboxState.PAUSED
        r = sbx.commands.run(f"kill -0 {pid} && echo alive")
        assert r.stdout == "alive\n", "the command resumed the sandbox and its process survived"
        assert state() == SandboxState.RUNNING
    finally:
        sbx.kill()


def test_a_pause_ends_a_command_in_flight():
    # A command running when the timeout pauses the sandbox does not hold the SDK until its own
    # timeout: the paused sandbox's connections end (as the vendor's do), the SDK finds it not
    # running (SandboxNotRunningException, its own check) at once, and the command goes on after
    # a resume. Without the cut, the SDK would wait the command's 120 s and raise its plain timeout.
    lifecycle = {"on_timeout": "pause", "auto_resume": False}
    sbx = new_sandbox("pause-in-flight", timeout=3, lifecycle=lifecycle)
    try:
        waits = "touch /tmp/ran; until [ -e /tmp/go ]; do sleep 0.1; done; echo went-on > /tmp/went-on"
        try:
            sbx.commands.run(waits, timeout=120, request_timeout=120)
            raise AssertionError("the command ended although its sandbox was paused")
        except SandboxNotRunningException:
            pass
        assert Sandbox.get_info(sbx.sandbox_id).state == SandboxState.PAUSED
        resumed = Sandbox.connect(sbx.sandbox_id, timeout=300)
        assert resumed.commands.run("cat /tmp/ran && echo ran").stdout == "ran\n"
        resumed.commands.run("touch /tmp/go")
        deadline = time.time() + 30
        while time.time() < deadline:
            if resumed.commands.run("cat /tmp/went-on 2>/dev/null || true").stdout == "went-on\n":
                break
            time.sleep(0.2)
        else:
            raise AssertionError("the paused command did not go on after the resume")
    finally:
        sbx.kill()


def test_kill():
    sbx = new_sandbox("kill")
    assert sbx.is_running()
    assert sbx.kill() is True
    assert Sandbox.kill(sbx.sandbox_id) is False, "a second kill reports False"
    assert sbx.is_running() is False
    try:
        Sandbox.get_info(sbx.sandbox_id)
    except Exception as e:  # noqa: BLE001
        assert "not found" in str(e).lower(), e
    else:
        raise AssertionError("get_info of a killed sandbox must fail")


def test_timeout_expiry():
    # A sandbox whose timeout runs out is killed by the daemon: gone for every SDK call.
    sbx = new_sandbox("expiry", timeout=3)
    assert sbx.commands.run("echo alive").stdout == "alive\n"
    end_at = sbx.get_info().end_at
    left = (end_at - sbx.get_info().started_at).total_seconds()
    assert 1 <= left <= 5, ("end_at - started_at", left)
    deadline = time.time() + 6
    while time.time() < deadline and sbx.is_running():
        time.sleep(0.5)
    assert sbx.is_running() is False, f"still running 6 s after a 3 s timeout (end_at {end_at})"
    try:
        Sandbox.get_info(sbx.sandbox_id)
    except Exception as e:  # noqa: BLE001
        assert "not found" in str(e).lower(), e
    else:
        raise AssertionError("get_info of an expired sandbox must fail")
    try:
        Sandbox.connect(sbx.sandbox_id)
    except Exception as e:  # noqa: BLE001
        assert "not found" in str(e).lower(), e
    else:
        raise AssertionError("connect to an expired sandbox must fail")
    assert Sandbox.kill(sbx.sandbox_id) is False, "killing an expired sandbox reports False"


def test_duplicate_create_is_deduplicated():
    # The same body twice within 10 s: one sandbox (the SDK's retry safety).
    body = dict(metadata={"suite": "sdk-py", "run": RUN, "purpose": "dedupe"}, timeout=120)
    a = Sandbox.create(**body)
    b = Sandbox.create(**body)
    _created.extend([a.sandbox_id, b.sandbox_id])
    try:
        assert a.sandbox_id == b.sandbox_id, (a.sandbox_id, b.sandbox_id)
        assert b.commands.run("echo same").stdout == "same\n"
    finally:
        a.kill()


# --- features the agent is still gaining ---------------------------------------------------------


def test_pty():
    sbx = new_sandbox("pty")
    try:
        handle = sbx.pty.create(PtySize(rows=24, cols=80))
        sbx.pty.send_stdin(handle.pid, b"echo pty-$((40+2)); exit\n")
        out = []
        handle.wait(on_pty=lambda data: out.append(bytes(data)))
        text = b"".join(out).decode(errors="replace")
        assert "pty-42" in text, text
    finally:
        sbx.kill()


def test_background_and_connect():
    sbx = new_sandbox("background")
    try:
        handle = sbx.commands.run("sleep 1; echo done-later", background=True)
        listed = [p.pid for p in sbx.commands.list()]
        assert handle.pid in listed, listed
        handle.disconnect()
        again = sbx.commands.connect(handle.pid)
        result = again.wait()
        assert "done-later" in result.stdout, result.stdout
    finally:
        sbx.kill()


def test_stdin():
    sbx = new_sandbox("stdin")
    try:
        handle = sbx.commands.run("head -n 1", background=True, stdin=True)
        sbx.commands.send_stdin(handle.pid, "typed line\n")
        result = handle.wait()
        assert result.stdout == "typed line\n", repr(result.stdout)
    finally:
        sbx.kill()


def test_watch_dir():
    sbx = new_sandbox("watch")
    try:
        sbx.files.make_dir("/home/user/watched")
        watcher = sbx.files.watch_dir("/home/user/watched")
        sbx.files.write("/home/user/watched/new.txt", "x")
        events = []
        deadline = time.time() + 10
        while time.time() < deadline and not any(e.name == "new.txt" for e in events):
            events.extend(watcher.get_new_events())
            time.sleep(0.2)
        watcher.stop()
        assert any(e.name == "new.txt" for e in events), events
    finally:
        sbx.kill()


def native_sandbox_ids():
    """Every sandbox id the daemon knows, through its native API (independent of the SDK)."""
    api = os.environ["E2B_API_URL"].rstrip("/")
    key = {"Authorization": f"Bearer {os.environ['E2B_API_KEY']}"}
    page = requests.get(f"{api}/v1/sandboxes?limit=1000", headers=key, timeout=10).json()
    return {s["id"] for s in page["sandboxes"]}


def test_bad_input_maps_to_sdk_exceptions():
    from e2b import AuthenticationException, NotFoundException, SandboxException

    before = native_sandbox_ids()
    try:
        Sandbox.create(template="no-such-template", metadata={"purpose": f"bad-{RUN}"})
        raise AssertionError("an unknown template must be refused")
    except SandboxException as e:
        assert "not found" in str(e).lower(), e
    try:
        Sandbox.create(api_key="wrong-key", metadata={"purpose": f"badkey-{RUN}"})
        raise AssertionError("a wrong API key must be refused")
    except AuthenticationException:
        pass
    try:
        Sandbox.connect("nosuchsandbox0000000")
        raise AssertionError("connecting to an unknown sandbox must fail")
    except (NotFoundException, SandboxException) as e:
        assert "not found" in str(e).lower() or isinstance(e, NotFoundException), e
    assert Sandbox.kill("nosuchsandbox0000000") is False
    assert native_sandbox_ids() == before, "a refused request created something"


def test_volumes():
    """A volume outlives the sandboxes that share it: written through its own API, mounted in two
    sandboxes at once (one writes, the other reads at once), then read by a third after both are
    gone; it cannot be destroyed while mounted, a link a sandbox plants leads nowhere, and an
    entry's stat and mode are the volume API's to read and change."""
    name = f"vol-{RUN}"
    vol = Volume.create(name)
    try:
        assert vol.name == name and vol.volume_id, vol
        vol.make_dir("/seed")
        entry = vol.write_file("/seed/hello.txt", "from the volume api")
        assert entry.path == "/seed/hello.txt" and entry.size == len("from the volume api"), entry
        listed = [v.volume_id for v in Volume.list()]
        assert vol.volume_id in listed, listed
        info = Volume.get_info(vol.volume_id)
        assert info.name == name, info
        a = new_sandbox("volume-a", volume_mounts={"/data": vol})
        b = new_sandbox("volume-b", volume_mounts={"/mnt/shared": name})
        assert a.commands.run("cat /data/seed/hello.txt").stdout == "from the volume api"
        a.commands.run("echo from-a > /data/note && ln -s / /data/escape")
        r = b.commands.run("cat /mnt/shared/note; stat -c %U /mnt/shared/note")
        assert r.stdout == "from-a\nuser\n", repr(r.stdout)
        assert {"name": name, "path": "/data"} in a.get_info().volume_mounts, a.get_info()
        assert vol.read_file("/note") == "from-a\n"
        names = sorted(e.name for e in vol.list("/"))
        assert names == ["escape", "note", "seed"], names
        try:
            vol.read_file("/escape/etc/passwd")
            raise AssertionError("the volume API followed a link out of the volume")
        except Exception as e:  # noqa: BLE001 - any refusal, never the host's file
            assert "root:" not in str(e), e
        try:
            Volume.destroy(vol.volume_id)
            raise AssertionError("a mounted volume was destroyed")
        except AssertionError:
            raise
        except Exception as e:  # noqa: BLE001 - the SDK's error for a 409
            assert "mounted" in str(e), e
        a.kill()
        b.kill()
        c = new_sandbox("volume-c", volume_mounts={"/data": vol})
        assert c.commands.run("cat /data/note").stdout == "from-a\n"
        c.kill()
        vol.remove("/escape")
        assert not vol.exists("/escape")
        # A file that is there is replaced only with force; a directory that is there, likewise.
        try:
            vol.write_file("/note", "again")
            raise AssertionError("a file was replaced without force")
        except AssertionError:
            raise
        except Exception as e:  # noqa: BLE001 - the SDK's error for a 409
            assert "409" in str(e) or "exists" in str(e), e
        assert vol.write_file("/note", "again", force=True).size == len("again")
        # An entry's stat, and its mode changed through the volume API.
        st = vol.get_info("/note")
        assert (st.name, st.path, st.size, st.type.value) == ("note", "/note", 5, "file"), st
        assert vol.update_metadata("/note", mode=0o600).mode & 0o777 == 0o600
        assert vol.get_info("/note").mode & 0o777 == 0o600
        assert vol.make_dir("/seed", force=True).type.value == "directory"
    finally:
        deadline = time.time() + 15
        while True:
            try:
                assert Volume.destroy(vol.volume_id)
                break
            except Exception:  # noqa: BLE001 - sandboxes still being torn down
                if time.time() > deadline:
                    raise
                time.sleep(0.2)
    assert vol.volume_id not in [v.volume_id for v in Volume.list()]


def test_secrets():
    """A secret's value is write-only: created, found by name and id, paged, given a new version
    and destroyed without ever coming back; a sandbox whose environment names an unknown secret is
    refused naming it before anything is made. (Using one through the egress gateway is
    tests/e2b/test_secrets.py's.)"""
    from e2b import SandboxException, Secret, SecretException

    name, value = f"key-{RUN}", f"sk-{RUN}-first"
    info = Secret.create(name, value, metadata={"team": "a"})
    try:
        assert (info.name, info.version, info.metadata) == (name, 1, {"team": "a"}), info
        assert value not in repr(info), info
        assert Secret.get_info(name).secret_id == info.secret_id
        assert Secret.get_info(info.secret_id).name == name
        assert Secret.exists(name) and not Secret.exists(f"none-{RUN}")
        assert Secret.update(name, f"sk-{RUN}-second").version == 2
        pages, names = Secret.list(limit=1), []
        while pages.has_next:
            names += [s.name for s in pages.next_items()]
        assert name in names and len(names) == len(set(names)), names
        try:
            Secret.create(name, "another")
            raise AssertionError("a taken name was accepted")
        except SecretException as e:
            assert "exists" in str(e), e
        before = native_sandbox_ids()
        ghost = f"ghost-{RUN}"
        try:
            new_sandbox("secret-ghost", envs={"K": Secret.fill(ghost)})
            raise AssertionError("a create naming an unknown secret was accepted")
        except SandboxException as e:
            assert ghost in str(e), e
        assert native_sandbox_ids() == before, "a refused create made a sandbox"
    finally:
        assert Secret.destroy(name)
    assert not Secret.destroy(name)
    assert not Secret.exists(name)


CHECKS = [
    test_create_with_metadata_and_envs,
    test_commands_run_foreground,
    test_files,
    test_get_host_reaches_a_server_in_the_sandbox,
    test_set_timeout_and_metrics,
    test_list_with_metadata_filter_and_paging,
    test_pause_and_resume_keep_processes,
    test_filesystem_pause_reboots_from_files,
    test_fork,
    test_timeout_pauses_and_a_command_resumes,
    test_a_pause_ends_a_command_in_flight,
    test_kill,
    test_timeout_expiry,
    test_duplicate_create_is_deduplicated,
    test_pty,
    test_background_and_connect,
    test_stdin,
    test_watch_dir,
    test_bad_input_maps_to_sdk_exceptions,
    test_volumes,
    test_secrets,
]


@atexit.register
def cleanup():
    for sid in set(_created):
        try:
            Sandbox.kill(sid)
        except Exception:  # noqa: BLE001 - best effort
            pass


def main():
    for var in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY"):
        if not os.environ.get(var):
            print(f"{var} must be set", file=sys.stderr)
            return 2
    if os.environ.get("E2B_DOMAIN"):
        print("E2B_DOMAIN must be unset", file=sys.stderr)
        return 2
    import e2b  # noqa: F401

    from importlib.metadata import version

    print(f"e2b {version('e2b')} against {API_URL}")
    # E2B_CHECKS (comma-separated names) runs a subset, e.g. on another isolation tier.
    only = [n for n in os.environ.get("E2B_CHECKS", "").split(",") if n]
    unknown = sorted(set(only) - {c.__name__ for c in CHECKS})
    if unknown:
        print(f"E2B_CHECKS names no such check: {unknown}", file=sys.stderr)
        return 2
    # E2B_SKIP (comma-separated names) leaves checks out, e.g. what a cluster does not offer yet.
    skip = {n for n in os.environ.get("E2B_SKIP", "").split(",") if n}
    unknown = sorted(skip - {c.__name__ for c in CHECKS})
    if unknown:
        print(f"E2B_SKIP names no such check: {unknown}", file=sys.stderr)
        return 2
    checks = [c for c in CHECKS if (not only or c.__name__ in only) and c.__name__ not in skip]
    failed = []
    try:
        for check in checks:
            started = time.time()
            try:
                check()
            except Exception:  # noqa: BLE001 - reported
                failed.append(check.__name__)
                print(f"FAIL  {check.__name__}\n{traceback.format_exc()}")
                continue
            print(f"PASS  {check.__name__} [{time.time() - started:.1f}s]")
    finally:
        cleanup()
    print(f"\n{len(checks) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
