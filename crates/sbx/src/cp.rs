//! `sbx cp SRC DST`: one file between the local machine and a sandbox, docker-cp style.
//!
//! Contract:
//! - A location is `ID:/abs/path` (a sandbox) when it has a `:` before any `/` and does not start with
//!   `/` or `.`; `-` is stdin (as SRC) or stdout (as DST); anything else is a local path. Exactly one
//!   side must be a sandbox. A sandbox path must be absolute.
//! - Upload: a local directory is refused; a sandbox DST ending in `/` gets the source's file name.
//! - Download: an existing local directory as DST gets the sandbox file's name; the file is written to a
//!   temporary sibling and renamed into place, so a failed download never leaves a partial DST.
//! - Nothing is printed on success; with `--json`, `{"src","dst"}` (except when DST is stdout, which
//!   then carries only the file's bytes).

use crate::error::SbxError;
use crate::output::Output;
use sandboxd_client::Client;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// One side of a copy.
#[derive(Debug, Clone, PartialEq)]
pub enum Location {
    /// `-`: stdin or stdout.
    Stdio,
    /// A local path.
    Local(PathBuf),
    /// `ID:/abs/path`.
    Sandbox {
        /// Sandbox id.
        id: String,
        /// Absolute path inside it.
        path: String,
    },
}

/// Parses one side of `sbx cp`.
pub fn parse_location(arg: &str) -> Result<Location, SbxError> {
    if arg.is_empty() {
        return Err(SbxError::Usage("empty path".into()));
    }
    if arg == "-" {
        return Ok(Location::Stdio);
    }
    if arg.starts_with('/') || arg.starts_with('.') {
        return Ok(Location::Local(PathBuf::from(arg)));
    }
    match arg.split_once(':') {
        Some((id, path)) if !id.contains('/') => {
            if id.is_empty() {
                return Err(SbxError::Usage(format!("missing sandbox id in {arg:?}")));
            }
            if !path.starts_with('/') {
                return Err(SbxError::Usage(format!(
                    "sandbox path must be absolute, as in {id}:/abs/path (got {arg:?})"
                )));
            }
            Ok(Location::Sandbox {
                id: id.to_string(),
                path: path.to_string(),
            })
        }
        _ => Ok(Location::Local(PathBuf::from(arg))),
    }
}

/// What `sbx cp` will do.
#[derive(Debug, PartialEq)]
pub enum Plan {
    /// Local (or stdin, when `None`) → sandbox.
    Upload {
        /// Source file; `None` is stdin.
        from: Option<PathBuf>,
        /// Sandbox id.
        id: String,
        /// Destination path inside the sandbox.
        path: String,
    },
    /// Sandbox → local (or stdout, when `None`).
    Download {
        /// Sandbox id.
        id: String,
        /// Source path inside the sandbox.
        path: String,
        /// Destination; `None` is stdout.
        to: Option<PathBuf>,
    },
}

/// Decides the direction from SRC and DST.
pub fn plan(src: &str, dst: &str) -> Result<Plan, SbxError> {
    let local = |l: Location| match l {
        Location::Local(p) => Some(p),
        _ => None,
    };
    match (parse_location(src)?, parse_location(dst)?) {
        (Location::Sandbox { .. }, Location::Sandbox { .. }) => Err(SbxError::Usage(
            "copying between sandboxes is not supported; one side must be local".into(),
        )),
        (from, Location::Sandbox { id, mut path }) => {
            let from = local(from);
            if path.ends_with('/') {
                let name = from.as_deref().and_then(Path::file_name).ok_or_else(|| {
                    SbxError::Usage(format!(
                        "{id}:{path} ends in '/': name the destination file"
                    ))
                })?;
                path.push_str(&name.to_string_lossy());
            }
            Ok(Plan::Upload { from, id, path })
        }
        (Location::Sandbox { id, path }, to) => Ok(Plan::Download {
            id,
            path,
            to: local(to),
        }),
        _ => Err(SbxError::Usage(
            "one of SRC and DST must be a sandbox path ID:/abs/path".into(),
        )),
    }
}

/// What the `ID:` of a location names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Remote {
    /// A sandbox (`sbx cp`).
    Sandbox,
    /// A volume (`sbx volumes cp`): its files without a sandbox.
    Volume,
}

/// Runs `sbx cp`.
pub async fn run(client: &Client, out: Output, src: &str, dst: &str) -> Result<ExitCode, SbxError> {
    run_on(client, out, src, dst, Remote::Sandbox).await
}

