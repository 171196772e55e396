#!/usr/bin/env python3
"""Acceptance test: sandboxd's Daytona API through the real, unmodified `daytona` Python SDK.

Environment: DAYTONA_API_URL (the daemon's URL + `/api`), DAYTONA_API_KEY (a daemon token). The
daemon's code-interpreter-v1 template (Daytona's default snapshot here) must be built. Exit status
0 = every check passed. Run by crates/sandboxd/tests/daytona_sdk.rs.
"""

import os
import time
import uuid
from urllib.parse import urlsplit

import httpx

import runner
from daytona import (
    CodeRunParams,
    ListSandboxesQuery,
    SessionExecuteRequest,
    CreateSandboxFromSnapshotParams,
    Daytona,
    DaytonaConflictError,
    DaytonaError,
    DaytonaNotFoundError,
    DaytonaTimeoutError,
    PtySize,
    VolumeMount,
)

RUN = uuid.uuid4().hex[:8]
DAYTONA = Daytona()
SBX = None


def sandbox():
    global SBX
    if SBX is None:
        # The default snapshot may still be building (the run starts beside its first build).
        SBX = DAYTONA.create(
            CreateSandboxFromSnapshotParams(language="python", name=f"dt-{RUN}", labels={"suite": RUN}),
            timeout=600,
        )
    return SBX


IDLE = {}


def test_idle_sandboxes_start_their_clocks():
    """Made first, checked by test_an_idle_sandbox_is_stopped_then_deleted near the end: auto-stop,
    auto-pause and auto-delete are whole minutes, so their clocks run while the other tests do."""
    common = dict(snapshot="base", auto_stop_interval=1, labels={"idle": RUN})
    IDLE["idle"] = DAYTONA.create(CreateSandboxFromSnapshotParams(auto_delete_interval=1, **common))
    IDLE["busy"] = DAYTONA.create(CreateSandboxFromSnapshotParams(**common))
    # Auto-pause instead of auto-stop: its processes are kept, frozen, until a start.
    IDLE["pausing"] = DAYTONA.create(CreateSandboxFromSnapshotParams(
        snapshot="base", auto_pause_interval=1, labels={"idle": RUN}))
    IDLE["since"] = time.monotonic()
    pausing = IDLE["pausing"]
    assert (pausing.auto_pause_interval, pausing.auto_stop_interval) == (1, 0), pausing.auto_stop_interval
    IDLE["pid"] = pausing.process.exec("sleep 600 >/dev/null 2>&1 & echo $!").result.strip()
    assert IDLE["idle"].auto_stop_interval == 1 and IDLE["idle"].auto_delete_interval == 1
    assert IDLE["busy"].auto_delete_interval == -1, "never, by default"
    assert IDLE["busy"].process.exec("touch /home/user/busy").exit_code == 0

    def keep_busy():
        while "done" not in IDLE:
            IDLE["busy"].process.exec("true")
            time.sleep(10)

    import threading

    threading.Thread(target=keep_busy, daemon=True).start()


def test_create_answers_a_started_sandbox_found_by_id_and_name():
    sbx = sandbox()
    assert sbx.state == "started", sbx.state
    assert DAYTONA.get(sbx.id).id == sbx.id
    assert DAYTONA.get(f"dt-{RUN}").id == sbx.id
    assert sbx.labels["suite"] == RUN and sbx.labels["code-toolbox-language"] == "python", sbx.labels


def test_labels_are_replaced():
    sbx = sandbox()
    labels = sbx.set_labels({"suite": RUN, "stage": "two"})
    assert labels["stage"] == "two" and labels["suite"] == RUN, labels
    again = DAYTONA.get(sbx.id)
    assert again.labels.get("stage") == "two", again.labels
    assert again.labels.get("code-toolbox-language") == "python", "the language label went"
    listed = [s.id for s in DAYTONA.list(ListSandboxesQuery(labels={"stage": "two", "suite": RUN}))]
    assert listed == [sbx.id], listed


