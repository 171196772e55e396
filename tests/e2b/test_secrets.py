#!/usr/bin/env python3
"""The real `e2b` Python SDK with secrets and network rules, through the daemon's egress gateway.

Run by crates/sandboxd/tests/egress_gateway.rs, which serves HTTPS for api.test and other.test on
port 443 of GATEWAY_HOST_IP (a certificate from a test CA the daemon trusts with --egress-roots);
each answer is `auth-sha256: <hex>` of the Authorization header that arrived (and the body's
length), so this script can
tell which value reached the server while the sandbox never sees one.
"""

import hashlib
import os
import sys
import uuid

from e2b import Sandbox, SandboxException, Secret

RUN = uuid.uuid4().hex[:12]
IP = os.environ["GATEWAY_HOST_IP"]


def digest(text):
    return f"auth-sha256: {hashlib.sha256(text.encode()).hexdigest()}\nbody: 0\n"


def main():
    name, value = f"key-{RUN}", f"sk-{RUN}-secret"
    Secret.create(name, value)
    sbx = None
    try:
        rule = {"transform": {"headers": {"Authorization": "Bearer " + Secret.fill(name)}}}
        sbx = Sandbox.create(
            envs={"K": Secret.fill(name)},
            network={"allow_out": [IP], "rules": {"api.test": [rule]}},
            metadata={"suite": "secrets", "run": RUN},
        )
        placeholder = sbx.commands.run('echo "$K"').stdout.strip()
        assert placeholder == Secret.fill(name), placeholder
        curl = f"curl -sS --max-time 20 --resolve {{h}}:443:{IP} https://{{h}}/"
        # The rule's host: the rule's header arrives, with the secret's value.
        got = sbx.commands.run(curl.format(h="api.test")).stdout
        assert got == digest(f"Bearer {value}"), got
        # Another host the sandbox may reach, without a rule: the placeholder goes as it is (its
        # TLS passes through untouched: the test CA is not the sandbox's, hence -k).
        got = sbx.commands.run(curl.format(h="other.test") + ' -k -H "Authorization: Bearer $K"').stdout
        assert got == digest(f"Bearer {Secret.fill(name)}"), got
        env = sbx.commands.run("env").stdout
        assert value not in env, "the sandbox holds the value"
        print("PASS  Secret.create, envs with Secret.fill, network.rules through the gateway")

        # The rules change while it runs: the next connections meet the new ones. The rule moves
        # to other.test (whose TLS the gateway now ends, with the CA the sandbox trusts: no -k)
        # with another header; api.test's TLS then passes through untouched.
        moved = {"transform": {"headers": {"Authorization": "Token " + Secret.fill(name)}}}
        sbx.update_network({"allow_out": [IP], "rules": {"other.test": [moved]}})
        got = sbx.commands.run(curl.format(h="other.test")).stdout
        assert got == digest(f"Token {value}"), got
        got = sbx.commands.run(curl.format(h="api.test") + " -k").stdout
        assert got == digest(""), got
        # A rule on a port that does not pass the gateway is refused and changes nothing. The
        # sandbox names a secret in its environment too, so it may drop its rules: the gateway
        # stays in its path for the secret.
        try:
            sbx.update_network({"allow_out": [IP], "rules": {"other.test:9443": [moved]}})
            raise AssertionError("a rule on a port outside the gateway was taken")
        except SandboxException as e:
            assert "may not name port 9443" in str(e), e
        got = sbx.commands.run(curl.format(h="other.test")).stdout
        assert got == digest(f"Token {value}"), got
        sbx.update_network({"allow_out": [IP]})
        got = sbx.commands.run(curl.format(h="other.test") + " -k").stdout
        assert got == digest(""), got
        print("PASS  update_network changes the gateway's rules of a running sandbox")

        # A sandbox behind the gateway for its rules alone keeps its egress when they all go: the
        # gateway passes its connections through untouched (its TLS is the test CA's, hence -k).
        ruled = Sandbox.create(network={"allow_out": [IP], "rules": {"api.test": [rule]}},
                               metadata={"suite": "secrets", "run": RUN})
        try:
            got = ruled.commands.run(curl.format(h="api.test")).stdout
            assert got == digest(f"Bearer {value}"), got
            ruled.update_network({"allow_out": [IP]})
            got = ruled.commands.run(curl.format(h="api.test") + " -k").stdout
            assert got == digest(""), got
        finally:
            ruled.kill()
        print("PASS  a sandbox whose rules all went keeps its egress through the gateway")
    finally:
        if sbx is not None:
            sbx.kill()
        Secret.destroy(name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
