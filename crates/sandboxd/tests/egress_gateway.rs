//! The egress gateway through the real daemon and real sandboxes, against servers of the test's
//! own on the host (`sandboxd_test_support::tls`: HTTP on port 80, HTTPS on 443 and 8443 with a certificate
//! from a test CA that plays the public roots, given to the daemon with `--egress-roots`), never
//! the internet. The servers answer a digest of the `authorization` they were sent, so a script can
//! tell which value arrived while the sandbox never sees one.
//!
//! A sandbox that uses a secret holds its placeholder; its HTTPS requests to a host the secret
//! allows arrive with the value, and so do plain HTTP ones to an address it allows (never to a name:
//! a Host header proves nothing); to another host they arrive with the placeholder; a rule's header
//! arrives on its host, and a rule limited to a port other than 443 on that port; the sandbox's audit log names what was applied and never a
//! value; and no value ever shows in the sandbox or the daemon's log.

mod common;
mod e2b_support;

use common::{e2e, host_address, Daemon};
use sandboxd_test_support::tls::{self, answer, Seen, TestPki};
use serde_json::{json, Value};
use std::net::Ipv4Addr;

/// The test servers on every address: HTTPS on 443 and 8443 with `pki`'s certificate, HTTP on 80.
async fn serve_on_the_host(pki: &TestPki, seen: &Seen) {
    let tls = Some(pki.server.clone());
    for (port, tls) in [(443, tls.clone()), (8443, tls), (80, None)] {
        let listener = tokio::net::TcpListener::bind(("0.0.0.0", port))
            .await
            .unwrap_or_else(|e| panic!("the test server needs port {port}: {e}"));
        tls::serve(listener, tls, seen.clone());
    }
}

/// The hosts the test servers' certificate names.
const HOSTS: [&str; 3] = ["api.test", "other.test", "rule.test"];

async fn created(d: &Daemon, path: &str, body: Value) -> Value {
    let resp = d.post_json(path, &body).await;
    let status = resp.status();
    let text = resp.text().await.unwrap();
    assert_eq!(status, 201, "{path} {body}: {text}");
    serde_json::from_str(&text).unwrap()
}

async fn refused(d: &Daemon, body: Value, why: &str) {
    let resp = d.post_json("/v1/sandboxes", &body).await;
    let status = resp.status();
    let text = resp.text().await.unwrap();
    assert_eq!(status, 400, "{body}: {text}");
    assert!(text.contains(why), "{body}: {text}");
}

