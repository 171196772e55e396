//! Snapshots of running sandboxes as E2B names and lists them: each a template made by the
//! snapshot flow ([`Service::snapshot`]).

use super::*;

/// The name a snapshot gets when the request names none.
pub(super) fn snapshot_name(sandbox: &str, n: usize) -> String {
    format!("snapshot-{sandbox}-{n}")
}

impl Service {
    /// Snapshots sandbox `sandbox` as template `name`, or as `snapshot-<id>-<n>` (the first free
    /// `n`) when it names none.
    pub async fn e2b_snapshot(
        &self,
        sandbox: &str,
        name: Option<&str>,
    ) -> Result<TemplateRecord, ServiceError> {
        if let Some(name) = name {
            return self.snapshot(sandbox, name).await;
        }
        let id = self.get(sandbox).await?.id;
        let taken = self
            .list_templates()
            .await?
            .iter()
            .filter(|t| t.source["snapshotOf"] == id.as_str())
            .count();
        let mut n = taken + 1;
        loop {
            match self.snapshot(&id, &snapshot_name(&id, n)).await {
                Err(ServiceError::Conflict(m))
                    if m.contains("already exists") && n < taken + 64 =>
                {
                    n += 1
                }
                other => return other,
            }
        }
    }

    /// Ready snapshots (templates with `source.snapshotOf`), oldest first, of `sandbox` and named
    /// `name` when given; one page of `limit` after `cursor` (`<createdAt>:<name>`), and the
    /// cursor of the next page.
    pub async fn e2b_snapshots(
        &self,
        sandbox: Option<&str>,
        name: Option<&str>,
        limit: usize,
        cursor: Option<&str>,
    ) -> Result<(Vec<TemplateRecord>, Option<String>), ServiceError> {
        let after = match cursor {
            Some(c) => {
                let (at, n) = c
                    .split_once(':')
                    .and_then(|(at, n)| Some((at.parse::<i64>().ok()?, n.to_string())))
                    .ok_or_else(|| bad("invalid nextToken"))?;
                Some((at, n))
            }
            None => None,
        };
        let mut all: Vec<TemplateRecord> = self
            .list_templates()
            .await?
            .into_iter()
            .filter(|t| t.state == TemplateState::Ready)
            .filter(|t| t.source["snapshotOf"].is_string())
            .filter(|t| sandbox.is_none_or(|s| t.source["snapshotOf"] == s))
            .filter(|t| name.is_none_or(|n| t.name == n))
            .filter(|t| {
                after
                    .as_ref()
                    .is_none_or(|(at, n)| (t.created_at, &t.name) > (*at, n))
            })
            .collect();
        all.sort_by(|a, b| (a.created_at, &a.name).cmp(&(b.created_at, &b.name)));
        let next = (all.len() > limit)
            .then(|| {
                all.get(limit - 1)
                    .map(|t| format!("{}:{}", t.created_at, t.name))
            })
            .flatten();
        all.truncate(limit);
        Ok((all, next))
    }
}
