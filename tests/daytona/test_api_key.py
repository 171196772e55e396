#!/usr/bin/env python3
"""The real, unmodified `daytona` Python SDK with a key minted by `POST /v1/api-keys`.

Environment: DAYTONA_API_URL (the daemon's URL + `/api`), DAYTONA_API_KEY (the minted user key),
SBX_ADMIN_KEY (the daemon's admin token), SBX_KEY_ID (the minted key's id). Checks: the SDK creates
a sandbox, runs a command in it and lists it with the key; once an admin revokes the key, the SDK's
very next call is refused (DaytonaAuthenticationError). Exit status 0 = every check passed. Run by
crates/sandboxd/tests/daytona_keys.rs.
"""

import os
import sys
import uuid

import httpx
from daytona import (
    CreateSandboxFromSnapshotParams,
    Daytona,
    DaytonaAuthenticationError,
    ListSandboxesQuery,
)

RUN = uuid.uuid4().hex[:8]


def main():
    daytona = Daytona()
    sbx = daytona.create(CreateSandboxFromSnapshotParams(snapshot="base", labels={"suite": RUN}))
    try:
        r = sbx.process.exec("echo minted")
        assert r.exit_code == 0 and r.result.strip() == "minted", (r.exit_code, r.result)
        found = [s.id for s in daytona.list(ListSandboxesQuery(labels={"suite": RUN}))]
        assert found == [sbx.id], found
        print("PASS  create, process.exec, list with a minted user key")
    finally:
        daytona.delete(sbx)
    api = os.environ["DAYTONA_API_URL"].rstrip("/").removesuffix("/api")
    resp = httpx.delete(
        f"{api}/v1/api-keys/{os.environ['SBX_KEY_ID']}",
        headers={"Authorization": f"Bearer {os.environ['SBX_ADMIN_KEY']}"},
        timeout=30,
    )
    assert resp.status_code == 204, (resp.status_code, resp.text)
    try:
        # A generator: the request goes with the first item.
        list(daytona.list(ListSandboxesQuery(labels={"suite": RUN})))
    except DaytonaAuthenticationError:
        pass
    else:
        raise AssertionError("a revoked key must be refused")
    print("PASS  revoked: the next call is refused (DaytonaAuthenticationError)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
