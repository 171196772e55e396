#!/usr/bin/env python3
"""The real `daytona` Python SDK's warm pools (`daytona.warm_pool`) against the daemon.

Run by crates/sandboxd/tests/warm_pool.rs with an admin key. A pool for the `base` snapshot is
created, fills, serves a create (which takes the create's environment), is resized, refused a
second time, and deleted; the Rust side then checks the daemon counted the create as a hit.
"""

import time
import uuid

from daytona import CreateSandboxFromSnapshotParams, Daytona
from daytona_api_client.exceptions import ConflictException, NotFoundException

RUN = uuid.uuid4().hex[:8]


def base_pool(daytona):
    return next((p for p in daytona.warm_pool.list() if p.snapshot == "base"), None)


def main():
    daytona = Daytona()
    pool = daytona.warm_pool.create("base", pool=2)
    assert (pool.id, pool.snapshot, pool.pool) == ("base", "base", 2), pool
    try:
        daytona.warm_pool.create("base", pool=1)
        raise AssertionError("a second pool for one snapshot was made")
    except ConflictException:
        pass
    deadline = time.monotonic() + 60
    while (base_pool(daytona) or pool).current_size < 2:
        assert time.monotonic() < deadline, base_pool(daytona)
        time.sleep(0.1)
    sbx = daytona.create(CreateSandboxFromSnapshotParams(
        snapshot="base", env_vars={"FROM_CREATE": RUN}, labels={"suite": RUN}))
    try:
        out = sbx.process.exec("echo $FROM_CREATE")
        assert out.result.strip() == RUN, out
        # Daytona's sandboxes may send out by default, unlike the pool's: it got a default route.
        routes = sbx.process.exec("cat /proc/net/route").result.splitlines()[1:]
        assert any(r.split()[1] == "00000000" for r in routes if r.strip()), routes
    finally:
        sbx.delete()
    resized = daytona.warm_pool.update("base", pool=1)
    assert resized.pool == 1, resized
    daytona.warm_pool.delete("base")
    assert base_pool(daytona) is None
    try:
        daytona.warm_pool.update("base", pool=3)
        raise AssertionError("a deleted pool was updated")
    except NotFoundException:
        pass
    print("daytona warm pool: ok")


if __name__ == "__main__":
    main()