#[test]
fn secrets_reach_only_their_hosts_through_the_gateway() {
    e2e(|| async {
        let ip = host_address();
        let pki = TestPki::new(&HOSTS);
        let seen = Seen::default();
        serve_on_the_host(&pki, &seen).await;
        let roots = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(roots.path(), &pki.ca_pem).unwrap();
        let roots_arg = format!("--egress-roots={}", roots.path().display());
        let d = Daemon::start_with(&[&roots_arg], &[]).await;
        let value = format!("sk-gateway-{}-value", std::process::id());
        let rule_value = format!("rk-gateway-{}-value", std::process::id());
        let ip_value = format!("ik-gateway-{}-value", std::process::id());
        created(
            &d,
            "/v1/secrets",
            json!({"name": "k", "value": value, "hosts": ["api.test"]}),
        )
        .await;
        created(
            &d,
            "/v1/secrets",
            json!({"name": "rk", "value": rule_value}),
        )
        .await;
        let ipk = json!({"name": "ipk", "value": ip_value, "hosts": [ip.to_string()]});
        created(&d, "/v1/secrets", ipk).await;

        // Refused before anything is made: a rule for a host the sandbox cannot reach, an unknown
        // secret in a rule.
        let rule = |secret: &str| json!({"rule.test": [{"transform": {"headers": {"authorization": format!("Bearer ${{sandboxd.secrets.{secret}}}")}}}]});
        refused(
            &d,
            json!({"network": {"allowOut": [ip.to_string()], "rules": rule("rk")}}),
            "allowOut",
        )
        .await;
        refused(
            &d,
            json!({"network": {"allowOut": [ip.to_string(), "rule.test"], "rules": rule("nope")}}),
            "unknown secrets: nope",
        )
        .await;

        // The same host with a rule of its own on port 8443, which must then go through the gateway.
        let mut ported = rule("rk");
        ported["rule.test:8443"] =
            json!([{"transform": {"headers": {"authorization": "Port ${sandboxd.secrets.rk}"}}}]);
        let sandbox = created(
            &d,
            "/v1/sandboxes",
            json!({
                "env": {"K": "${sandboxd.secrets.k}", "IPK": "${e2b.secrets.ipk}"},
                "network": {"allowOut": [ip.to_string(), "rule.test"], "rules": ported},
            }),
        )
        .await;
        let id = sandbox["id"].as_str().unwrap().to_string();
        let sh = |script: String| {
            let d = &d;
            let id = id.clone();
            async move { d.exec(&id, &["sh", "-c", &script]).await }
        };
        let echoed = sh("echo \"$K\"".into()).await;
        assert_eq!(echoed.stdout.trim(), "${sandboxd.secrets.k}");

        let curl = |scheme: &str, host: &str, port: u16, extra: &str| {
            format!(
                "curl -sS --max-time 20 {extra} --resolve {host}:{port}:{ip} {scheme}://{host}/p -H \"Authorization: Bearer $K\""
            )
        };
        // Over HTTPS the certificate proves the name: the value goes. Over plain HTTP nothing
        // proves it (a Host header is the sandbox's to write): the placeholder goes as it is.
        let placeholder = "Bearer ${sandboxd.secrets.k}".to_string();
        for (scheme, port, sent) in [
            ("https", 443, format!("Bearer {value}")),
            ("http", 80, placeholder.clone()),
        ] {
            let out = sh(curl(scheme, "api.test", port, "")).await;
            let expected = answer(&sent, 0);
            assert_eq!(
                (out.exit_code, out.stdout.as_str()),
                (0, expected.as_str()),
                "{scheme}: {out:?}"
            );
        }
        // A secret of the server's address goes over plain HTTP too.
        let out = sh(format!(
            "curl -sS --max-time 20 http://{ip}/a -H \"Authorization: Bearer $IPK\""
        ))
        .await;
        assert_eq!(
            out.stdout,
            answer(&format!("Bearer {ip_value}"), 0),
            "{out:?}"
        );
        // Not a host of the secret's: its TLS passes through (the test CA's certificate, which
        // the sandbox does not trust, hence -k) and the placeholder goes as it is.
        let out = sh(curl("https", "other.test", 443, "-k")).await;
        assert_eq!(out.exit_code, 0, "{out:?}");
        // A rule's host: the rule's header, with its secret's value, whatever the client sent.
        let out = sh(format!(
            "curl -sS --max-time 20 --resolve rule.test:443:{ip} https://rule.test/r"
        ))
        .await;
        assert_eq!(out.exit_code, 0, "{out:?}");
        // The same host on 8443: through the gateway only because a rule names that port, and
        // that rule's header, not the portless one's.
        let out = sh(format!(
            "curl -sS --max-time 20 --resolve rule.test:8443:{ip} https://rule.test:8443/r"
        ))
        .await;
        let ported = answer(&format!("Port {rule_value}"), 0);
        assert_eq!(
            (out.exit_code, out.stdout.as_str()),
            (0, ported.as_str()),
            "{out:?}"
        );

        let record = seen.clone();
        let seen = seen.lock().unwrap().clone();
        let auth_of = |host: &str| -> Vec<String> {
            seen.iter()
                .filter(|(h, _)| h.starts_with(host))
                .map(|(_, a)| a.clone())
                .collect()
        };
        assert_eq!(
            auth_of("api.test"),
            vec![format!("Bearer {value}"), placeholder.clone()],
            "{seen:?}"
        );
        assert_eq!(auth_of(&ip.to_string()), vec![format!("Bearer {ip_value}")]);
        assert_eq!(
            auth_of("other.test"),
            vec!["Bearer ${sandboxd.secrets.k}".to_string()]
        );
        assert_eq!(
            auth_of("rule.test"),
            vec![format!("Bearer {rule_value}"), format!("Port {rule_value}")]
        );

        let log = d.get_json(&format!("/v1/sandboxes/{id}/egress")).await;
        let requests = log["requests"].as_array().unwrap();
        assert_eq!(requests.len(), 4, "{log}");
        assert_eq!(requests[0]["host"], "api.test");
        assert_eq!(requests[0]["secrets"], json!(["k"]));
        // The bytes each way: an empty request body, the server's answer back.
        let back = answer(&format!("Bearer {value}"), 0).len();
        assert_eq!(
            (&requests[0]["sent"], &requests[0]["received"]),
            (&json!(0), &json!(back))
        );
        assert_eq!(requests[1]["host"], ip.to_string());
        assert_eq!(requests[1]["secrets"], json!(["ipk"]));
        assert_eq!(requests[2]["rule"], "rule.test");
        assert_eq!(requests[2]["secrets"], json!(["rk"]));
        assert_eq!(requests[3]["rule"], "rule.test:8443");
        let text = log.to_string();
        assert!(
            !text.contains(&value) && !text.contains(&rule_value),
            "{text}"
        );
        let daemon_log = std::fs::read_to_string(d.log_path(1, "err")).unwrap();
        assert!(!daemon_log.contains(&value) && !daemon_log.contains(&rule_value));
        let env = sh("env".into()).await.stdout;
        assert!(!env.contains(&value), "the sandbox holds a value");
        if common::require_gvisor() {
            behind_gvisor(&d, ip, &value, &ip_value, &record).await;
        }
    });
}

