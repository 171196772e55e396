#!/usr/bin/env python3
"""Acceptance test: images, builds and snapshots through the real, unmodified `daytona` Python SDK.

Environment: DAYTONA_API_URL (the daemon's URL + `/api`), DAYTONA_API_KEY (a daemon token). The
daemon pulls through a registry mirror that serves `python:3.12-slim` (a busybox image holding
/app/hello.txt) and `team/app:v1` (the same image). Run by crates/sandboxd/tests/daytona_images.rs.

What it proves:
- A sandbox from an image string, and from the SDK's `Image` builder (run_commands, env, workdir;
  the create answers `pending_build` and the SDK streams the build's log), has the image's files
  and the build's; its disk limit (`Resources(disk=1)`) stops a write past
  1 GiB while the sandbox lives on.
- A create waiting for its build is listed (`pending_build`, `building_snapshot`) until its
  sandbox is, once.
- An unknown image is the SDK's not-found error and leaves nothing; a build that fails ends the
  create in `build_failed`, the failing step in its streamed log.
- `resize`: a running sandbox grows in CPU and memory, refuses to shrink or to change its disk; a
  stopped one's disk grows (a write past the old limit then fits), never shrinks.
- Snapshots: made from an image string and from a builder, with the build's log streamed to
  `on_logs`; got by name, listed, used by creates, refused deletion while used, deleted; a failing
  build is `build_failed` with the failing step in its log.
- `sandbox.create_snapshot(name)` and `sandbox.fork(name)` copy a sandbox's filesystem; a fork's
  writes do not reach its source.
Exit status 0 = every check passed.
"""

import threading
import time
import uuid

import runner
from daytona import (
    CreateSandboxFromImageParams,
    CreateSandboxFromSnapshotParams,
    CreateSnapshotParams,
    Daytona,
    DaytonaConflictError,
    DaytonaError,
    DaytonaNotFoundError,
    Image,
    ListSandboxesQuery,
    Resources,
)

RUN = uuid.uuid4().hex[:8]
DAYTONA = Daytona()
MADE = []


def create(params, **kwargs):
    params.labels = {**(params.labels or {}), "images": RUN}
    sbx = DAYTONA.create(params, timeout=300, **kwargs)
    MADE.append(sbx)
    return sbx


def run(sbx, command):
    out = sbx.process.exec(command)
    assert out.exit_code == 0, f"{command}: {out.exit_code} {out.result}"
    return out.result.strip()


def test_a_sandbox_from_an_image_string_has_its_files_and_its_disk_limit():
    sbx = create(CreateSandboxFromImageParams(image="python:3.12-slim", resources=Resources(disk=1)))
    assert sbx.state == "started", sbx.state
    assert sbx.disk == 1, sbx.disk
    assert run(sbx, "cat /app/hello.txt") == "hello from the image"
    filled = sbx.process.exec("dd if=/dev/zero of=/home/user/fill bs=1M count=1100 2>&1; sync")
    text = filled.result.lower()
    assert "quota exceeded" in text or "no space left" in text, filled.result
    assert run(sbx, "rm /home/user/fill && echo alive") == "alive"


def test_resize_grows_a_running_sandbox_and_a_stopped_ones_disk():
    sbx = create(
        CreateSandboxFromImageParams(image="python:3.12-slim", resources=Resources(cpu=1, memory=1, disk=1))
    )
    sbx.resize(Resources(cpu=2, memory=2))
    assert (sbx.cpu, sbx.memory, sbx.disk) == (2, 2, 1), (sbx.cpu, sbx.memory, sbx.disk)
    assert DAYTONA.get(sbx.id).memory == 2
    for refused in (Resources(memory=1), Resources(disk=2)):
        try:
            sbx.resize(refused)
            raise AssertionError(f"a running sandbox took {refused}")
        except DaytonaError:
            pass
    sbx.stop()
    sbx.resize(Resources(disk=2))
    assert sbx.disk == 2, sbx.disk
    try:
        sbx.resize(Resources(disk=1))
        raise AssertionError("a disk shrank")
    except DaytonaError:
        pass
    sbx.start()
    filled = sbx.process.exec("dd if=/dev/zero of=/home/user/fill bs=1M count=1100 2>&1 && rm /home/user/fill")
    assert filled.exit_code == 0, f"1100 MiB do not fit a 2 GiB disk: {filled.result}"


def test_a_sandbox_from_an_image_builder_has_what_the_build_made():
    image = (
        Image.base("python:3.12-slim")
        .run_commands("echo built > /built.txt", "mkdir -p /srv/work")
        .env({"GREETING": "hello builder"})
        .workdir("/srv/work")
    )
    logs = []
    sbx = create(CreateSandboxFromImageParams(image=image), on_snapshot_create_logs=logs.append)
    assert "echo built > /built.txt" in "\n".join(logs), logs
    assert run(sbx, "cat /built.txt") == "built"
    assert run(sbx, "echo $GREETING") == "hello builder"
    assert run(sbx, "pwd") == "/srv/work"


def test_an_unknown_image_is_not_found_and_leaves_nothing():
    try:
        create(CreateSandboxFromImageParams(image="no-such/image:1"))
        raise AssertionError("a sandbox was made from an unknown image")
    except DaytonaNotFoundError:
        pass
    assert list(DAYTONA.list(ListSandboxesQuery(labels={"images": RUN, "never": "made"}))) == []


