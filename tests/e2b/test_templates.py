#!/usr/bin/env python3
"""Acceptance test: templates and snapshots through the real, unmodified `e2b` Python SDK.

Environment as for test_sdk.py (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY). Exit status 0 = every
check passed. Run by crates/sandboxd/tests/e2b_templates.rs.
"""

import inspect
import os
import sys
import tempfile
import traceback
import uuid

from e2b import BuildException, Sandbox, SandboxException, Template

RUN = uuid.uuid4().hex[:8]


def new_sandbox(template=None):
    # A unique metadata value: identical create bodies within 10 s share one sandbox.
    metadata = {"suite": "templates-py", "run": RUN, "n": uuid.uuid4().hex}
    if template is None:
        return Sandbox.create(metadata=metadata)
    return Sandbox.create(template, metadata=metadata)


def context_dir():
    ctx = tempfile.mkdtemp(prefix="e2b-ctx-")
    os.makedirs(os.path.join(ctx, "app", "sub"))
    with open(os.path.join(ctx, "app", "hello.txt"), "w") as f:
        f.write("hello from copy\n")
    with open(os.path.join(ctx, "app", "sub", "deep.txt"), "w") as f:
        f.write("deep\n")
    with open(os.path.join(ctx, "tool.sh"), "w") as f:
        f.write("#!/bin/sh\necho tool ran\n")
    return ctx


def test_build_copies_runs_and_sets_envs():
    ctx = context_dir()
    template = (
        Template(file_context_path=ctx)
        .from_template("base")
        .copy("app", "/srv/app")
        .copy("tool.sh", "/srv/bin/tool.sh", mode=0o755)
        .run_cmd("mkdir -p /srv/out && chmod 777 /srv/out && cat /srv/app/hello.txt > /srv/out/copied", user="root")
        .run_cmd("id -un > /srv/out/who && echo built-by-run > /srv/out/run.txt")
        .set_envs({"GREETING": "hi there", "QUOTED": 'a "b" $c'})
    )
    alias = f"tpl-{RUN}"
    logs = []
    info = Template.build(template, alias, on_build_logs=logs.append)
    assert info.template_id == alias, info
    messages = [str(getattr(l, "message", l)) for l in logs]
    assert any("Uploaded 'app'" in m for m in messages), messages
    assert any("Step" in m and "RUN" in m for m in messages), messages
    assert Template.exists(alias)
    assert not Template.exists(f"missing-{RUN}")

    sbx = new_sandbox(alias)
    try:
        assert sbx.files.read("/srv/app/hello.txt") == "hello from copy\n"
        assert sbx.files.read("/srv/app/sub/deep.txt") == "deep\n"
        assert sbx.files.read("/srv/out/copied") == "hello from copy\n"
        assert sbx.files.read("/srv/out/run.txt") == "built-by-run\n"
        # Steps run as `user` unless the step says otherwise.
        assert sbx.files.read("/srv/out/who") == "user\n"
        r = sbx.commands.run("/srv/bin/tool.sh")
        assert r.stdout == "tool ran\n", repr(r.stdout)
        r = sbx.commands.run('echo "$GREETING|$QUOTED"')
        assert r.stdout == 'hi there|a "b" $c\n', repr(r.stdout)
    finally:
        sbx.kill()

    # The same files again: the server has them, the SDK skips the upload.
    logs2 = []
    Template.build(
        Template(file_context_path=ctx).from_template("base").copy("app", "/srv/app"),
        f"tpl2-{RUN}",
        on_build_logs=logs2.append,
    )
    messages = [str(getattr(l, "message", l)) for l in logs2]
    assert any("already cached" in m for m in messages), messages
    assert Sandbox.delete_snapshot(f"tpl2-{RUN}") is True


def test_a_failing_run_raises_the_build_error_naming_the_step():
    template = (
        Template()
        .from_template("base")
        .set_envs({"A": "1"})
        .run_cmd("echo about to fail; exit 3")
    )
    try:
        Template.build(template, f"bad-{RUN}")
    except BuildException as e:
        message = str(e)
        assert "step 2" in message, message
        assert "exited with code 3" in message, message
    else:
        raise AssertionError("the build should have failed")


