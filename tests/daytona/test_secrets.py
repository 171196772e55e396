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
auth = {{"Authorization": "Bearer " + os.environ["{var}"]}}
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
        got = sbx.process.exec(f"python3 -c '{REQUEST.format(ip=IP, host='api.test', var='OPENAI_API_KEY')}'").result
        assert got == digest(f"Bearer {value}"), got
        # Another host: its TLS is not the gateway's to end, so it is the test CA's, which the
        # sandbox does not trust; the request fails rather than carry the value anywhere.
        other = sbx.process.exec(f"python3 -c '{REQUEST.format(ip=IP, host='other.test', var='OPENAI_API_KEY')}'")
        assert other.exit_code != 0 and value not in other.result, other
        assert value not in sbx.process.exec("env").result, "the sandbox holds the value"
        print("PASS  secret.create with hosts, secrets= on create, Python requests through the gateway")
        update_secrets_and_env(daytona, sbx, secret)
    finally:
        if sbx is not None:
            daytona.delete(sbx)
        daytona.secret.delete(secret.id)
    return 0


def update_secrets_and_env(daytona, sbx, old):
    """update_secrets swaps the secret a running sandbox holds; update_env changes its env."""
    name, value = f"dt_key2_{RUN}", f"sk2-{RUN}-secret"
    new = daytona.secret.create(CreateSecretParams(name=name, value=value, hosts=["api.test"]))
    try:
        sbx.update_secrets({"OTHER_KEY": name})
        env = sbx.process.exec("env").result
        assert f"OTHER_KEY={new.placeholder}" in env and "OPENAI_API_KEY" not in env, env
        got = sbx.process.exec(f"python3 -c '{REQUEST.format(ip=IP, host='api.test', var='OTHER_KEY')}'").result
        assert got == digest(f"Bearer {value}"), got
        # The detached secret is no longer the sandbox's: its placeholder goes out as text.
        detached = sbx.process.exec(
            f"OPENAI_API_KEY='{old.placeholder}' python3 -c '{REQUEST.format(ip=IP, host='api.test', var='OPENAI_API_KEY')}'").result
        assert detached == digest(f"Bearer {old.placeholder}"), detached
        try:
            sbx.update_secrets({"K": "no_such_secret"})
            raise AssertionError("an unknown secret was taken")
        except Exception as e:  # the SDK's DaytonaError
            assert "no_such_secret" in str(e), e
        sbx.update_secrets({})
        assert "OTHER_KEY" not in sbx.process.exec("env").result
        sbx.update_env({"MY_VAR": "given later"}, unset=["HOME_UNUSED"])
        assert sbx.process.exec("echo $MY_VAR").result.strip() == "given later"
        sbx.update_env({}, unset=["MY_VAR"])
        assert sbx.process.exec("echo ${MY_VAR-unset}").result.strip() == "unset"
        # A sandbox made without secrets does not pass the gateway: it cannot take any later.
        plain = daytona.create(CreateSandboxFromSnapshotParams(snapshot="base", labels={"suite": RUN}))
        try:
            plain.update_secrets({"K": name})
            raise AssertionError("a sandbox outside the gateway took a secret")
        except AssertionError:
            raise
        except Exception as e:
            assert "egress gateway" in str(e), e
        finally:
            daytona.delete(plain)
        print("PASS  update_secrets attaches, swaps and detaches; update_env sets and unsets")
    finally:
        daytona.secret.delete(new.id)


if __name__ == "__main__":
    sys.exit(main())
