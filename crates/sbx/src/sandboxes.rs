//! `sbx create`, `ls`, `get`, `pause`, `resume`, `rm`, `expose`: sandbox lifecycle and ports.
//!
//! Contract: text output is for people (id, table, `key: value` lines, URL); `--json` prints the API's
//! bodies unchanged (`Sandbox`, an array of `Sandbox`, `ExposedPort`; for `rm`, an array of deleted
//! ids). `rm` tries every id, reports each failure on stderr as it happens, and exits 1 at the end if
//! any failed.

use crate::cli::{CreateArgs, LsArgs};
use crate::error::SbxError;
use crate::output::Output;
use sandboxd_client::types::{
    CreateSandbox, Lifecycle, NetworkPolicy, OnTimeout, Sandbox, VolumeMount,
};
use sandboxd_client::{Client, ListQuery};
use std::process::ExitCode;

/// `sbx create`.
pub async fn create(client: &Client, out: Output, args: CreateArgs) -> Result<ExitCode, SbxError> {
    let body = CreateSandbox {
        name: args.name,
        template: args.template,
        image: args.image,
        registry_auth: None,
        cpu: args.cpu,
        memory_mb: args.memory,
        disk_mb: args.disk,
        isolation: args.isolation,
        env: (!args.env.is_empty()).then(|| args.env.into_iter().collect()),
        metadata: (!args.metadata.is_empty()).then(|| args.metadata.into_iter().collect()),
        timeout_sec: args.timeout,
        network: (args.egress || !args.allow_out.is_empty() || !args.deny_out.is_empty())
            .then_some(NetworkPolicy {
                egress: args.egress,
                allow_out: args.allow_out,
                deny_out: args.deny_out,
                ..Default::default()
            }),
        lifecycle: args.pause_on_timeout.then_some(Lifecycle {
            on_timeout: OnTimeout::Pause,
            auto_resume: args.auto_resume,
            pause_mode: Default::default(),
        }),
        volumes: (!args.volumes.is_empty()).then(|| {
            args.volumes
                .into_iter()
                .map(|v| VolumeMount {
                    name: v.name,
                    path: v.path,
                    read_only: v.read_only,
                    subpath: None,
                })
                .collect()
        }),
    };
    let sandbox = client
        .create(&body, args.idempotency_key.as_deref())
        .await?;
    print(out, sandbox)
}

/// Prints `sandbox`: its id, or with `--json` the whole body.
pub fn print(out: Output, sandbox: Sandbox) -> Result<ExitCode, SbxError> {
    if out.json {
        out.json(&sandbox)?;
    } else {
        out.line(&sandbox.id)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `sbx fork`: each fork's id (or `error: <message>`), one per line; exits 1 when any failed.
pub fn print_forks(
    out: Output,
    results: sandboxd_client::types::ForkResults,
) -> Result<ExitCode, SbxError> {
    let failed = results.forks.iter().any(|f| f.error.is_some());
    if out.json {
        out.json(&results)?;
    } else {
        for fork in &results.forks {
            match (&fork.sandbox, &fork.error) {
                (Some(sandbox), _) => out.line(&sandbox.id)?,
                (None, Some(e)) => out.line(&format!("error: {}", e.message))?,
                (None, None) => out.line("error: no answer for this fork")?,
            }
        }
    }
    Ok(if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

/// `sbx ls`.
pub async fn ls(client: &Client, out: Output, args: LsArgs) -> Result<ExitCode, SbxError> {
    let query = ListQuery {
        metadata: args.metadata,
        state: args.state,
        ..ListQuery::default()
    };
    let (sandboxes, more) = if args.all {
        (client.list_all(&query).await?, false)
    } else {
        let page = client.list(&query).await?;
        (page.sandboxes, page.next_cursor.is_some())
    };
    if out.json {
        out.json(&sandboxes)?;
    } else {
        let rows: Vec<Vec<String>> = sandboxes
            .into_iter()
            .map(|s| vec![s.id, s.name, s.state, s.template, s.created_at])
            .collect();
        out.table(&["ID", "NAME", "STATE", "TEMPLATE", "CREATED"], &rows)?;
    }
    if more {
        out.note("(more sandboxes: pass --all to list every page)");
    }
    Ok(ExitCode::SUCCESS)
}

/// `sbx get`.
pub async fn get(client: &Client, out: Output, id: &str) -> Result<ExitCode, SbxError> {
    let sandbox = client.get(id).await?;
    if out.json {
        out.json(&sandbox)?;
    } else {
        out.key_values(&describe(sandbox))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn describe(s: Sandbox) -> Vec<(&'static str, String)> {
    let metadata = s
        .metadata
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ");
    let mut pairs = vec![
        ("id", s.id),
        ("name", s.name),
        ("state", s.state),
        ("template", s.template),
        ("image", s.image.unwrap_or_default()),
        ("cpu", s.cpu.to_string()),
        ("memoryMB", s.memory_mb.to_string()),
        ("diskMB", s.disk_mb.to_string()),
        ("isolation", s.isolation.clone()),
        ("createdAt", s.created_at),
        ("expiresAt", s.expires_at.unwrap_or_else(|| "never".into())),
        ("onTimeout", on_timeout(&s.lifecycle)),
        ("metadata", metadata),
    ];
    if let Some(reason) = s.failure_reason {
        pairs.push(("failureReason", reason));
    }
    pairs
}

/// What the timeout does, in words.
fn on_timeout(l: &Lifecycle) -> String {
    match (l.on_timeout, l.auto_resume) {
        (OnTimeout::Kill, _) => "delete".into(),
        (OnTimeout::Pause, false) => "pause".into(),
        (OnTimeout::Pause, true) => "pause (auto-resume)".into(),
    }
}

/// `sbx rm`.
pub async fn rm(client: &Client, out: Output, ids: &[String]) -> Result<ExitCode, SbxError> {
    out.delete_each(ids, |id| async move { client.delete(&id).await })
        .await
}

/// `sbx expose`.
pub async fn expose(
    client: &Client,
    out: Output,
    id: &str,
    port: u16,
    protocol: &str,
) -> Result<ExitCode, SbxError> {
    let exposed = client.expose(id, port, protocol).await?;
    if out.json {
        out.json(&exposed)?;
    } else {
        out.line(&exposed.public_url)?;
    }
    Ok(ExitCode::SUCCESS)
}