def test_rebuilding_a_ready_name_is_a_conflict():
    alias = f"tpl-{RUN}"
    try:
        Template.build(Template().from_template("base").run_cmd("true"), alias)
    except BuildException as e:
        assert "already exists" in str(e), str(e)
    else:
        raise AssertionError("a second build of a ready name should be refused")


def test_snapshot_then_create_from_it_list_and_delete():
    sbx = new_sandbox()
    from_snapshot = None
    try:
        sbx.files.write("/home/user/note.txt", "written before the snapshot")
        snap = sbx.create_snapshot()
        assert snap.snapshot_id.startswith(f"snapshot-{sbx.sandbox_id}-"), snap
        assert snap.names == [snap.snapshot_id], snap
        named = sbx.create_snapshot(f"snap-{RUN}")
        assert named.snapshot_id == f"snap-{RUN}", named

        try:
            sbx.create_snapshot(mode="full")
        except SandboxException as e:
            assert "memory snapshots are not supported" in str(e), str(e)
        else:
            raise AssertionError("a memory snapshot should be refused")

        from_snapshot = new_sandbox(snap.snapshot_id)
        assert from_snapshot.files.read("/home/user/note.txt") == "written before the snapshot"

        page = sbx.list_snapshots()
        ids = [s.snapshot_id for s in page.next_items()]
        assert ids == [snap.snapshot_id, named.snapshot_id], ids
        assert not page.has_next
        # Paging: one a page, by x-next-token.
        paged = Sandbox.list_snapshots(sandbox_id=sbx.sandbox_id, limit=1)
        seen = []
        while paged.has_next:
            seen.extend(s.snapshot_id for s in paged.next_items())
        assert seen == ids, seen
        by_name = Sandbox.list_snapshots(name=named.snapshot_id).next_items()
        assert [s.snapshot_id for s in by_name] == [named.snapshot_id], by_name

        # In use by a sandbox: refused; then deleted; then gone.
        try:
            Sandbox.delete_snapshot(snap.snapshot_id)
        except SandboxException as e:
            assert "used by" in str(e), str(e)
        else:
            raise AssertionError("deleting a snapshot in use should be refused")
        from_snapshot.kill()
        from_snapshot = None
        assert Sandbox.delete_snapshot(snap.snapshot_id) is True
        assert Sandbox.delete_snapshot(snap.snapshot_id) is False
        assert Sandbox.delete_snapshot(named.snapshot_id) is True
    finally:
        if from_snapshot is not None:
            from_snapshot.kill()
        sbx.kill()


def test_snapshot_of_an_unknown_sandbox_is_not_found():
    from e2b import SandboxNotFoundException

    try:
        Sandbox.create_snapshot("nosuchsandbox")
    except SandboxNotFoundException:
        pass
    else:
        raise AssertionError("expected SandboxNotFoundException")


def private_image(var):
    """The image named by environment variable `var` in the private registry, with its user and
    password; `(None, None, None)` when unset (the test is then skipped, saying so)."""
    image = os.environ.get(var)
    if not image:
        print(f"skip {inspect.stack()[1].function}: {var} unset")
        return None, None, None
    return image, os.environ["E2B_TEST_REGISTRY_USER"], os.environ["E2B_TEST_REGISTRY_PASSWORD"]


def test_from_a_private_registry_image():
    """Needs E2B_TEST_IMAGE (a busybox image in a registry asking for E2B_TEST_REGISTRY_USER and
    E2B_TEST_REGISTRY_PASSWORD); run on its own by the Rust test that starts that registry."""
    image, user, password = private_image("E2B_TEST_IMAGE")
    if not image:
        return
    # Without the credentials the pull is refused: the SDK's build error, at the base step.
    try:
        Template.build(Template().from_image(image).run_cmd("true"), f"noauth-{RUN}")
    except BuildException as e:
        assert "base image" in str(e), str(e)
    else:
        raise AssertionError("a pull without credentials should fail")
    template = (
        Template()
        .from_image(image, username=user, password=password)
        .run_cmd("mkdir -p /srv && echo from-busybox > /srv/run.txt", user="root")
        .set_workdir("/srv")
    )
    alias = f"busybox-{RUN}"
    Template.build(template, alias)
    sbx = new_sandbox(alias)
    try:
        assert sbx.files.read("/srv/run.txt") == "from-busybox\n"
        assert sbx.files.read("/bin/busybox", format="bytes")[:4] == b"\x7fELF"
    finally:
        sbx.kill()
    assert Sandbox.delete_snapshot(alias) is True


