//! `sandboxd backup` and `sandboxd restore`: a data dir in one archive, taken while the daemon
//! serves, and put back into an empty data dir.
//!
//! Contract:
//! - A backup is a tar archive (compressed by its name's suffix: `.tar.zst`, `.tar.gz`, `.tar`) of
//!   the store as of one moment ([`sandboxd_store::backup::snapshot`], which never blocks the
//!   daemon), the daemon's identity, admin token, secrets key and egress gateway CA, its TLS
//!   certificates and object store, every volume's files, and the layers of images and templates:
//!   carried (`--with-layers`), or by reference — named in the manifest, their bytes left out.
//!   Without its layers the store's images and templates could not make sandboxes, so the restore
//!   of such a backup takes them from a data dir that holds them (`--layers-from`). Owners, modes,
//!   extended attributes (overlay whiteouts, file capabilities) and holes are kept. What the
//!   daemon rebuilds at start (the disk-quota pool, network state) and what dies with a host
//!   (running sandboxes' processes and writable layers) is not in it. The archive appears whole
//!   under its name or not at all.
//! - Files sandboxes write while a backup runs may or may not be in it; the store is consistent.
//! - A restore goes only into an empty (or absent) data dir. It checks the archive's manifest and
//!   store (whole, a schema this build opens) and, for layers by reference, that the directory
//!   they are taken from holds every one, before anything is moved into place; on failure it
//!   leaves the data dir as empty as it found it. A backup with layers by reference is of format
//!   2, which older builds (that would restore it without its layers) refuse. The daemon started
//!   on a restored data dir does what it does after a crash: sandboxes that ran are found gone and
//!   cleaned up, and each volume is given its quota'd directory back with the files restored
//!   ([`sandboxd_runtime::volumes::RESTORED_DIR`]).
//! - A cluster node's data dir is refused: its state is its peers' too.

use anyhow::{bail, Context};
use serde_json::json;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// The manifest's name in the archive.
const MANIFEST: &str = "sandboxd-backup.json";
/// The manifest format of a backup that carries its layers (every build reads it).
const FORMAT: u64 = 1;
/// The manifest format of a backup that names its layers (`layerEntries`) instead.
const FORMAT_LAYERS_BY_REFERENCE: u64 = 2;
/// The store's file in a data dir (and in the archive).
const STORE_FILE: &str = "sandboxd.db";
/// Files and directories of the data dir a backup carries as they are, when present.
const CARRIED: &[&str] = &[
    "daemon-id",
    "admin-token",
    crate::SECRETS_KEY_FILE,
    "egress-ca.pem",
    "egress-ca.key",
    crate::gateway::PORT_FILE,
    "certs",
    "objects",
    "images",
    "runtime/templates",
];
/// The directories of [`CARRIED`] whose entries are layers: each entry is one image layer or one
/// template's tree, named (not carried) by a backup with layers by reference.
const LAYER_DIRS: &[&str] = &["images/layers", "runtime/templates"];
/// The [`CARRIED`] items a backup with layers by reference leaves out: those holding
/// [`LAYER_DIRS`] (`images` holds nothing else but the staging of pulls under way).
const LAYER_ITEMS: &[&str] = &["images", "runtime/templates"];

/// What a backup does with the layers of images and templates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layers {
    /// Their bytes are in the archive.
    Carried,
    /// The archive names them; a restore takes them from a data dir that holds them.
    ByReference,
}

/// Where volumes' files are in the archive (`volumes/<id>/`).
const VOLUMES: &str = "volumes";

/// What a backup holds, for its summary line.
#[derive(Debug)]
pub struct Written {
    pub path: PathBuf,
    pub bytes: u64,
    pub volumes: usize,
    pub schema: u32,
    /// How many layers the archive names instead of carrying (0 when it carries them).
    pub referenced_layers: usize,
}