def test_list_filters_by_label():
    sbx = sandbox()
    found = [s.id for s in DAYTONA.list(ListSandboxesQuery(labels={"suite": RUN}))]
    assert found == [sbx.id], found
    assert list(DAYTONA.list(ListSandboxesQuery(labels={"suite": "no-such-" + RUN}))) == []


def test_a_taken_name_is_a_conflict():
    sandbox()
    try:
        DAYTONA.create(CreateSandboxFromSnapshotParams(name=f"dt-{RUN}"))
        raise AssertionError("a second sandbox got a taken name")
    except DaytonaConflictError:
        pass


def test_one_name_across_100_concurrent_creates():
    from concurrent.futures import ThreadPoolExecutor

    name = f"dt-race-{RUN}"

    def attempt(_):
        try:
            return DAYTONA.create(
                CreateSandboxFromSnapshotParams(snapshot="base", name=name, labels={"race": RUN})
            )
        except DaytonaConflictError:
            return None

    with ThreadPoolExecutor(max_workers=100) as pool:
        outcomes = list(pool.map(attempt, range(100)))
    made = [s for s in outcomes if s is not None]
    try:
        assert len(made) == 1, f"{len(made)} sandboxes got the name"
        assert outcomes.count(None) == 99
        assert [s.id for s in DAYTONA.list(ListSandboxesQuery(labels={"race": RUN}))] == [made[0].id]
    finally:
        for s in made:
            DAYTONA.delete(s)


def test_stop_ends_the_processes_and_start_keeps_the_files():
    sbx = DAYTONA.create(CreateSandboxFromSnapshotParams(snapshot="base", labels={"stop": RUN}))
    try:
        setup = sbx.process.exec("echo kept > /home/user/kept.txt; nohup sleep 1000 >/dev/null 2>&1 &")
        assert setup.exit_code == 0, setup
        assert sbx.process.exec("pgrep -x sleep").exit_code == 0
        sbx.stop()
        assert sbx.state == "stopped", sbx.state
        assert DAYTONA.get(sbx.id).state == "stopped"
        try:
            sbx.process.exec("true")
            raise AssertionError("a stopped sandbox ran a command")
        except DaytonaError as e:
            assert "stopped" in str(e), e
        sbx.start()
        assert sbx.state == "started", sbx.state
        assert sbx.process.exec("cat /home/user/kept.txt").result == "kept\n"
        assert sbx.process.exec("pgrep -x sleep").exit_code == 1, "a process outlived the stop"
    finally:
        DAYTONA.delete(sbx)


def test_sessions_keep_shell_state_and_stream_async_logs():
    import asyncio

    sbx = DAYTONA.create(CreateSandboxFromSnapshotParams(snapshot="base", labels={"sessions": RUN}))
    try:
        sbx.process.create_session("work")
        try:
            sbx.process.create_session("work")
            raise AssertionError("a session id was created twice")
        except DaytonaConflictError:
            pass
        sbx.process.execute_session_command("work", SessionExecuteRequest(command="cd /tmp && export KEPT=yes"))
        same = sbx.process.execute_session_command("work", SessionExecuteRequest(command="pwd; echo $KEPT; echo oops >&2; exit_code() { return 4; }; exit_code"))
        assert same.stdout == "/tmp\nyes\n" and same.stderr == "oops\n" and same.exit_code == 4, same
        started = sbx.process.execute_session_command(
            "work", SessionExecuteRequest(command="for i in 1 2 3; do echo line $i; sleep 0.3; done; echo done >&2", run_async=True)
        )
        assert started.exit_code is None, started
        out, err = [], []

        async def follow():
            await sbx.process.get_session_command_logs_async("work", started.cmd_id, out.append, err.append)

        asyncio.run(follow())
        assert "".join(out) == "line 1\nline 2\nline 3\n" and "".join(err) == "done\n", (out, err)
        command = sbx.process.get_session_command("work", started.cmd_id)
        assert command.exit_code == 0 and "line $i" in command.command, command
        logs = sbx.process.get_session_command_logs("work", started.cmd_id)
        assert logs.stdout == "line 1\nline 2\nline 3\n", logs
        session = sbx.process.get_session("work")
        assert [c.id for c in session.commands][-1] == started.cmd_id and len(session.commands) == 3, session
        # A command reads what is sent to it, and takes nothing once it ended.
        asking = sbx.process.execute_session_command(
            "work", SessionExecuteRequest(command='read -r who; read -r how; echo "hello $who, $how"', run_async=True)
        )
        sbx.process.send_session_command_input("work", asking.cmd_id, "world\n")
        sbx.process.send_session_command_input("work", asking.cmd_id, "in two parts\n")
        deadline = time.monotonic() + 10
        while sbx.process.get_session_command("work", asking.cmd_id).exit_code is None:
            assert time.monotonic() < deadline, "the command never got its input"
            time.sleep(0.05)
        answered = sbx.process.get_session_command_logs("work", asking.cmd_id)
        assert answered.stdout == "hello world, in two parts\n", answered
        try:
            sbx.process.send_session_command_input("work", asking.cmd_id, "late\n")
            raise AssertionError("an ended command took input")
        except DaytonaError:
            pass
        assert [s.session_id for s in sbx.process.list_sessions()] == ["work"]
        assert len(sbx.process.get_session("work").commands) == 4
        sbx.process.delete_session("work")
        assert sbx.process.list_sessions() == []
        try:
            sbx.process.get_session("work")
            raise AssertionError("a deleted session was found")
        except DaytonaNotFoundError:
            pass
    finally:
        DAYTONA.delete(sbx)


