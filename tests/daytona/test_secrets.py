#!/usr/bin/env python3
"""The real `daytona` Python SDK with secrets, through the daemon's egress gateway.

Run by crates/sandboxd/tests/egress_gateway.rs, which serves HTTPS for api.test and other.test on
port 443 of GATEWAY_HOST_IP (see tests/e2b/test_secrets.py). Python in the sandbox sends the
request with `requests` (which trusts the gateway's CA through REQUESTS_CA_BUNDLE), with names
resolved to GATEWAY_HOST_IP as curl's --resolve would.
"""

import hashlib
import os
import sys
import uuid

from daytona import CreateSandboxFromSnapshotParams, CreateSecretParams, Daytona

RUN = uuid.uuid4().hex[:8]
IP = os.environ["GATEWAY_HOST_IP"]

# Python `requests` (its CA bundle from REQUESTS_CA_BUNDLE), the host names resolved to the test
# servers.
REQUEST = """
import os, socket, requests
real = socket.getaddrinfo
socket.getaddrinfo = lambda host, *a, **k: real("{ip}" if host.endswith(".test") else host, *a, **k)
auth = {{"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]}}
answer = requests.get("https://{host}/", headers=auth, timeout=20)
answer.raise_for_status()
print(answer.text, end="")
"""


def digest(text):
    return f"auth-sha256: {hashlib.sha256(text.encode()).hexdigest()}\nbody: 0\n"


def main():
    daytona = Daytona()
    name, value = f"dt_key_{RUN}", f"sk-{RUN}-secret"
    secret = daytona.secret.create(CreateSecretParams(name=name, value=value, hosts=["api.test"]))
    sbx = None
    try:
        sbx = daytona.create(CreateSandboxFromSnapshotParams(
            snapshot="base", labels={"suite": RUN}, secrets={"OPENAI_API_KEY": name},
            network_allow_list=f"{IP}/32"))
        shown = sbx.process.exec("echo $OPENAI_API_KEY").result.strip()
        assert shown == secret.placeholder, shown
        got = sbx.process.exec(f"python3 -c '{REQUEST.format(ip=IP, host='api.test')}'").result
        assert got == digest(f"Bearer {value}"), got
        # Another host: its TLS is not the gateway's to end, so it is the test CA's, which the
        # sandbox does not trust; the request fails rather than carry the value anywhere.
        other = sbx.process.exec(f"python3 -c '{REQUEST.format(ip=IP, host='other.test')}'")
        assert other.exit_code != 0 and value not in other.result, other
        assert value not in sbx.process.exec("env").result, "the sandbox holds the value"
        print("PASS  secret.create with hosts, secrets= on create, Python requests through the gateway")
    finally:
        if sbx is not None:
            daytona.delete(sbx)
        daytona.secret.delete(secret.id)
    return 0


if __name__ == "__main__":
    sys.exit(main())