/// Writes the backup of the data dir `data_dir` to `to`.
pub fn backup(data_dir: &Path, to: &Path, layers: Layers) -> anyhow::Result<Written> {
    let db = data_dir.join(STORE_FILE);
    if !db.is_file() {
        bail!(
            "{} holds no store ({STORE_FILE}): not a data dir",
            data_dir.display()
        );
    }
    if data_dir.join("cluster").exists() {
        bail!(
            "{} is a cluster node's: its state is its peers' too, and a backup of one node would \
             not restore the cluster",
            data_dir.display()
        );
    }
    if to.exists() {
        bail!("{} exists; a backup never overwrites a file", to.display());
    }
    let staging = tempfile::Builder::new()
        .prefix(".backup-")
        .tempdir_in(data_dir)
        .context("making the backup's staging directory in the data dir")?;
    let snapshot = staging.path().join(STORE_FILE);
    sandboxd_store::backup::snapshot(&db, &snapshot).context("copying the store")?;
    let schema = sandboxd_store::backup::inspect(&snapshot).context("checking the copy")?;
    let volumes = volume_dirs(data_dir)?;
    let mut manifest = json!({
        "format": FORMAT,
        "sandboxdVersion": env!("CARGO_PKG_VERSION"),
        "schemaVersion": schema,
        "createdAt": sandboxd_store::unix_millis_now(),
        "volumes": volumes.iter().map(|(id, _)| id).collect::<Vec<_>>(),
    });
    let referenced = match layers {
        Layers::Carried => Vec::new(),
        Layers::ByReference => {
            let entries = layer_entries(data_dir)?;
            manifest["format"] = FORMAT_LAYERS_BY_REFERENCE.into();
            manifest["layerEntries"] = json!(entries);
            entries
        }
    };
    std::fs::write(staging.path().join(MANIFEST), manifest.to_string())
        .context("writing the manifest")?;

    let partial = partial_name(to);
    let mut args: Vec<OsString> = vec![
        "--create".into(),
        "--auto-compress".into(),
        "--file".into(),
        partial.clone().into(),
        "-C".into(),
        staging.path().into(),
        MANIFEST.into(),
        STORE_FILE.into(),
        "-C".into(),
        data_dir.into(),
    ];
    args.extend(
        CARRIED
            .iter()
            .filter(|p| layers == Layers::Carried || !LAYER_ITEMS.contains(p))
            .filter(|p| data_dir.join(p).exists())
            .map(OsString::from),
    );
    for (id, rel) in &volumes {
        args.push("--transform".into());
        args.push(format!("s,^{},{VOLUMES}/{id},", regex_quote(rel)).into());
        args.push(rel.into());
    }
    let made = tar(&args);
    if let Err(e) = made {
        let _ = std::fs::remove_file(&partial);
        return Err(e.context(format!("writing {}", to.display())));
    }
    std::fs::rename(&partial, to).with_context(|| format!("naming {}", to.display()))?;
    let bytes = std::fs::metadata(to).map(|m| m.len()).unwrap_or(0);
    Ok(Written {
        path: to.to_path_buf(),
        bytes,
        volumes: volumes.len(),
        schema,
        referenced_layers: referenced.len(),
    })
}

/// Every layer of `data_dir` (an entry of one of [`LAYER_DIRS`]), relative to it, sorted.
fn layer_entries(data_dir: &Path) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    for dir in LAYER_DIRS {
        let entries = match std::fs::read_dir(data_dir.join(dir)) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e).with_context(|| format!("listing {dir}")),
        };
        for entry in entries {
            let entry = entry.with_context(|| format!("listing {dir}"))?;
            found.push(format!("{dir}/{}", entry.file_name().to_string_lossy()));
        }
    }
    found.sort();
    Ok(found)
}

/// A manifest's layer entry, checked: one plain name under one of [`LAYER_DIRS`] (an archive's
/// manifest is input like any other, and names nothing outside them).
fn layer_entry(entry: &str) -> anyhow::Result<&str> {
    let plain = LAYER_DIRS.iter().any(|dir| {
        entry
            .strip_prefix(dir)
            .and_then(|rest| rest.strip_prefix('/'))
            .is_some_and(|name| {
                !name.is_empty() && name != "." && name != ".." && !name.contains('/')
            })
    });
    anyhow::ensure!(plain, "the manifest names {entry:?}, which is not a layer");
    Ok(entry)
}

/// What a restore put back, for its summary line.
#[derive(Debug)]
pub struct Restored {
    pub schema: u32,
    pub volumes: usize,
    /// How many layers were taken from `--layers-from`.
    pub layers: usize,
}

