//! Code run as a script in a fresh process (Daytona's `process.code_run`): nothing carries over
//! from one run to the next, unlike the code interpreter's contexts ([`crate::code`]).
//!
//! Contract:
//! - Python runs as `python3 -u -c SCRIPT_RUNNER MARK CODE ARG...` ([`sandboxd_charts`]): the code
//!   is `__main__` with `sys.argv == ["-", ARG...]`, and each figure it shows or leaves open comes
//!   back as a chart (with its PNG), whatever matplotlib backend it picked. JavaScript runs as
//!   `node -e CODE ARG...`; bash as `bash -c CODE bash ARG...`.
//! - The run goes through the one exec flow ([`Service::exec`]): the sandbox's user, the given
//!   environment, the user's home as its directory.
//! - An interpreter the image lacks is a conflict at once, naming it; code longer than one
//!   argument may be (the kernel's `MAX_ARG_STRLEN`) is the caller's error; a run that outlives
//!   its timeout is killed, and its output says so ([`ScriptOutput::timed_out`]).

use crate::{Service, ServiceError};
use sandboxd_api_types as api;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// The longest code passed as one argument (Linux's `MAX_ARG_STRLEN`, with its terminating NUL).
pub const MAX_CODE_BYTES: usize = 128 * 1024 - 1;

/// Languages a script runs in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptLanguage {
    Python,
    JavaScript,
    Bash,
}

impl ScriptLanguage {
    /// Parses a language name, case-insensitively (`python` when none is given).
    pub fn parse(name: Option<&str>) -> Result<Self, ServiceError> {
        match name.map(|n| n.trim().to_ascii_lowercase()).as_deref() {
            None | Some("") | Some("python") | Some("python3") | Some("py") => Ok(Self::Python),
            Some("javascript") | Some("js") | Some("node") => Ok(Self::JavaScript),
            Some("bash") | Some("sh") => Ok(Self::Bash),
            Some(other) => Err(ServiceError::InvalidRequest(format!(
                "code in {other:?} cannot run as a script here: python, javascript and bash can \
                 (run other languages with exec)"
            ))),
        }
    }

    /// The program a script in this language runs under.
    pub fn program(self) -> &'static str {
        match self {
            Self::Python => "python3",
            Self::JavaScript => "node",
            Self::Bash => "bash",
        }
    }

    /// The command that runs `code` with `argv`, chart lines marked with `mark`.
    fn command(self, mark: &str, code: String, argv: Vec<String>) -> Vec<String> {
        let mut cmd: Vec<String> = match self {
            Self::Python => vec![
                "python3".into(),
                "-u".into(),
                "-c".into(),
                sandboxd_charts::SCRIPT_RUNNER.into(),
                mark.into(),
                code,
            ],
            Self::JavaScript => vec!["node".into(), "-e".into(), code],
            Self::Bash => vec!["bash".into(), "-c".into(), code, "bash".into()],
        };
        cmd.extend(argv);
        cmd
    }
}

/// A script to run.
#[derive(Debug, Clone)]
pub struct Script {
    pub language: ScriptLanguage,
    pub code: String,
    /// Its arguments (`sys.argv[1:]`, `process.argv.slice(1)`, `$1…`).
    pub argv: Vec<String>,
    pub envs: Option<BTreeMap<String, String>>,
    /// Killed after this long (none: runs until it ends).
    pub timeout: Option<Duration>,
}

/// What a script did.
#[derive(Debug, Clone, PartialEq)]
pub struct ScriptOutput {
    /// It was killed at its timeout.
    pub timed_out: bool,
    pub exit_code: i32,
    /// Standard output, without the chart lines.
    pub stdout: String,
    pub stderr: String,
    /// The figures it showed or left open, in order (Python only).
    pub charts: Vec<serde_json::Value>,
}

impl Service {
    /// Runs `script` in a fresh process in sandbox `key` and waits for it to end.
    pub async fn run_script(
        &self,
        key: &str,
        script: Script,
    ) -> Result<ScriptOutput, ServiceError> {
        if script.code.len() > MAX_CODE_BYTES || script.code.contains('\0') {
            return Err(ServiceError::InvalidRequest(format!(
                "the code must be at most {MAX_CODE_BYTES} bytes without NUL; upload a longer \
                 script as a file and run it with exec"
            )));
        }
        let mark = format!("\u{1e}sandboxd-chart-{:016x}:", rand::random::<u64>());
        let program = script.language.program();
        let request = api::ExecRequest {
            cmd: script.language.command(&mark, script.code, script.argv),
            env: script.envs,
            timeout_ms: script.timeout.map(|t| t.as_millis().max(1) as u64),
            ..Default::default()
        };
        let started = Instant::now();
        let result = self.exec(key, request).await.map_err(|e| match e {
            ServiceError::InvalidRequest(m) if m.starts_with("error starting process") => {
                ServiceError::Conflict(format!(
                    "`{program}` cannot start in this sandbox ({m}): code in this language needs \
                     an image that has it"
                ))
            }
            other => other,
        })?;
        // The agent kills a command at its deadline with SIGKILL.
        let timed_out = script
            .timeout
            .is_some_and(|limit| result.exit_code == 128 + 9 && started.elapsed() >= limit);
        let (stdout, charts) = sandboxd_charts::split_charts(&result.stdout, &mark);
        Ok(ScriptOutput {
            timed_out,
            exit_code: result.exit_code,
            stdout,
            stderr: result.stderr,
            charts,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn languages_and_their_aliases_parse_and_others_are_refused() {
        assert_eq!(ScriptLanguage::parse(None).unwrap(), ScriptLanguage::Python);
        assert_eq!(
            ScriptLanguage::parse(Some(" JS ")).unwrap(),
            ScriptLanguage::JavaScript
        );
        assert_eq!(
            ScriptLanguage::parse(Some("bash")).unwrap(),
            ScriptLanguage::Bash
        );
        let refused = ScriptLanguage::parse(Some("cobol")).unwrap_err();
        assert!(matches!(refused, ServiceError::InvalidRequest(m) if m.contains("cobol")));
    }

    #[test]
    fn the_code_and_its_arguments_are_separate_arguments() {
        let cmd = ScriptLanguage::Python.command("M:", "print(1)".into(), vec!["a b".into()]);
        assert_eq!(cmd[..3], ["python3", "-u", "-c"]);
        assert_eq!(cmd[4..], ["M:", "print(1)", "a b"]);
        let cmd = ScriptLanguage::Bash.command("M:", "echo $1".into(), vec!["x".into()]);
        assert_eq!(cmd, ["bash", "-c", "echo $1", "bash", "x"]);
        let cmd = ScriptLanguage::JavaScript.command("M:", "1".into(), vec![]);
        assert_eq!(cmd, ["node", "-e", "1"]);
    }
}
