//! `sandboxd doctor`: whether this host can run sandboxes, and how well.
//!
//! Contract:
//! - Every check names one thing the daemon uses and ends `ok`, `degraded` (sandboxes run, without
//!   something: a limit, a tier, a range of their own) or `missing` (sandboxes cannot run, or the
//!   daemon would refuse to start as configured), with a one-line fix for anything not ok.
//! - The checks are the daemon's own code run on this host with the same configuration `serve`
//!   would read (flags, environment, config file): the cgroup detection, the disk-quota choice (in
//!   a scratch directory beside the data dir, undone after), the idmapped-mount probe, the gVisor
//!   probe. Nothing is left behind and no running daemon is disturbed.
//! - [`host_checks`] are the ones without any side effect; `serve` logs them at start.
//! - The exit status is 1 when any check is `missing`.

mod checks;

pub(crate) use checks::per_sandbox_limit;
pub use checks::{host_checks, run};

use serde_json::json;
use std::process::ExitCode;

/// How a check ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok,
    Degraded,
    Missing,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::Degraded => "degraded",
            Status::Missing => "missing",
        }
    }
}

/// One check's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    /// What was checked, e.g. `cgroups`.
    pub name: &'static str,
    pub status: Status,
    /// What was found.
    pub detail: String,
    /// How to make it ok (for anything not ok).
    pub fix: Option<String>,
}

impl Check {
    pub(crate) fn ok(name: &'static str, detail: impl Into<String>) -> Self {
        Self {
            name,
            status: Status::Ok,
            detail: detail.into(),
            fix: None,
        }
    }

    pub(crate) fn degraded(
        name: &'static str,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self::not_ok(name, Status::Degraded, detail.into(), fix.into())
    }

    pub(crate) fn missing(
        name: &'static str,
        detail: impl Into<String>,
        fix: impl Into<String>,
    ) -> Self {
        Self::not_ok(name, Status::Missing, detail.into(), fix.into())
    }

    fn not_ok(name: &'static str, status: Status, detail: String, fix: String) -> Self {
        Self {
            name,
            status,
            detail,
            fix: Some(fix),
        }
    }
}

/// The checks as lines for a terminal: status, name, detail, and the fix indented below.
pub fn render(checks: &[Check]) -> String {
    let width = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    for c in checks {
        out.push_str(&format!(
            "{:<8} {:<width$}  {}\n",
            c.status.as_str(),
            c.name,
            c.detail
        ));
        if let Some(fix) = &c.fix {
            out.push_str(&format!("{:<8} {:<width$}  fix: {fix}\n", "", ""));
        }
    }
    out.push_str(&summary(checks));
    out.push('\n');
    out
}

/// One line: how many checks ended how, and whether sandboxes can run.
pub fn summary(checks: &[Check]) -> String {
    let count = |s: Status| checks.iter().filter(|c| c.status == s).count();
    let (ok, degraded, missing) = (
        count(Status::Ok),
        count(Status::Degraded),
        count(Status::Missing),
    );
    let verdict = if missing > 0 {
        "sandboxes cannot run here as configured"
    } else if degraded > 0 {
        "sandboxes run here, without what is degraded"
    } else {
        "this host runs sandboxes with everything sandboxd offers"
    };
    format!("{ok} ok, {degraded} degraded, {missing} missing: {verdict}")
}

/// The checks as one JSON document.
pub fn to_json(checks: &[Check]) -> serde_json::Value {
    let list: Vec<_> = checks
        .iter()
        .map(|c| {
            json!({"name": c.name, "status": c.status.as_str(), "detail": c.detail, "fix": c.fix})
        })
        .collect();
    json!({
        "checks": list,
        "canRun": !checks.iter().any(|c| c.status == Status::Missing),
        "summary": summary(checks),
    })
}

/// 1 when anything is missing, else 0.
pub fn exit_code(checks: &[Check]) -> ExitCode {
    if checks.iter().any(|c| c.status == Status::Missing) {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// Logs each check at the level it deserves (`serve` at start).
pub fn log(checks: &[Check]) {
    for c in checks {
        let fix = c.fix.as_deref().unwrap_or_default();
        match c.status {
            Status::Ok => tracing::info!(check = c.name, detail = %c.detail, "host: ok"),
            Status::Degraded => {
                tracing::warn!(check = c.name, detail = %c.detail, fix, "host: degraded")
            }
            Status::Missing => {
                tracing::error!(check = c.name, detail = %c.detail, fix, "host: missing")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anything_missing_fails_and_the_summary_says_so() {
        let fine = vec![
            Check::ok("kernel", "6.1"),
            Check::degraded("disk quota", "none", "use XFS"),
        ];
        assert_eq!(exit_code(&fine), ExitCode::SUCCESS);
        assert!(summary(&fine).starts_with("1 ok, 1 degraded, 0 missing"));
        let mut broken = fine.clone();
        broken.push(Check::missing("root", "uid 1000", "run as root"));
        assert_eq!(exit_code(&broken), ExitCode::FAILURE);
        let json = to_json(&broken);
        assert_eq!(json["canRun"], false);
        assert_eq!(json["checks"][2]["fix"], "run as root");
        let text = render(&broken);
        assert!(text.contains("missing  root"), "{text}");
        assert!(text.contains("fix: run as root"), "{text}");
    }
}