/// Restores the backup `from` into `data_dir`, which must be empty or absent; the layers of a
/// backup that names them are copied from `layers_from` (a data dir that holds them).
pub fn restore(
    from: &Path,
    data_dir: &Path,
    layers_from: Option<&Path>,
) -> anyhow::Result<Restored> {
    let made_dir = !data_dir.exists();
    if !made_dir {
        let mut entries = std::fs::read_dir(data_dir)
            .with_context(|| format!("reading {}", data_dir.display()))?;
        if entries.next().is_some() {
            bail!(
                "{} is not empty: a restore goes into an empty data dir only",
                data_dir.display()
            );
        }
    }
    std::fs::create_dir_all(data_dir).with_context(|| format!("making {}", data_dir.display()))?;
    std::fs::set_permissions(
        data_dir,
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .with_context(|| format!("setting the mode of {}", data_dir.display()))?;
    let restored = restore_into(from, data_dir, layers_from);
    if restored.is_err() {
        // Back to as empty as it was found.
        if let Ok(entries) = std::fs::read_dir(data_dir) {
            for entry in entries.flatten() {
                let _ = std::fs::remove_dir_all(entry.path())
                    .or_else(|_| std::fs::remove_file(entry.path()));
            }
        }
        if made_dir {
            let _ = std::fs::remove_dir(data_dir);
        }
    }
    restored
}

fn restore_into(
    from: &Path,
    data_dir: &Path,
    layers_from: Option<&Path>,
) -> anyhow::Result<Restored> {
    let staging = tempfile::Builder::new()
        .prefix(".restore-")
        .tempdir_in(data_dir)
        .context("making the restore's staging directory")?;
    tar(&[
        "--extract".into(),
        "--file".into(),
        from.into(),
        "-C".into(),
        staging.path().into(),
        "--same-owner".into(),
    ])
    .with_context(|| format!("unpacking {}", from.display()))?;
    let manifest: serde_json::Value = std::fs::read(staging.path().join(MANIFEST))
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .with_context(|| format!("{} holds no sandboxd backup manifest", from.display()))?;
    let referenced = match manifest["format"].as_u64() {
        Some(FORMAT) => Vec::new(),
        Some(FORMAT_LAYERS_BY_REFERENCE) => referenced_layers(from, &manifest, layers_from)?,
        _ => bail!(
            "{} is a backup of format {}; this build reads formats {FORMAT} and \
             {FORMAT_LAYERS_BY_REFERENCE}",
            from.display(),
            manifest["format"]
        ),
    };
    let schema = sandboxd_store::backup::inspect(&staging.path().join(STORE_FILE))
        .context("checking the backup's store")?;
    for item in std::iter::once(STORE_FILE).chain(CARRIED.iter().copied()) {
        let source = staging.path().join(item);
        if !source.exists() {
            continue;
        }
        let target = data_dir.join(item);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("making {}", parent.display()))?;
        }
        std::fs::rename(&source, &target)
            .with_context(|| format!("moving {} into place", target.display()))?;
    }
    let mut volumes = 0;
    let staged = staging.path().join(VOLUMES);
    if staged.is_dir() {
        let place = data_dir
            .join("runtime")
            .join(sandboxd_runtime::volumes::RESTORED_DIR);
        std::fs::create_dir_all(data_dir.join("runtime"))?;
        std::fs::rename(&staged, &place)
            .with_context(|| format!("staging the volumes in {}", place.display()))?;
        volumes = std::fs::read_dir(&place)?.count();
    }
    if let Some(source) = layers_from {
        for entry in &referenced {
            copy_tree(&source.join(entry), &data_dir.join(entry))?;
        }
    }
    Ok(Restored {
        schema,
        volumes,
        layers: referenced.len(),
    })
}