def test_a_create_waiting_for_its_build_is_listed_until_its_sandbox_is():
    image = Image.base("python:3.12-slim").run_commands(f"echo listed-{RUN}; sleep 4")
    made = []
    creating = threading.Thread(
        target=lambda: made.append(create(CreateSandboxFromImageParams(image=image, labels={"listed": RUN})))
    )
    creating.start()
    seen = set()
    while creating.is_alive():
        seen.update(getattr(s.state, "value", s.state) for s in DAYTONA.list(ListSandboxesQuery(labels={"listed": RUN})))
        time.sleep(0.3)
    creating.join()
    assert made, "the create failed"
    assert seen & {"pending_build", "building_snapshot"}, seen
    listed = list(DAYTONA.list(ListSandboxesQuery(labels={"listed": RUN})))
    assert [(s.id, s.state) for s in listed] == [(made[0].id, "started")], listed


def test_a_failing_build_ends_the_create_in_build_failed():
    image = Image.base("python:3.12-slim").run_commands(f"echo failing-{RUN}; exit 3")
    logs = []
    try:
        create(CreateSandboxFromImageParams(image=image), on_snapshot_create_logs=logs.append)
        raise AssertionError("a failed build made a sandbox")
    except DaytonaError as e:
        assert "build" in str(e).lower(), e
    assert f"failing-{RUN}" in "\n".join(logs), logs


def test_snapshots_from_a_builder_stream_their_log_and_make_sandboxes():
    name = f"snap-{RUN}"
    logs = []
    image = Image.base("python:3.12-slim").run_commands(f"echo snapshot-{RUN} > /snap.txt")
    snap = DAYTONA.snapshot.create(CreateSnapshotParams(name=name, image=image), on_logs=logs.append)
    assert snap.state == "active", snap.state
    text = "\n".join(logs)
    assert f"snapshot-{RUN}" in text, text
    assert DAYTONA.snapshot.get(name).name == name
    names = [s.name for s in DAYTONA.snapshot.list(limit=100).items]
    assert name in names, names
    sbx = create(CreateSandboxFromSnapshotParams(snapshot=name))
    assert run(sbx, "cat /snap.txt") == f"snapshot-{RUN}"
    try:
        DAYTONA.snapshot.delete(DAYTONA.snapshot.get(name))
        raise AssertionError("a snapshot in use was deleted")
    except DaytonaConflictError:
        pass
    DAYTONA.delete(sbx)
    MADE.remove(sbx)
    DAYTONA.snapshot.delete(DAYTONA.snapshot.get(name))
    try:
        DAYTONA.snapshot.get(name)
        raise AssertionError("a deleted snapshot was found")
    except DaytonaNotFoundError:
        pass


def test_a_snapshot_of_an_image_string_is_active():
    name = f"snap-img-{RUN}"
    snap = DAYTONA.snapshot.create(CreateSnapshotParams(name=name, image="team/app:v1"))
    try:
        assert snap.state == "active", snap.state
        assert snap.image_name == "team/app:v1", snap.image_name
    finally:
        DAYTONA.snapshot.delete(snap)


def test_a_failing_snapshot_build_is_build_failed_with_the_step_in_its_log():
    name = f"snap-bad-{RUN}"
    logs = []
    image = Image.base("python:3.12-slim").run_commands(f"echo step-{RUN} && exit 7")
    try:
        DAYTONA.snapshot.create(CreateSnapshotParams(name=name, image=image), on_logs=logs.append)
        raise AssertionError("a failing build made an active snapshot")
    except DaytonaError as e:
        assert "build_failed" in str(e) or "failed" in str(e).lower(), e
    try:
        snap = DAYTONA.snapshot.get(name)
        assert snap.state == "build_failed", snap.state
        assert snap.error_reason, "no reason"
        assert f"step-{RUN}" in "\n".join(logs), logs
    finally:
        DAYTONA.snapshot.delete(name)


def test_create_snapshot_and_fork_copy_the_filesystem():
    source = create(CreateSandboxFromSnapshotParams(snapshot="base"))
    run(source, "echo original > /home/user/mine.txt")
    name = f"copy-{RUN}"
    source.create_snapshot(name)
    assert source.state == "started", source.state
    copy = create(CreateSandboxFromSnapshotParams(snapshot=name))
    assert run(copy, "cat /home/user/mine.txt") == "original"
    forked = source.fork(name=f"fork-{RUN}")
    MADE.append(forked)
    assert forked.state == "started" and forked.name == f"fork-{RUN}", (forked.state, forked.name)
    assert run(forked, "cat /home/user/mine.txt") == "original"
    run(forked, "echo forked > /home/user/mine.txt")
    assert run(source, "cat /home/user/mine.txt") == "original", "a fork wrote into its source"
    for s in (copy, forked):
        DAYTONA.delete(s)
        MADE.remove(s)
    DAYTONA.snapshot.delete(name)
    # The fork's copy is a snapshot of its own, listed until it is deleted.
    assert forked.snapshot.startswith("fork-"), forked.snapshot
    DAYTONA.snapshot.delete(forked.snapshot)


def cleanup():
    for sbx in MADE:
        try:
            DAYTONA.delete(sbx)
        except DaytonaError:
            pass


if __name__ == "__main__":
    runner.run(globals(), cleanup)