def read_until(pty, needle, within=10.0):
    """The PTY's output until `needle` appears in it (an AssertionError after `within` seconds)."""
    seen = bytearray()
    deadline = time.monotonic() + within
    while needle.encode() not in seen:
        left = deadline - time.monotonic()
        assert left > 0, f"{needle!r} not in the PTY's output: {bytes(seen)!r}"
        pty.wait(on_data=seen.extend, timeout=min(left, 0.5))
    return seen.decode(errors="replace")


def test_pty_sessions_outlive_their_connections_and_resize():
    sbx = DAYTONA.create(CreateSandboxFromSnapshotParams(snapshot="base", labels={"pty": RUN}))
    try:
        pty = sbx.process.create_pty_session(
            id="term", cwd="/tmp", envs={"GREETING": "hello-pty"}, pty_size=PtySize(rows=30, cols=100)
        )
        pty.send_input("echo \"$GREETING from $(pwd)\"; stty size\n")
        out = read_until(pty, "30 100")
        assert "hello-pty from /tmp" in out, out
        try:
            sbx.process.create_pty_session(id="term")
            raise AssertionError("a PTY session id was created twice")
        except DaytonaConflictError:
            pass
        info = sbx.process.get_pty_session_info("term")
        assert info.active and (info.cols, info.rows) == (100, 30) and info.cwd == "/tmp", info
        assert info.envs.get("GREETING") == "hello-pty", info
        resized = pty.resize(PtySize(rows=40, cols=120))
        assert (resized.cols, resized.rows) == (120, 40), resized
        pty.send_input("stty size\n")
        read_until(pty, "40 120")
        # Leaving does not end it: a new connection finds the same shell.
        pty.send_input("export KEPT=still-here\n")
        pty.disconnect()
        assert [(s.id, s.active) for s in sbx.process.list_pty_sessions()] == [("term", True)]
        again = sbx.process.connect_pty_session("term")
        again.send_input("echo $KEPT; exit 3\n")
        result = again.wait(timeout=10)
        assert result.exit_code == 3, result
        ended = sbx.process.get_pty_session_info("term")
        assert not ended.active, ended
        try:
            sbx.process.resize_pty_session("term", PtySize(rows=10, cols=10))
            raise AssertionError("an ended PTY was resized")
        except DaytonaError:
            pass
        # Made through the toolbox's own create (as the TypeScript SDK does) to start lazily: it is
        # described, not running, until the first connect starts it at its size.
        from daytona_toolbox_api_client import PtyCreateRequest

        made = sbx.process._api_client.create_pty_session(PtyCreateRequest(id="lazy", lazy_start=True, cols=90, rows=20))
        assert made.session_id == "lazy", made
        waiting = sbx.process.get_pty_session_info("lazy")
        assert not waiting.active and waiting.lazy_start, waiting
        lazy = sbx.process.connect_pty_session("lazy")
        lazy.send_input("stty size\n")
        read_until(lazy, "20 90")
        assert sbx.process.get_pty_session_info("lazy").active
        lazy.kill()
        # Killing one ends its process and forgets it.
        doomed = sbx.process.create_pty_session(id="doomed")
        doomed.kill()
        assert doomed.wait(timeout=10).exit_code is not None
        sbx.process.kill_pty_session("term")
        assert sbx.process.list_pty_sessions() == []
        try:
            sbx.process.get_pty_session_info("doomed")
            raise AssertionError("a killed PTY session was found")
        except DaytonaNotFoundError:
            pass
    finally:
        DAYTONA.delete(sbx)


