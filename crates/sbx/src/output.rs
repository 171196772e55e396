//! Everything the CLI writes to its stdout and stderr goes through here.
//!
//! Contract: results go to stdout — JSON (pretty, one document) under `--json`, text otherwise; errors go
//! to stderr — `error: <message> (<code>)`, or one line of ApiError JSON under `--json`. Exec output is
//! written raw and flushed per chunk, so it appears as it arrives. Write failures on stdout (e.g. a closed
//! pipe) are returned as errors, never panics; failures writing to stderr are ignored (there is nowhere
//! left to report them).

use crate::error::SbxError;
use serde::Serialize;
use std::io::{self, Write};

/// The output mode of one invocation.
#[derive(Debug, Clone, Copy)]
pub struct Output {
    /// `--json`.
    pub json: bool,
}

impl Output {
    /// Runs `delete` on each of `names` even when one fails: prints each deleted name (under `--json`,
    /// one list of them at the end) and each failure; exit code 1 when any failed.
    pub async fn delete_each<F, Fut, E>(
        &self,
        names: &[String],
        delete: F,
    ) -> Result<std::process::ExitCode, SbxError>
    where
        F: Fn(String) -> Fut,
        Fut: std::future::Future<Output = Result<(), E>>,
        E: Into<SbxError>,
    {
        let (mut deleted, mut failed) = (Vec::new(), false);
        for name in names {
            match delete(name.clone()).await {
                Ok(()) => {
                    if !self.json {
                        self.line(name)?;
                    }
                    deleted.push(name);
                }
                Err(e) => {
                    failed = true;
                    self.error(&e.into());
                }
            }
        }
        if self.json {
            self.json(&deleted)?;
        }
        Ok(if failed {
            std::process::ExitCode::FAILURE
        } else {
            std::process::ExitCode::SUCCESS
        })
    }

    /// Writes `value` as pretty JSON.
    pub fn json<T: Serialize>(&self, value: &T) -> Result<(), SbxError> {
        let text = serde_json::to_string_pretty(value)
            .map_err(|e| SbxError::Output(io::Error::other(e)))?;
        self.line(&text)
    }

    /// Writes one line of text.
    pub fn line(&self, text: &str) -> Result<(), SbxError> {
        writeln!(io::stdout().lock(), "{text}").map_err(SbxError::Output)
    }

    /// Writes `key: value` lines with the values aligned.
    pub fn key_values(&self, pairs: &[(&str, String)]) -> Result<(), SbxError> {
        let width = pairs.iter().map(|(k, _)| k.len() + 1).max().unwrap_or(0);
        let mut out = io::stdout().lock();
        for (key, value) in pairs {
            writeln!(out, "{:<width$} {value}", format!("{key}:")).map_err(SbxError::Output)?;
        }
        Ok(())
    }

    /// Writes a table with a header row; columns are padded to their widest cell.
    pub fn table(&self, header: &[&str], rows: &[Vec<String>]) -> Result<(), SbxError> {
        let mut out = io::stdout().lock();
        let header: Vec<String> = header.iter().map(|h| h.to_string()).collect();
        let widths = column_widths(&header, rows);
        for row in std::iter::once(&header).chain(rows) {
            writeln!(out, "{}", table_line(&widths, row)).map_err(SbxError::Output)?;
        }
        Ok(())
    }

    /// Writes exec output bytes to stdout, flushed.
    pub fn stdout_bytes(&self, bytes: &[u8]) -> Result<(), SbxError> {
        let mut out = io::stdout().lock();
        out.write_all(bytes)
            .and_then(|()| out.flush())
            .map_err(SbxError::Output)
    }

    /// Writes exec output bytes to stderr, flushed.
    pub fn stderr_bytes(&self, bytes: &[u8]) -> Result<(), SbxError> {
        let mut err = io::stderr().lock();
        err.write_all(bytes)
            .and_then(|()| err.flush())
            .map_err(SbxError::Output)
    }

    /// Reports an error on stderr.
    pub fn error(&self, error: &SbxError) {
        let text = if self.json {
            serde_json::to_string(&error.to_api_error()).unwrap_or_else(|_| error.message())
        } else {
            format!("error: {} ({})", error.message(), error.code())
        };
        let _ = writeln!(io::stderr().lock(), "{text}");
    }

    /// A note for humans on stderr (not shown under `--json`).
    pub fn note(&self, text: &str) {
        if !self.json {
            let _ = writeln!(io::stderr().lock(), "{text}");
        }
    }
}

fn column_widths(header: &[String], rows: &[Vec<String>]) -> Vec<usize> {
    (0..header.len())
        .map(|col| {
            std::iter::once(header)
                .chain(rows.iter().map(Vec::as_slice))
                .filter_map(|r| r.get(col))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect()
}

fn table_line(widths: &[usize], row: &[String]) -> String {
    let mut line = String::new();
    for (col, cell) in row.iter().enumerate() {
        if col + 1 == row.len() {
            line.push_str(cell);
        } else {
            let pad = widths.get(col).copied().unwrap_or(0) + 2;
            line.push_str(&format!("{cell:<pad$}"));
        }
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_columns_align_on_the_widest_cell() {
        let header: Vec<String> = vec!["ID".into(), "NAME".into(), "STATE".into()];
        let rows = vec![
            vec!["sb-1".into(), "".into(), "running".into()],
            vec!["sb-10000".into(), "web".into(), "stopped".into()],
        ];
        let widths = column_widths(&header, &rows);
        let lines: Vec<String> = std::iter::once(&header)
            .chain(&rows)
            .map(|r| table_line(&widths, r))
            .collect();
        assert_eq!(
            lines,
            [
                "ID        NAME  STATE",
                "sb-1            running",
                "sb-10000  web   stopped"
            ]
        );
    }
}
