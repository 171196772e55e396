//! `sbx warm-pools ls|set`: sandboxes of a template booted ahead of creates.
//!
//! Contract: text output is a table for people; `--json` prints the API's bodies unchanged (an
//! array of `WarmPool` for `ls`, one `WarmPool` for `set`).

use crate::cli::WarmPoolsCommand;
use crate::error::SbxError;
use crate::output::Output;
use sandboxd_client::types::WarmPool;
use sandboxd_client::Client;
use std::process::ExitCode;

fn row(p: &WarmPool) -> Vec<String> {
    vec![
        p.template.clone(),
        p.size.to_string(),
        p.ready.to_string(),
        p.warming.to_string(),
        p.hits.to_string(),
        p.misses.to_string(),
    ]
}

const HEADER: [&str; 6] = ["TEMPLATE", "SIZE", "READY", "WARMING", "HITS", "MISSES"];

/// `sbx warm-pools …`.
pub async fn run(
    client: &Client,
    out: Output,
    cmd: WarmPoolsCommand,
) -> Result<ExitCode, SbxError> {
    let pools = match cmd {
        WarmPoolsCommand::Ls => client.warm_pools().await?.warm_pools,
        WarmPoolsCommand::Set { template, size } => {
            let pool = client.set_warm_pool(&template, size).await?;
            if out.json {
                out.json(&pool)?;
                return Ok(ExitCode::SUCCESS);
            }
            vec![pool]
        }
    };
    if out.json {
        out.json(&pools)?;
    } else {
        out.table(&HEADER, &pools.iter().map(row).collect::<Vec<_>>())?;
    }
    Ok(ExitCode::SUCCESS)
}
