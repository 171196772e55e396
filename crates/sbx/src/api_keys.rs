//! `sbx api-keys create|list|delete`.
//!
//! Contract: `create` prints the new key's secret alone on stdout (with `--json`, the whole
//! `CreatedApiKey`); it is the only time the secret is shown. `list` prints a table (or the keys'
//! JSON) without secrets. `delete` tries every id, prints each one deleted, and exits 1 when any
//! failed.

use crate::cli::ApiKeysCommand;
use crate::error::SbxError;
use crate::output::Output;
use sandboxd_client::types::{CreateApiKey, KeyScope};
use sandboxd_client::Client;
use std::process::ExitCode;

fn scope_name(scope: KeyScope) -> &'static str {
    match scope {
        KeyScope::Admin => "admin",
        KeyScope::User => "user",
    }
}

/// `sbx api-keys …`.
pub async fn run(client: &Client, out: Output, cmd: ApiKeysCommand) -> Result<ExitCode, SbxError> {
    match cmd {
        ApiKeysCommand::Create { name, scope } => {
            let scope = match scope.as_str() {
                "admin" => KeyScope::Admin,
                "user" => KeyScope::User,
                other => return Err(SbxError::Usage(format!("unknown scope {other:?}"))),
            };
            let created = client.create_api_key(&CreateApiKey { name, scope }).await?;
            if out.json {
                out.json(&created)?;
            } else {
                out.line(&created.key)?;
                out.note(&format!(
                    "API key {} ({}): save it now, it cannot be shown again",
                    created.api_key.id,
                    scope_name(created.api_key.scope)
                ));
            }
            Ok(ExitCode::SUCCESS)
        }
        ApiKeysCommand::List => {
            let keys = client.api_keys().await?.api_keys;
            if out.json {
                out.json(&keys)?;
            } else {
                let rows: Vec<Vec<String>> = keys
                    .into_iter()
                    .map(|k| {
                        vec![
                            k.id,
                            k.name,
                            scope_name(k.scope).to_string(),
                            k.prefix.unwrap_or_else(|| {
                                if k.configured { "(configured)" } else { "" }.into()
                            }),
                            k.created_at,
                        ]
                    })
                    .collect();
                out.table(&["ID", "NAME", "SCOPE", "PREFIX", "CREATED"], &rows)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        ApiKeysCommand::Delete { ids } => {
            out.delete_each(&ids, |id| async move { client.delete_api_key(&id).await })
                .await
        }
    }
}