/// The same behind gVisor, whose network stack owns the sandbox's address: the gateway reaches out
/// on the host, marked as the sandbox's, and the sandbox's allow list still decides where to.
async fn behind_gvisor(d: &Daemon, ip: Ipv4Addr, value: &str, ip_value: &str, seen: &Seen) {
    let sandbox = created(
        d,
        "/v1/sandboxes",
        json!({
            "isolation": "gvisor",
            "env": {"K": "${sandboxd.secrets.k}", "IPK": "${sandboxd.secrets.ipk}"},
            "network": {"allowOut": [ip.to_string()]},
        }),
    )
    .await;
    let id = sandbox["id"].as_str().unwrap().to_string();
    let before = seen.lock().unwrap().len();
    let out = d
        .exec(
            &id,
            &[
                "sh",
                "-c",
                &format!("curl -sS --max-time 20 --resolve api.test:443:{ip} https://api.test/g -H \"Authorization: Bearer $K\""),
            ],
        )
        .await;
    let expected = answer(&format!("Bearer {value}"), 0);
    assert_eq!(
        (out.exit_code, out.stdout.as_str()),
        (0, expected.as_str()),
        "{out:?}"
    );
    // Plain HTTP to the allowed address, with the address's own secret; again from a source port
    // above 61000, which gVisor's own ephemeral ports reach: it is redirected all the same.
    for local_port in ["", "--local-port 62000-62999"] {
        let out = d
            .exec(
                &id,
                &[
                    "sh",
                    "-c",
                    &format!("curl -sS --max-time 20 {local_port} http://{ip}/g -H \"Authorization: Bearer $IPK\""),
                ],
            )
            .await;
        assert_eq!(
            out.stdout,
            answer(&format!("Bearer {ip_value}"), 0),
            "{local_port}: {out:?}"
        );
    }
    assert_eq!(seen.lock().unwrap().len(), before + 3);
    // An address outside its allow list stays out of reach through the gateway too: the host
    // end of its own pair, where the test servers listen as well (on every address). The marked
    // upstream connection is refused on the host, so the request fails and nothing arrives.
    let script = "gw=$(ip route | awk '/^default/ {print $3}'); test -n \"$gw\" && \
                  curl -sS --max-time 4 http://$gw/ -H \"Authorization: Bearer $IPK\"";
    let out = d.exec(&id, &["sh", "-c", script]).await;
    assert_ne!(out.exit_code, 0, "{out:?}");
    assert!(!out.stderr.contains("test -n"), "{out:?}");
    assert_eq!(
        seen.lock().unwrap().len(),
        before + 3,
        "it reached a server"
    );
    let log = d.get_json(&format!("/v1/sandboxes/{id}/egress")).await;
    assert_eq!(log["requests"][0]["secrets"], json!(["k"]), "{log}");
    assert_eq!(d.delete(&format!("/v1/sandboxes/{id}")).await.status(), 204);
}

/// The vendors' SDKs, unmodified: E2B's `Secret` with `Secret.fill` in `envs` and `network.rules`,
/// and `update_network` moving a rule on the running sandbox and removing them all from another
/// (`tests/e2b/test_secrets.py`), Daytona's `secret` with `secrets=` on create and Python's own TLS
/// in the sandbox (`tests/daytona/test_secrets.py`). Each script checks what reached the servers
/// by the digest they answer; the servers' own record is checked here.
#[test]
fn the_sdks_put_secrets_in_through_the_gateway() {
    e2b_support::e2b_test(async {
        let (e2b, daytona) = e2b_support::python_sdks();
        let ip = host_address().to_string();
        let pki = TestPki::new(&HOSTS);
        let seen = Seen::default();
        serve_on_the_host(&pki, &seen).await;
        let roots = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(roots.path(), &pki.ca_pem).unwrap();
        let mut setup = e2b_support::setup();
        setup.args = vec![format!("--egress-roots={}", roots.path().display())];
        let d = Daemon::start_setup(setup).await;
        let env = [("GATEWAY_HOST_IP", ip.as_str())];
        e2b_support::run_script(&d, &e2b, &["tests/e2b/test_secrets.py"], &env).await;
        let api = format!("{}/api", d.url());
        let daytona_env = [
            ("GATEWAY_HOST_IP", ip.as_str()),
            ("DAYTONA_API_URL", api.as_str()),
            ("DAYTONA_API_KEY", e2b_support::API_KEY),
        ];
        e2b_support::run_script(
            &d,
            &daytona,
            &["tests/daytona/test_secrets.py"],
            &daytona_env,
        )
        .await;
        let seen = seen.lock().unwrap().clone();
        let with_value = |host: &str| {
            seen.iter()
                .filter(|(h, a)| h == host && a.contains("-secret"))
                .count()
        };
        // E2B's (its sandbox's and one with rules alone), Daytona's at create, and Daytona's
        // after update_secrets swapped it.
        assert_eq!(with_value("api.test"), 4, "{seen:?}");
        // E2B's after update_network moved its rule there, before and after a refused update.
        assert_eq!(with_value("other.test"), 2, "{seen:?}");
        assert!(
            seen.iter()
                .all(|(h, a)| h == "api.test" || h == "other.test" || !a.contains("-secret")),
            "{seen:?}"
        );
    });
}
