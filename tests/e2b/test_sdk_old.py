#!/usr/bin/env python3
"""Acceptance test of the older create path: `e2b==2.20.0`, which creates with `POST /sandboxes`
(body `NewSandbox`, with `secure`) and connects with `POST /sandboxes/{id}/connect`.

Environment as for test_sdk.py (E2B_API_URL, E2B_SANDBOX_URL, E2B_API_KEY; E2B_DOMAIN unset). Exit
status 0 when every check passed.
"""

import os
import sys
import uuid
from importlib.metadata import version

from e2b import CommandExitException, Sandbox

RUN = uuid.uuid4().hex[:12]


def main():
    for var in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY"):
        if not os.environ.get(var):
            print(f"{var} must be set", file=sys.stderr)
            return 2
    print(f"e2b {version('e2b')} against {os.environ['E2B_API_URL']}")
    sbx = Sandbox.create(
        metadata={"suite": "sdk-py-old", "run": RUN}, envs={"OLD_SDK": "yes"}
    )
    try:
        r = sbx.commands.run("echo $OLD_SDK; echo err >&2")
        assert r.stdout == "yes\n", repr(r.stdout)
        assert r.stderr == "err\n", repr(r.stderr)
        try:
            sbx.commands.run("exit 7")
        except CommandExitException as e:
            assert e.exit_code == 7, e.exit_code
        else:
            raise AssertionError("a non-zero exit must raise CommandExitException")
        sbx.files.write("/home/user/old.txt", "written by the old sdk")
        assert sbx.files.read("/home/user/old.txt") == "written by the old sdk"
        info = sbx.get_info()
        assert info.metadata["run"] == RUN, info.metadata
        # connect (POST /sandboxes/{id}/connect). The sandbox 2.20 returns sends its envd calls with
        # only the X-Access-Token (no E2b-Sandbox-Id): the daemon routes them by that token.
        same = Sandbox.connect(sbx.sandbox_id)
        assert same.sandbox_id == sbx.sandbox_id
        assert same.get_info().state.value == "running"
        r = same.commands.run("echo via-connect")
        assert r.stdout == "via-connect\n", repr(r.stdout)
        assert same.files.read("/home/user/old.txt") == "written by the old sdk"
        print("PASS  create (POST /sandboxes), commands.run, files, get_info, connect + envd")
    finally:
        assert sbx.kill() is True
    assert Sandbox.kill(sbx.sandbox_id) is False
    print("PASS  kill")
    return 0


if __name__ == "__main__":
    sys.exit(main())