def test_a_template_is_the_users_to_write():
    # As in E2B, steps run as `user`: what a template copies without naming a user, and the
    # directory set_workdir makes, are the user's, so the sandbox's default user can write there
    # (the SDK's own example copies into /home/user/, which must stay the user's home).
    ctx = context_dir()
    template = (
        Template(file_context_path=ctx)
        .from_template("base")
        .copy("tool.sh", "/app/")
        .copy("tool.sh", "/home/user/")
        .set_workdir("/app")
        .set_workdir("/work/area")
    )
    alias = f"as-user-{RUN}"
    Template.build(template, alias)
    sbx = new_sandbox(alias)
    try:
        r = sbx.commands.run(
            "echo x > /app/state.txt && echo y > /home/user/new.txt && touch /work/area/f && pwd && id -un"
        )
        assert r.stdout == "/work/area\nuser\n", repr(r.stdout)
        assert sbx.files.read("/app/state.txt") == "x\n"
    finally:
        sbx.kill()
    assert Sandbox.delete_snapshot(alias) is True


def test_a_template_from_an_image_is_the_users_to_write():
    # The first thing a new user tries: `from_image(...).copy(...).set_workdir(...)`, then a command
    # writing there as the sandbox's default user. The image (a busybox with a `bash`, which
    # `commands.run` starts; no `user` account) is the private registry's, as above.
    image, user, password = private_image("E2B_TEST_BASH_IMAGE")
    if not image:
        return
    template = (
        Template(file_context_path=context_dir())
        .from_image(image, username=user, password=password)
        .copy("tool.sh", "/app/")
        .set_workdir("/app")
    )
    alias = f"image-as-user-{RUN}"
    Template.build(template, alias)
    sbx = new_sandbox(alias)
    try:
        r = sbx.commands.run("echo x > /app/state.txt && pwd && id -un && sh /app/tool.sh")
        assert r.stdout == "/app\nuser\ntool ran\n", repr(r.stdout)
        assert sbx.files.read("/app/state.txt") == "x\n"
    finally:
        sbx.kill()
    assert Sandbox.delete_snapshot(alias) is True


def test_start_cmd_runs_and_create_waits_for_ready():
    from e2b import wait_for_port

    template = (
        Template()
        .from_template("base")
        .run_cmd("mkdir -p /srv/www && echo started-by-template > /srv/www/index.html", user="root")
        .set_start_cmd("cd /srv/www && python3 -m http.server 8123", wait_for_port(8123))
    )
    alias = f"start-{RUN}"
    Template.build(template, alias)
    sbx = new_sandbox(alias)
    try:
        # No wait here: the create answered once the ready check passed.
        r = sbx.commands.run(
            "python3 -c \"import urllib.request; "
            "print(urllib.request.urlopen('http://127.0.0.1:8123/index.html').read().decode().strip())\""
        )
        assert r.stdout.strip() == "started-by-template", r
    finally:
        sbx.kill()


def main():
    tests = [v for k, v in globals().items() if k.startswith("test_") and callable(v)]
    only = sys.argv[1:]
    failed = []
    for test in tests:
        if only and test.__name__ not in only:
            continue
        try:
            test()
            print(f"ok   {test.__name__}", flush=True)
        except Exception:
            failed.append(test.__name__)
            print(f"FAIL {test.__name__}", flush=True)
            traceback.print_exc()
    if failed:
        print(f"{len(failed)} failed: {failed}")
        sys.exit(1)
    print("all passed")


if __name__ == "__main__":
    main()