/// Runs a copy whose `ID:` side is a `remote`.
pub async fn run_on(
    client: &Client,
    out: Output,
    src: &str,
    dst: &str,
    remote: Remote,
) -> Result<ExitCode, SbxError> {
    let plan = plan(src, dst)?;
    let to_stdout = matches!(plan, Plan::Download { to: None, .. });
    match plan {
        Plan::Upload {
            from: None,
            id,
            path,
        } => {
            let stdin = tokio_util::io::ReaderStream::new(tokio::io::stdin());
            match remote {
                Remote::Sandbox => client.upload_stream(&id, &path, stdin, None).await?,
                Remote::Volume => {
                    client
                        .upload_stream_to_volume(&id, &path, stdin, None)
                        .await?;
                }
            }
        }
        Plan::Upload {
            from: Some(from),
            id,
            path,
        } => upload_file(client, remote, &from, &id, &path).await?,
        Plan::Download { id, path, to: None } => {
            fetch(client, remote, &id, &path, &mut tokio::io::stdout()).await?;
        }
        Plan::Download {
            id,
            path,
            to: Some(to),
        } => download_file(client, remote, &id, &path, &to).await?,
    }
    if out.json && !to_stdout {
        out.json(&serde_json::json!({ "src": src, "dst": dst }))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Streams `remote` `id`'s file `path` into `out`.
async fn fetch<W: tokio::io::AsyncWrite + Unpin>(
    client: &Client,
    remote: Remote,
    id: &str,
    path: &str,
    out: &mut W,
) -> Result<u64, sandboxd_client::ClientError> {
    match remote {
        Remote::Sandbox => client.download_to(id, path, out).await,
        Remote::Volume => client.download_from_volume(id, path, out).await,
    }
}

async fn upload_file(
    client: &Client,
    remote: Remote,
    from: &Path,
    id: &str,
    path: &str,
) -> Result<(), SbxError> {
    let meta = std::fs::metadata(from).map_err(|source| SbxError::Local {
        path: from.display().to_string(),
        source,
    })?;
    if meta.is_dir() {
        return Err(SbxError::Usage(format!(
            "{} is a directory; directory copy is not supported",
            from.display()
        )));
    }
    match remote {
        Remote::Sandbox => client.upload_file(id, path, from).await?,
        Remote::Volume => {
            client.upload_to_volume(id, path, from).await?;
        }
    }
    Ok(())
}

async fn download_file(
    client: &Client,
    remote: Remote,
    id: &str,
    path: &str,
    to: &Path,
) -> Result<(), SbxError> {
    let mut target = to.to_path_buf();
    if to.is_dir() {
        let name = Path::new(path).file_name().ok_or_else(|| {
            SbxError::Usage(format!(
                "{id}:{path} has no file name to copy into a directory"
            ))
        })?;
        target.push(name);
    }
    let local_err = |p: &Path| {
        let path = p.display().to_string();
        move |source| SbxError::Local { path, source }
    };
    let mut tmp_name = target.file_name().unwrap_or_default().to_os_string();
    tmp_name.push(format!(".sbx-partial-{}", std::process::id()));
    let tmp = target.with_file_name(tmp_name);
    let mut file = tokio::fs::File::create(&tmp)
        .await
        .map_err(local_err(&tmp))?;
    let written = fetch(client, remote, id, path, &mut file).await;
    drop(file);
    match written {
        Ok(_) => tokio::fs::rename(&tmp, &target)
            .await
            .map_err(local_err(&target)),
        Err(e) => {
            let _ = tokio::fs::remove_file(&tmp).await;
            Err(e.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox(id: &str, path: &str) -> Location {
        Location::Sandbox {
            id: id.into(),
            path: path.into(),
        }
    }

    #[test]
    fn locations_parse_docker_style() {
        let cases = [
            ("sb-1:/etc/hosts", sandbox("sb-1", "/etc/hosts")),
            ("sb-1:/a:b", sandbox("sb-1", "/a:b")),
            ("-", Location::Stdio),
            ("file.txt", Location::Local("file.txt".into())),
            ("./sb-1:/x", Location::Local("./sb-1:/x".into())),
            ("/tmp/a:b", Location::Local("/tmp/a:b".into())),
            ("dir/a:b", Location::Local("dir/a:b".into())),
        ];
        for (arg, want) in cases {
            assert_eq!(parse_location(arg).expect(arg), want, "{arg}");
        }
    }

    #[test]
    fn malformed_sandbox_locations_are_usage_errors() {
        for bad in ["", ":/x", "sb-1:", "sb-1:rel/path"] {
            assert!(
                matches!(parse_location(bad), Err(SbxError::Usage(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn exactly_one_side_must_be_a_sandbox() {
        assert!(matches!(plan("a", "b"), Err(SbxError::Usage(_))));
        assert!(matches!(plan("-", "-"), Err(SbxError::Usage(_))));
        assert!(matches!(plan("s:/a", "t:/b"), Err(SbxError::Usage(_))));
    }

    #[test]
    fn direction_and_file_names_are_planned() {
        assert_eq!(
            plan("./x/f.txt", "sb:/tmp/").expect("upload"),
            Plan::Upload {
                from: Some("./x/f.txt".into()),
                id: "sb".into(),
                path: "/tmp/f.txt".into()
            }
        );
        assert!(matches!(plan("-", "sb:/tmp/"), Err(SbxError::Usage(_))));
        assert_eq!(
            plan("sb:/etc/hosts", "-").expect("download"),
            Plan::Download {
                id: "sb".into(),
                path: "/etc/hosts".into(),
                to: None
            }
        );
    }
}
