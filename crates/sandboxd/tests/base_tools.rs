//! The `base` template as an agent uses it: `pip install` and `npm install -g` work for the
//! sandbox's user without touching the read-only system, and what they install is on `PATH`.

mod common;

use common::{e2e, Daemon};

/// Makes a wheel of a one-module package `hello_sbx` with a `hello-sbx` script, in the sandbox's
/// home, offline (a wheel is a zip with its metadata).
const MAKE_WHEEL: &str = r#"
import zipfile
name = "hello_sbx-1.0-py3-none-any.whl"
files = {
    "hello_sbx.py": "def main():\n    print('hello from pip')\n",
    "hello_sbx-1.0.dist-info/METADATA": "Metadata-Version: 2.1\nName: hello-sbx\nVersion: 1.0\n",
    "hello_sbx-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    "hello_sbx-1.0.dist-info/entry_points.txt": "[console_scripts]\nhello-sbx = hello_sbx:main\n",
    "hello_sbx-1.0.dist-info/RECORD": "",
}
with zipfile.ZipFile(name, "w") as z:
    for path, text in files.items():
        z.writestr(path, text)
print(name)
"#;

#[test]
fn pip_and_npm_install_for_the_user_in_base() {
    if !std::path::Path::new("/usr/lib/python3/dist-packages/pip").exists() {
        eprintln!("SKIPPED: the host has no python3-pip");
        return;
    }
    e2e(|| async {
        let d = Daemon::start().await;
        let id = d.create_id().await;
        let wheel = d.exec(&id, &["python3", "-c", MAKE_WHEEL]).await;
        assert_eq!(wheel.exit_code, 0, "{wheel:?}");
        let wheel = wheel.stdout.trim().to_string();
        let pip = d
            .exec(
                &id,
                &[
                    "sh",
                    "-c",
                    &format!("python3 -m pip install --no-index {wheel} 2>&1"),
                ],
            )
            .await;
        assert_eq!(pip.exit_code, 0, "pip install failed: {}", pip.stdout);
        assert!(!pip.stdout.contains("externally-managed"), "{}", pip.stdout);
        let run = d.exec(&id, &["sh", "-c", "hello-sbx"]).await;
        assert_eq!(
            (run.exit_code, run.stdout.trim()),
            (0, "hello from pip"),
            "the installed script is not on PATH: {run:?}"
        );
        let imported = d
            .exec(
                &id,
                &[
                    "python3",
                    "-c",
                    "import hello_sbx; print(hello_sbx.__file__)",
                ],
            )
            .await;
        assert!(
            imported.stdout.starts_with("/home/user/.local/"),
            "{imported:?}"
        );

        if std::path::Path::new("/usr/bin/npm").exists() {
            let pkg = r#"mkdir -p /home/user/hello-npm && cd /home/user/hello-npm &&
                printf '{"name":"hello-npm","version":"1.0.0","bin":{"hello-npm":"cli.js"}}' > package.json &&
                printf '#!/usr/bin/env node\nconsole.log("hello from npm")\n' > cli.js &&
                npm install -g --offline --no-audit --no-fund /home/user/hello-npm 2>&1"#;
            let npm = d.exec(&id, &["sh", "-c", pkg]).await;
            assert_eq!(npm.exit_code, 0, "npm install -g failed: {}", npm.stdout);
            let run = d.exec(&id, &["sh", "-c", "hello-npm"]).await;
            assert_eq!(
                (run.exit_code, run.stdout.trim()),
                (0, "hello from npm"),
                "{run:?}"
            );
        }
    });
}