/// The layers a backup of format 2 names, each found in `layers_from`; refused (before anything
/// is written) when there is no such directory or it lacks any of them.
fn referenced_layers(
    from: &Path,
    manifest: &serde_json::Value,
    layers_from: Option<&Path>,
) -> anyhow::Result<Vec<String>> {
    let entries = manifest["layerEntries"]
        .as_array()
        .with_context(|| format!("{}'s manifest names no layers", from.display()))?
        .iter()
        .map(|e| {
            e.as_str()
                .context("a layer entry is not a string")
                .and_then(layer_entry)
                .map(str::to_string)
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    if entries.is_empty() {
        return Ok(entries);
    }
    let Some(source) = layers_from else {
        bail!(
            "{} names its {} layers instead of carrying them (a backup made without \
             --with-layers): give --layers-from DIR, a data dir that holds them (the one backed \
             up, or one restored from a backup made --with-layers)",
            from.display(),
            entries.len()
        );
    };
    let missing: Vec<&String> = entries
        .iter()
        .filter(|e| !source.join(e).is_dir())
        .collect();
    if !missing.is_empty() {
        bail!(
            "{} lacks {} of the {} layers {} names, e.g. {}",
            source.display(),
            missing.len(),
            entries.len(),
            from.display(),
            missing[0]
        );
    }
    Ok(entries)
}

/// Copies the tree `from` to `to` as it is: owners, modes, extended attributes (overlay
/// whiteouts, file capabilities), device nodes, links, holes; shares blocks where the filesystem
/// can.
fn copy_tree(from: &Path, to: &Path) -> anyhow::Result<()> {
    if let Some(parent) = to.parent() {
        std::fs::create_dir_all(parent).with_context(|| format!("making {}", parent.display()))?;
    }
    let mut cp = std::process::Command::new("cp");
    cp.args(["-a", "--reflink=auto", "--no-target-directory"])
        .arg(from)
        .arg(to);
    run(cp).with_context(|| format!("copying the layer {}", from.display()))
}

/// `(id, path relative to the data dir)` of every volume's files.
fn volume_dirs(data_dir: &Path) -> anyhow::Result<Vec<(String, String)>> {
    let layers = data_dir.join("runtime/layers");
    let entries = match std::fs::read_dir(&layers) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("listing {}", layers.display())),
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if let Some(id) = name.strip_prefix("vol.") {
            if entry.path().join("data").is_dir() {
                found.push((id.to_string(), format!("runtime/layers/{name}/data")));
            }
        }
    }
    found.sort();
    Ok(found)
}

/// `to` with `.partial` inserted before its compression suffix is known to tar: the archive is
/// written there and renamed when whole. Keeps the suffix so `--auto-compress` picks the same.
fn partial_name(to: &Path) -> PathBuf {
    let name = to
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    to.with_file_name(format!(".partial-{name}"))
}

/// `text` as a literal in a sed-style basic regular expression (GNU tar's `--transform`).
fn regex_quote(text: &str) -> String {
    let mut out = String::new();
    for c in text.chars() {
        if ".[]*^$\\,".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Runs GNU tar with `args`, keeping numeric owners, modes, extended attributes and holes.
fn tar(args: &[OsString]) -> anyhow::Result<()> {
    let mut tar = std::process::Command::new("tar");
    tar.args([
        "--numeric-owner",
        "--xattrs",
        "--xattrs-include=*",
        "--sparse",
        "--preserve-permissions",
    ])
    .args(args);
    run(tar)
}

/// Runs `command` without input; its status and what it said on stderr when it fails.
fn run(mut command: std::process::Command) -> anyhow::Result<()> {
    let program = command.get_program().to_string_lossy().into_owned();
    let out = command
        .stdin(std::process::Stdio::null())
        .output()
        .with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volume_paths_are_literal_in_tars_transform() {
        assert_eq!(
            regex_quote("runtime/layers/vol.ab/data"),
            "runtime/layers/vol\\.ab/data"
        );
        assert_eq!(
            partial_name(Path::new("/b/x.tar.zst")),
            Path::new("/b/.partial-x.tar.zst")
        );
    }

    #[test]
    fn a_manifests_layer_entries_name_nothing_outside_the_layer_directories() {
        for ok in ["images/layers/0a1b", "runtime/templates/kept-tpl"] {
            assert_eq!(layer_entry(ok).unwrap(), ok);
        }
        for bad in [
            "images/layers/..",
            "images/layers/.",
            "images/layers/",
            "images/layers",
            "images/layers/a/b",
            "runtime/templates/../../etc",
            "/etc/passwd",
            "sandboxd.db",
            "images/layersx/a",
        ] {
            assert!(layer_entry(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_restore_refuses_a_data_dir_that_holds_anything_and_touches_nothing() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("keep"), "x").unwrap();
        let err = restore(Path::new("/nonexistent.tar"), dir.path(), None).unwrap_err();
        assert!(err.to_string().contains("not empty"), "{err}");
        assert_eq!(
            std::fs::read_to_string(dir.path().join("keep")).unwrap(),
            "x"
        );
        let empty = dir.path().join("new");
        let err = restore(Path::new("/nonexistent.tar"), &empty, None).unwrap_err();
        assert!(format!("{err:#}").contains("unpacking"), "{err:#}");
        assert!(
            !empty.exists(),
            "a failed restore removes the data dir it made"
        );
    }
}
