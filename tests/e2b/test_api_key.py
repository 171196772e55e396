#!/usr/bin/env python3
"""The latest E2B Python SDK with a key minted by `POST /v1/api-keys` (`e2b_` + 40 hex digits).

Environment as for test_sdk.py, with E2B_API_KEY the minted (user) key, plus SBX_ADMIN_KEY (the
daemon's admin token) and SBX_KEY_ID (the minted key's id). Checks: the SDK creates a sandbox and
runs a command with the key; once an admin revokes it, the SDK's very next call is refused as
unauthenticated. Exit status 0 when every check passed.
"""

import os
import sys
import uuid

import requests
from e2b import AuthenticationException, Sandbox

RUN = uuid.uuid4().hex[:12]


def main():
    for var in ("E2B_API_URL", "E2B_SANDBOX_URL", "E2B_API_KEY", "SBX_ADMIN_KEY", "SBX_KEY_ID"):
        if not os.environ.get(var):
            print(f"{var} must be set", file=sys.stderr)
            return 2
    key = os.environ["E2B_API_KEY"]
    assert key.startswith("e2b_") and len(key) == 44, "expected a minted e2b_ key"
    sbx = Sandbox.create(metadata={"suite": "api-key", "run": RUN})
    try:
        r = sbx.commands.run("echo minted")
        assert r.stdout == "minted\n", repr(r.stdout)
        listed = Sandbox.list().next_items()
        assert any(s.sandbox_id == sbx.sandbox_id for s in listed), listed
        print("PASS  create, commands.run, list with a minted user key")
    finally:
        assert sbx.kill() is True
    url = os.environ["E2B_API_URL"].rstrip("/")
    resp = requests.delete(
        f"{url}/v1/api-keys/{os.environ['SBX_KEY_ID']}",
        headers={"Authorization": f"Bearer {os.environ['SBX_ADMIN_KEY']}"},
        timeout=30,
    )
    assert resp.status_code == 204, (resp.status_code, resp.text)
    try:
        Sandbox.list().next_items()
    except AuthenticationException:
        pass
    else:
        raise AssertionError("a revoked key must be refused")
    try:
        Sandbox.create(metadata={"suite": "api-key", "run": RUN})
    except AuthenticationException:
        pass
    else:
        raise AssertionError("a revoked key must not create")
    print("PASS  revoked: the next calls are refused (AuthenticationException)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
