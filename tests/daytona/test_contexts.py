#!/usr/bin/env python3
"""Acceptance test: builds with local files through the real, unmodified `daytona` Python SDK.

Environment: DAYTONA_API_URL (the daemon's URL + `/api`, by a host name the daemon's TLS listener
has a certificate for), DAYTONA_API_KEY (a daemon token); the daemon pulls `team/app:v1` (a busybox
image) through a registry mirror, and the system's trust store holds the certificate's CA. Run by
crates/sandboxd/tests/daytona_contexts.rs.

What it proves:
- `Image.add_local_file` and `add_local_dir` upload their files to the daemon's object store (over
  https, a 7 MiB file in several parts) and the sandbox built from the image has them, byte for
  byte; a snapshot from such an image does too; changed files make another image.
- The store answers the SDK's storage client with the credentials push-access issues, and refuses
  it with a wrong secret or session token (nothing is read or written).
Exit status 0 = every check passed.
"""

import hashlib
import json
import os
import tempfile
import urllib.request
import uuid

import runner
from daytona import (
    CreateSandboxFromImageParams,
    CreateSandboxFromSnapshotParams,
    CreateSnapshotParams,
    Daytona,
    DaytonaError,
    Image,
)
from daytona._sync.object_storage import ObjectStorage
from obstore.exceptions import PermissionDeniedError

RUN = uuid.uuid4().hex[:8]
DAYTONA = Daytona()
MADE = []
WORK = tempfile.mkdtemp(prefix="daytona-ctx-")
ONE = os.path.join(WORK, "one.txt")
TREE = os.path.join(WORK, "tree")
BIG = os.urandom(7 * 1024 * 1024)


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data)


write(ONE, f"one {RUN}\n".encode())
write(os.path.join(TREE, "a.txt"), b"a in the tree\n")
write(os.path.join(TREE, "sub", "b.txt"), b"b below it\n")
write(os.path.join(TREE, "big.bin"), BIG)


def create(params, **kwargs):
    params.labels = {**(params.labels or {}), "contexts": RUN}
    sbx = DAYTONA.create(params, timeout=300, **kwargs)
    MADE.append(sbx)
    return sbx


def run(sbx, command):
    out = sbx.process.exec(command)
    assert out.exit_code == 0, f"{command}: {out.exit_code} {out.result}"
    return out.result.strip()


def assert_tree(sbx, where):
    assert run(sbx, f"cat {where}/a.txt") == "a in the tree"
    assert run(sbx, f"cat {where}/sub/b.txt") == "b below it"
    digest = run(sbx, f"sha256sum {where}/big.bin").split()[0]
    assert digest == hashlib.sha256(BIG).hexdigest(), digest


def test_a_sandbox_from_an_image_with_local_files_has_them():
    image = Image.base("team/app:v1").add_local_file(ONE, "/opt/one.txt").add_local_dir(TREE, "/opt/tree")
    logs = []
    sbx = create(CreateSandboxFromImageParams(image=image), on_snapshot_create_logs=logs.append)
    assert sbx.state == "started", sbx.state
    assert run(sbx, "cat /opt/one.txt") == f"one {RUN}"
    assert_tree(sbx, "/opt/tree")
    assert run(sbx, "cat /app/hello.txt") == "hello from the image"
    assert "COPY" in "\n".join(logs), logs


def test_a_snapshot_from_an_image_with_local_files_makes_sandboxes_with_them():
    name = f"ctx-{RUN}"
    image = Image.base("team/app:v1").add_local_dir(TREE, "/data")
    snap = DAYTONA.snapshot.create(CreateSnapshotParams(name=name, image=image))
    assert snap.state == "active", snap.state
    sbx = create(CreateSandboxFromSnapshotParams(snapshot=name))
    assert_tree(sbx, "/data")
    DAYTONA.delete(sbx)
    MADE.remove(sbx)
    DAYTONA.snapshot.delete(DAYTONA.snapshot.get(name))


def test_changed_local_files_make_another_image():
    write(ONE, f"changed {RUN}\n".encode())
    sbx = create(CreateSandboxFromImageParams(image=Image.base("team/app:v1").add_local_file(ONE, "/opt/one.txt")))
    assert run(sbx, "cat /opt/one.txt") == f"changed {RUN}"


def push_access():
    url = os.environ["DAYTONA_API_URL"] + "/object-storage/push-access"
    req = urllib.request.Request(url, headers={"Authorization": "Bearer " + os.environ["DAYTONA_API_KEY"]})
    with urllib.request.urlopen(req) as answer:
        return json.load(answer)


def storage(access, **changes):
    fields = {
        "endpoint_url": access["storageUrl"],
        "aws_access_key_id": access["accessKey"],
        "aws_secret_access_key": access["secret"],
        "aws_session_token": access["sessionToken"],
        "bucket_name": access["bucket"],
        **changes,
    }
    return ObjectStorage(region=access["region"], **fields)


def test_the_store_serves_issued_credentials_and_refuses_others():
    access = push_access()
    assert access["storageUrl"].startswith("https://"), access
    good = storage(access)
    key = f"{access['organizationId']}/probe-{RUN}/context.tar"
    assert not good._file_exists_in_s3(key)
    good.store.put(key, b"probe bytes")
    assert good._file_exists_in_s3(key)
    assert bytes(good.store.get(key).bytes()) == b"probe bytes"
    listed = [m["path"] for m in good.store.list(prefix=f"{access['organizationId']}/probe-{RUN}").collect()]
    assert listed == [key], listed
    for bad in (storage(access, aws_secret_access_key="wrong"), storage(access, aws_session_token="forged")):
        try:
            bad._file_exists_in_s3(key)
            raise AssertionError("the store answered a request not signed with issued credentials")
        except PermissionDeniedError:
            pass
        try:
            bad.store.put(f"{key}.bad", b"x")
            raise AssertionError("the store took a write not signed with issued credentials")
        except PermissionDeniedError:
            pass
    assert not good._file_exists_in_s3(f"{key}.bad")
    good.store.delete(key)
    assert not good._file_exists_in_s3(key)


def cleanup():
    for sbx in MADE:
        try:
            DAYTONA.delete(sbx)
        except DaytonaError:
            pass


if __name__ == "__main__":
    runner.run(globals(), cleanup)
