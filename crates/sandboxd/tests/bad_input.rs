//! End-to-end: bad input through the native API gets a clear 4xx in the one error shape, and nothing
//! is created by it. Runs the real `sandboxd` binary (see `common` for isolation and cleanup).

mod common;

use common::{authed_client, e2e, expect_error, id_of, Daemon, TOKEN};
use serde_json::{json, Value};

#[test]
fn bad_input_gets_clear_4xx_and_creates_nothing() {
    e2e(|| async {
        let daemon = Daemon::start().await;
        let http = daemon.http();
        let sandboxes = daemon.endpoint("/v1/sandboxes");
        let raw_create = |body: &'static str| {
            http.post(&sandboxes)
                .header("content-type", "application/json")
                .body(body)
                .send()
        };
        let invalid = Some("invalid_request");
        let cases: &[(&str, &str)] = &[
            ("malformed JSON", r#"{"name": "#),
            ("empty body", ""),
            ("a JSON array", "[1, 2]"),
            // serde would take a struct as an array of its fields: this one would be `{}`.
            ("a JSON array of nulls", "[null, null]"),
            ("unknown field", r#"{"nmae": "x"}"#),
            ("negative memory", r#"{"memoryMB": -5}"#),
            ("zero memory", r#"{"memoryMB": 0}"#),
            ("zero cpu", r#"{"cpu": 0}"#),
            ("a thousand cpus", r#"{"cpu": 1000}"#),
            ("timeout of years", r#"{"timeoutSec": 100000000}"#),
            ("bad env name", r#"{"env": {"1BAD": "x"}}"#),
            ("metadata key with =", r#"{"metadata": {"a=b": "x"}}"#),
            ("memory as a string", r#"{"memoryMB": "512"}"#),
            (
                "a deny list entry that is no address",
                r#"{"network": {"egress": true, "denyOut": ["bad"]}}"#,
            ),
            (
                "a domain name with an empty label in the allow list",
                r#"{"network": {"allowOut": ["example..com"]}}"#,
            ),
            (
                "a wildcard in the middle of a denied name",
                r#"{"network": {"denyOut": ["api.*.example.com"]}}"#,
            ),
            (
                "IPv6 in the deny list",
                r#"{"network": {"egress": true, "denyOut": ["::/0"]}}"#,
            ),
            ("unknown network field", r#"{"network": {"redirects": {}}}"#),
            (
                "a rule for a host the sandbox cannot reach",
                r#"{"network": {"rules": {"a.com": [{"transform": {"headers": {"x-a": "1"}}}]}}}"#,
            ),
            (
                "a rule that sets a framing header",
                r#"{"network": {"egress": true, "rules": {"a.com": [{"transform": {"headers": {"Host": "b.com"}}}]}}}"#,
            ),
        ];
        for (what, body) in cases {
            expect_error(what, raw_create(body).await.unwrap(), 400, invalid).await;
        }
        let long_name = "a".repeat(64);
        for name in [long_name.as_str(), "Bad_Name", "a b", "-a", "a-", ""] {
            let resp = http
                .post(&sandboxes)
                .json(&json!({ "name": name }))
                .send()
                .await
                .unwrap();
            // "" means unnamed and is valid; every other name here is not.
            if name.is_empty() {
                assert_eq!(resp.status(), 201, "an empty name means unnamed");
                let id = id_of(&resp.json::<Value>().await.unwrap());
                let del = http
                    .delete(daemon.endpoint(&format!("/v1/sandboxes/{id}")))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(del.status(), 204);
                continue;
            }
            expect_error(&format!("name {name:?}"), resp, 400, invalid).await;
        }
        let resp = http
            .post(&sandboxes)
            .json(&json!({ "template": "no-such-template" }))
            .send()
            .await
            .unwrap();
        expect_error("unknown template", resp, 404, Some("not_found")).await;

        // The one sandbox this test means to make, and a second create with its name.
        let kept = daemon.create(json!({ "name": "dup" })).await;
        let kept_id = id_of(&kept);
        let resp = http
            .post(&sandboxes)
            .json(&json!({ "name": "dup" }))
            .send()
            .await
            .unwrap();
        expect_error("duplicate name", resp, 409, Some("name_conflict")).await;

        // Paths inside the sandbox must be absolute and free of `..`.
        let files = daemon.endpoint(&format!("/v1/sandboxes/{kept_id}/files"));
        let list_files = daemon.endpoint(&format!("/v1/sandboxes/{kept_id}/files/list"));
        for path in ["/home/user/../../etc/passwd", "../x", "x", "/home/.."] {
            let resp = http
                .get(&files)
                .query(&[("path", path)])
                .send()
                .await
                .unwrap();
            expect_error(&format!("download {path:?}"), resp, 400, invalid).await;
            let resp = http
                .put(&files)
                .query(&[("path", path)])
                .body("x")
                .send()
                .await
                .unwrap();
            expect_error(&format!("upload {path:?}"), resp, 400, invalid).await;
            let resp = http
                .get(&list_files)
                .query(&[("path", path)])
                .send()
                .await
                .unwrap();
            expect_error(&format!("list {path:?}"), resp, 400, invalid).await;
        }
        let resp = http.get(&files).send().await.unwrap();
        expect_error("download without path", resp, 400, invalid).await;
        let etc_passwd = daemon.endpoint(&format!(
            "/v1/sandboxes/{kept_id}/files?path=/home/user/../../etc/passwd"
        ));
        let resp = http.get(&etc_passwd).send().await.unwrap();
        expect_error("literal traversal in the query", resp, 400, invalid).await;

        // Bad commands and ports on a real sandbox.
        let exec = daemon.endpoint(&format!("/v1/sandboxes/{kept_id}/exec"));
        for (what, body) in [
            ("empty cmd", json!({ "cmd": [] })),
            ("empty program", json!({ "cmd": [""] })),
            (
                "unknown exec field",
                json!({ "cmd": ["true"], "shell": true }),
            ),
            ("unknown user", json!({ "cmd": ["true"], "user": "nobody" })),
        ] {
            let resp = http.post(&exec).json(&body).send().await.unwrap();
            expect_error(what, resp, 400, invalid).await;
        }
        let ports = daemon.endpoint(&format!("/v1/sandboxes/{kept_id}/ports"));
        for (what, body) in [
            ("port 0", json!({ "port": 0 })),
            ("port 70000", json!({ "port": 70000 })),
            (
                "protocol gopher",
                json!({ "port": 80, "protocol": "gopher" }),
            ),
        ] {
            let resp = http.post(&ports).json(&body).send().await.unwrap();
            expect_error(what, resp, 400, invalid).await;
        }

        // Listing parameters.
        for query in [
            "limit=0",
            "limit=abc",
            "state=bogus",
            "metadata=novalue",
            "colour=red",
        ] {
            let resp = http
                .get(format!("{sandboxes}?{query}"))
                .send()
                .await
                .unwrap();
            expect_error(&format!("list ?{query}"), resp, 400, invalid).await;
        }

        // Unknown sandboxes.
        let missing = "sbdoesnotexist00";
        let base = daemon.endpoint(&format!("/v1/sandboxes/{missing}"));
        let not_found = Some("not_found");
        for (what, req) in [
            ("get", http.get(&base)),
            ("delete", http.delete(&base)),
            (
                "exec",
                http.post(format!("{base}/exec"))
                    .json(&json!({ "cmd": ["true"] })),
            ),
            (
                "exec stream",
                http.post(format!("{base}/exec/stream"))
                    .json(&json!({ "cmd": ["true"] })),
            ),
            (
                "download",
                http.get(format!("{base}/files"))
                    .query(&[("path", "/etc/hostname")]),
            ),
            (
                "upload",
                http.put(format!("{base}/files"))
                    .query(&[("path", "/tmp/x")])
                    .body("x"),
            ),
            (
                "list files",
                http.get(format!("{base}/files/list"))
                    .query(&[("path", "/")]),
            ),
            (
                "expose",
                http.post(format!("{base}/ports"))
                    .json(&json!({ "port": 80 })),
            ),
            ("ports", http.get(format!("{base}/ports"))),
        ] {
            let resp = req.send().await.unwrap();
            expect_error(
                &format!("{what} of an unknown sandbox"),
                resp,
                404,
                not_found,
            )
            .await;
        }
        let resp = http
            .get(daemon.endpoint("/v1/no-such-route"))
            .send()
            .await
            .unwrap();
        expect_error("unknown /v1 route", resp, 404, Some("not_found")).await;

        // Authentication.
        let anonymous = reqwest::Client::new();
        let resp = anonymous.get(&sandboxes).send().await.unwrap();
        expect_error("no token", resp, 401, Some("unauthorized")).await;
        let resp = anonymous
            .post(&sandboxes)
            .json(&json!({}))
            .send()
            .await
            .unwrap();
        expect_error("create without token", resp, 401, Some("unauthorized")).await;
        let resp = authed_client("wrong-token")
            .get(&sandboxes)
            .send()
            .await
            .unwrap();
        expect_error("wrong token", resp, 401, Some("unauthorized")).await;
        let resp = anonymous
            .get(&sandboxes)
            .header("authorization", format!("Basic {TOKEN}"))
            .send()
            .await
            .unwrap();
        expect_error("token in the wrong scheme", resp, 401, Some("unauthorized")).await;
        let resp = authed_client("wrong-token")
            .post(&sandboxes)
            .json(&json!({ "name": "sneaky" }))
            .send()
            .await
            .unwrap();
        expect_error("create with a wrong token", resp, 401, Some("unauthorized")).await;

        // After all of it: only the sandbox made on purpose, in the store and in the runtime.
        let listed: Vec<String> = daemon.list_all().await.iter().map(id_of).collect();
        assert_eq!(
            listed,
            vec![kept_id.clone()],
            "bad requests must create nothing"
        );
        let on_disk: Vec<String> = std::fs::read_dir(daemon.data_dir().join("runtime/sandboxes"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            on_disk,
            vec![kept_id],
            "bad requests must leave no runtime state behind"
        );
    });
}