def fetch(url, headers=None):
    """GET `url` through the daemon's listener, its host in the Host header (no DNS for the
    `{port}-{id}.localhost` names needed)."""
    daemon = urlsplit(os.environ["DAYTONA_API_URL"])
    parts = urlsplit(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    sent = {"Host": parts.netloc, **(headers or {})}
    return httpx.get(f"{daemon.scheme}://{daemon.netloc}{path}", headers=sent, timeout=10)


def test_previews_of_a_private_sandbox_need_its_token_or_a_signed_link():
    sbx = DAYTONA.create(CreateSandboxFromSnapshotParams(snapshot="base", labels={"preview": RUN}))
    try:
        assert sbx.public is False, "Daytona's sandboxes are private unless told"
        sbx.process.exec("mkdir -p /tmp/site && echo preview-ok > /tmp/site/index.html")
        sbx.process.exec("cd /tmp/site && nohup python3 -m http.server 8000 >/dev/null 2>&1 &")
        link = sbx.get_preview_link(8000)
        deadline = time.monotonic() + 10
        while fetch(link.url, {"X-Daytona-Preview-Token": link.token}).status_code != 200:
            assert time.monotonic() < deadline, "the server never answered"
            time.sleep(0.1)
        assert fetch(link.url, {"X-Daytona-Preview-Token": link.token}).text == "preview-ok\n"
        assert fetch(link.url).status_code == 401, "reached without its token"
        assert fetch(link.url, {"X-Daytona-Preview-Token": "0" * len(link.token)}).status_code == 401
        key = os.environ["DAYTONA_API_KEY"]
        assert fetch(link.url, {"Authorization": f"Bearer {key}"}).status_code == 200
        signed = sbx.create_signed_preview_url(8000, expires_in_seconds=120)
        assert signed.port == 8000 and signed.token in signed.url, signed
        assert fetch(signed.url).text == "preview-ok\n"
        sbx.expire_signed_preview_url(8000, signed.token)
        assert fetch(signed.url).status_code == 401, "an expired link still works"
        short = sbx.create_signed_preview_url(8000, expires_in_seconds=1)
        assert fetch(short.url).status_code == 200
        time.sleep(1.2)
        assert fetch(short.url).status_code == 401, "a link outlived its time"
        sbx.set_public(True)
        assert DAYTONA.get(sbx.id).public is True
        assert fetch(link.url).status_code == 200, "a public sandbox needs no token"
        sbx.set_public(False)
        assert fetch(link.url).status_code == 401
    finally:
        DAYTONA.delete(sbx)


def test_an_unknown_snapshot_is_not_found():
    try:
        DAYTONA.create(CreateSandboxFromSnapshotParams(snapshot="no-such-snapshot-" + RUN))
        raise AssertionError("created from an unknown snapshot")
    except DaytonaNotFoundError:
        pass
    assert list(DAYTONA.list(ListSandboxesQuery(labels={"suite": RUN, "n": "unknown-snapshot"}))) == []


def test_exec_returns_output_and_exit_codes():
    sbx = sandbox()
    response = sbx.process.exec("echo hi; echo $GREETING; exit 3", env={"GREETING": "there"})
    assert response.exit_code == 3, response
    assert response.result == "hi\nthere\n", response.result
    assert sbx.process.exec("pwd", cwd="/tmp").result.strip() == "/tmp"
    assert sbx.get_user_home_dir() == "/home/user"


def test_code_run_runs_each_script_in_a_fresh_process():
    sbx = sandbox()
    response = sbx.process.code_run("x = 20 + 22\nprint(f'sum: {x}')")
    assert response.exit_code == 0 and response.result == "sum: 42\n", response
    # Nothing carries over: each run is a new process, as Daytona runs them.
    again = sbx.process.code_run("print(x)")
    assert again.exit_code == 1 and "NameError" in again.result, again
    failed = sbx.process.code_run("1/0")
    assert failed.exit_code == 1 and "ZeroDivisionError" in failed.result, failed
    assert "sandboxd" not in failed.result, "the traceback shows the runner's own frame: " + failed.result
    assert sbx.process.code_run("import sys; sys.exit(3)").exit_code == 3
    argv = sbx.process.code_run("import sys; print(sys.argv)", params=CodeRunParams(argv=["a", "b c"]))
    assert argv.result == "['-', 'a', 'b c']\n", argv.result


def test_code_run_returns_the_figures_shown_whatever_the_backend():
    sbx = sandbox()
    plot = sbx.process.code_run(
        "import matplotlib.pyplot as plt\nprint('before')\nplt.plot([1, 2], [3, 4])\nplt.title('T')\n"
        "plt.show()\nprint('after')"
    )
    assert plot.exit_code == 0 and plot.result == "before\nafter\n", plot.result
    charts = plot.artifacts.charts
    assert len(charts) == 1 and charts[0].type == "line" and charts[0].title == "T", charts
    assert charts[0].png and len(charts[0].png) > 100, "a chart without its PNG"
    # Agg picked by the code (show() does nothing there), and a figure never shown: both come back.
    agg = sbx.process.code_run(
        "import matplotlib\nmatplotlib.use('agg')\nimport matplotlib.pyplot as plt\n"
        "plt.bar(['a', 'b'], [1, 2])\nplt.show()\nplt.figure()\nplt.pie([1, 3])"
    )
    assert agg.exit_code == 0 and agg.result == "", agg.result
    assert [c.type for c in agg.artifacts.charts] == ["bar", "pie"], agg.artifacts.charts
    assert [e.label for e in agg.artifacts.charts[0].elements] == ["a", "b"], agg.artifacts.charts[0]


def test_code_run_past_its_timeout_is_killed():
    sbx = sandbox()
    started = time.monotonic()
    try:
        sbx.process.code_run("import time\ntime.sleep(60)", timeout=2)
        raise AssertionError("no timeout")
    except AssertionError:
        raise
    except Exception as e:  # the SDK's code_run raises its API client's error, as with Daytona's
        assert getattr(e, "status", None) == 408 and "PROCESS_EXECUTION_TIMEOUT" in str(e.body), e
    assert time.monotonic() - started < 15
    # Killed, not left running: no process's command line holds the code.
    count = "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f; echo; done | grep -c 'sleep(6[0])'"
    assert sbx.process.exec(count).result.strip() == "0", "the run was left running"


def test_code_interpreter_keeps_state_streams_and_reports_errors():
    sbx = sandbox()
    seen = []
    sbx.code_interpreter.run_code("counter = 5")
    result = sbx.code_interpreter.run_code("print(counter * 2)", on_stdout=lambda m: seen.append(m.output))
    assert result.stdout == "10\n" and seen == ["10\n"], (result.stdout, seen)
    failed = sbx.code_interpreter.run_code("raise ValueError('nope')")
    assert failed.error is not None and failed.error.name == "ValueError", failed.error
    assert failed.error.value == "nope"
    envs = sbx.code_interpreter.run_code("import os\nprint(os.environ['WHO'])", envs={"WHO": "daytona"})
    assert envs.stdout == "daytona\n", envs.stdout


def test_code_interpreter_contexts_are_separate():
    sbx = sandbox()
    ctx = sbx.code_interpreter.create_context(cwd="/tmp")
    assert ctx.cwd == "/tmp" and ctx.language == "python", ctx
    sbx.code_interpreter.run_code("only_here = 1", context=ctx)
    assert sbx.code_interpreter.run_code("print(only_here)", context=ctx).stdout == "1\n"
    other = sbx.code_interpreter.run_code("print(only_here)")
    assert other.error is not None and other.error.name == "NameError", other
    assert ctx.id in [c.id for c in sbx.code_interpreter.list_contexts()]
    sbx.code_interpreter.delete_context(ctx)
    assert ctx.id not in [c.id for c in sbx.code_interpreter.list_contexts()]


def test_code_interpreter_timeout_interrupts():
    sbx = sandbox()
    started = time.monotonic()
    try:
        sbx.code_interpreter.run_code("import time\ntime.sleep(60)", timeout=2)
        raise AssertionError("no timeout")
    except DaytonaTimeoutError:
        pass
    assert time.monotonic() - started < 15
    assert sbx.code_interpreter.run_code("print('after')").stdout == "after\n"


def test_an_idle_sandbox_is_stopped_then_deleted():
    assert IDLE, "test_idle_sandboxes_start_their_clocks made none"
    idle, busy = IDLE["idle"], IDLE["busy"]
    try:
        deadline = IDLE["since"] + 150
        # `stopping` is the way there: a loaded host may be read in the middle of it.
        while DAYTONA.get(idle.id).state in ("started", "stopping"):
            assert time.monotonic() < deadline, "an idle sandbox was not stopped"
            time.sleep(1)
        waited = time.monotonic() - IDLE["since"]
        assert waited >= 55, f"stopped after {waited:.0f} s, before its minute"
        state = DAYTONA.get(idle.id).state
        assert state == "stopped", state
        assert DAYTONA.get(busy.id).state == "started", "a busy sandbox was stopped"
        while True:
            try:
                state = DAYTONA.get(idle.id).state
            except DaytonaNotFoundError:
                break
            assert state == "stopped", state
            assert time.monotonic() < deadline + 90, "a stopped sandbox was not deleted"
            time.sleep(1)
        assert time.monotonic() - IDLE["since"] >= 110, "deleted before its minute stopped"
        # The pausing one was paused at its minute (long since), not stopped; a start resumes it
        # with its processes.
        pausing = IDLE["pausing"]
        assert DAYTONA.get(pausing.id).state == "paused", DAYTONA.get(pausing.id).state
        pausing.start()
        assert DAYTONA.get(pausing.id).state == "started"
        alive = pausing.process.exec(f"kill -0 {IDLE['pid']} && echo alive")
        assert alive.result.strip() == "alive", alive.result
        DAYTONA.delete(pausing)
        # Its intervals can be changed: never stop it, delete it at its next stop.
        busy.set_autostop_interval(0)
        busy.set_auto_delete_interval(0)
        assert DAYTONA.get(busy.id).auto_stop_interval == 0
        busy.refresh_activity()
    finally:
        IDLE["done"] = True
    busy.stop()
    deadline = time.monotonic() + 10
    while True:
        try:
            DAYTONA.get(busy.id)
        except DaytonaNotFoundError:
            break
        assert time.monotonic() < deadline, "auto-delete 0 kept a stopped sandbox"
        time.sleep(0.5)


def test_volumes_persist_across_sandboxes_and_mount_a_subpath():
    """A volume (get(create=True)) mounted whole in one sandbox and by a subpath in another:
    what one writes the other sees; a sandbox made after both are gone still has the files; a
    mounted volume is not deleted; after, it is gone."""
    name = f"dt-vol-{RUN}"
    vol = DAYTONA.volume.get(name, create=True)
    assert vol.name == name and vol.state == "ready", vol
    assert DAYTONA.volume.get(name).id == vol.id
    assert vol.id in [v.id for v in DAYTONA.volume.list()]
    whole = DAYTONA.create(CreateSandboxFromSnapshotParams(
        language="python", labels={"suite": RUN},
        volumes=[VolumeMount(volume_id=vol.id, mount_path="/mnt/whole")]))
    part = DAYTONA.create(CreateSandboxFromSnapshotParams(
        language="python", labels={"suite": RUN},
        volumes=[VolumeMount(volume_id=name, mount_path="/mnt/part", subpath="projects/a")]))
    try:
        r = part.process.exec("echo from-subpath > /mnt/part/file.txt && echo ok")
        assert r.result.strip() == "ok", r
        r = whole.process.exec("cat /mnt/whole/projects/a/file.txt")
        assert r.result.strip() == "from-subpath", r
        try:
            DAYTONA.volume.delete(vol)
            raise AssertionError("a mounted volume was deleted")
        except DaytonaConflictError:
            pass
        except DaytonaError as e:
            assert "mounted" in str(e), e
    finally:
        DAYTONA.delete(whole)
        DAYTONA.delete(part)
    later = DAYTONA.create(CreateSandboxFromSnapshotParams(
        language="python", labels={"suite": RUN},
        volumes=[VolumeMount(volume_id=vol.id, mount_path="/data")]))
    try:
        r = later.process.exec("cat /data/projects/a/file.txt")
        assert r.result.strip() == "from-subpath", r
    finally:
        DAYTONA.delete(later)
    deadline = time.monotonic() + 15
    while True:
        try:
            DAYTONA.volume.delete(vol)
            break
        except DaytonaError:
            assert time.monotonic() < deadline, "the volume stayed in use"
            time.sleep(0.2)
    try:
        DAYTONA.volume.get(name)
        raise AssertionError("a deleted volume was found")
    except DaytonaNotFoundError:
        pass


def test_secrets_are_write_only_and_an_unknown_one_is_refused():
    """A secret (allowed hosts, a description) is created, found, paged and updated without its
    value ever coming back; a taken name is a conflict; a create with `secrets=` naming an unknown
    secret is refused naming it; after the delete it is not found. (Using one through the egress
    gateway is tests/daytona/test_secrets.py's.)"""
    from daytona import CreateSecretParams, UpdateSecretParams
    # The SDK's secret service raises its API client's exceptions as they are.
    from daytona_api_client.exceptions import ConflictException, NotFoundException

    name, value = f"dt_key_{RUN}", f"sk-{RUN}-first"
    made = DAYTONA.secret.create(CreateSecretParams(
        name=name, value=value, description="for tests", hosts=["API.example.com", "*.example.org"]))
    try:
        assert made.hosts == ["api.example.com", "*.example.org"], made
        assert made.placeholder == "${sandboxd.secrets.%s}" % name, made
        assert value not in made.model_dump_json(), made
        assert DAYTONA.secret.get(made.id).name == name
        changed = DAYTONA.secret.update(made.id, UpdateSecretParams(value=f"sk-{RUN}-second", hosts=["10.0.0.7"]))
        assert changed.hosts == ["10.0.0.7"] and changed.description == "for tests", changed
        seen, cursor = [], None
        while True:
            page = DAYTONA.secret.list(cursor=cursor, limit=1, name=RUN)
            seen += [s.name for s in page.items]
            assert page.total == 1, page
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert seen == [name], seen
        try:
            DAYTONA.secret.create(CreateSecretParams(name=name, value="another"))
            raise AssertionError("a taken name was accepted")
        except ConflictException as e:
            assert "exists" in str(e.body), e
        try:
            DAYTONA.create(CreateSandboxFromSnapshotParams(
                language="python", labels={"suite": RUN}, secrets={"OPENAI_API_KEY": f"ghost_{RUN}"}))
            raise AssertionError("a create naming an unknown secret was accepted")
        except DaytonaError as e:
            assert f"ghost_{RUN}" in str(e), e
    finally:
        DAYTONA.secret.delete(made.id)
    try:
        DAYTONA.secret.get(made.id)
        raise AssertionError("a deleted secret was found")
    except NotFoundException:
        pass


def test_delete_then_not_found():
    global SBX
    sbx = sandbox()
    DAYTONA.delete(sbx)
    SBX = None
    try:
        DAYTONA.get(sbx.id)
        raise AssertionError("a deleted sandbox was found")
    except DaytonaNotFoundError:
        pass


def cleanup():
    if SBX is not None:
        try:
            DAYTONA.delete(SBX)
        except DaytonaError:
            pass


if __name__ == "__main__":
    runner.run(globals(), cleanup)
