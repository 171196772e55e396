//! Whether the gVisor tier is offered: a `runsc` recent enough for it (the systrap platform, a
//! working live checkpoint), found on `PATH` or where it was named, or the reason there is none and
//! how to get one ([`probe`], called once when the runtime starts).

use super::launch::Runsc;
use std::path::PathBuf;

/// The oldest runsc build the tier runs on (the date in its version): older ones (Debian 12's own)
/// lack the systrap platform and a working live checkpoint.
const OLDEST_RUNSC: u32 = 20240101;
/// How to get a runsc the tier runs on, for the answers that say it is missing.
pub const INSTALL_HINT: &str = "install runsc from Debian's bookworm-backports \
     (`apt-get install -t bookworm-backports runsc`; scripts/bootstrap does it)";

/// How the gVisor tier is set up.
#[derive(Debug, Clone)]
pub struct GvisorConfig {
    /// The `runsc` binary; `None`: the first `runsc` on `PATH` (or in /usr/sbin, /usr/bin).
    pub runsc: Option<PathBuf>,
    /// runsc's platform.
    pub platform: String,
}

impl Default for GvisorConfig {
    fn default() -> Self {
        Self {
            runsc: None,
            platform: "systrap".into(),
        }
    }
}

/// Finds a `runsc` this tier runs on; the reason (and how to get one) when there is none.
pub fn probe(config: &GvisorConfig) -> Result<Runsc, String> {
    let binary = match &config.runsc {
        Some(path) => path.clone(),
        None => find_on_path("runsc")
            .ok_or_else(|| format!("runsc is not installed: {INSTALL_HINT}"))?,
    };
    let output = std::process::Command::new(&binary)
        .arg("--version")
        .output()
        .map_err(|e| format!("{} cannot run ({e}): {INSTALL_HINT}", binary.display()))?;
    let text = String::from_utf8_lossy(&output.stdout);
    let version = text.lines().next().unwrap_or_default().trim().to_string();
    match version_date(&version) {
        Some(date) if date >= OLDEST_RUNSC => Ok(Runsc {
            binary,
            platform: config.platform.clone(),
        }),
        _ => Err(format!(
            "{} ({version:?}) is older than this tier needs: {INSTALL_HINT}",
            binary.display()
        )),
    }
}

/// The build date in a `runsc --version` line (`runsc version 0.0~20240729.0`, `… release-20240729.0`).
fn version_date(line: &str) -> Option<u32> {
    let bytes = line.as_bytes();
    (0..bytes.len().saturating_sub(7)).find_map(|i| {
        let run = &bytes[i..i + 8];
        let starts = i == 0 || !bytes[i - 1].is_ascii_digit();
        let ends = bytes.get(i + 8).is_none_or(|b| !b.is_ascii_digit());
        (starts && ends && run.iter().all(u8::is_ascii_digit))
            .then(|| std::str::from_utf8(run).ok()?.parse().ok())
            .flatten()
    })
}

fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/usr/bin".into()])
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_build_date_is_read_from_every_version_form() {
        assert_eq!(version_date("runsc version 0.0~20240729.0"), Some(20240729));
        assert_eq!(
            version_date("runsc version release-20231009.0"),
            Some(20231009)
        );
        assert_eq!(version_date("runsc version 0.0~20221219.0"), Some(20221219));
        assert_eq!(version_date("runsc version 1234567"), None);
        assert_eq!(version_date("runsc version 123456789"), None);
        assert_eq!(version_date(""), None);
    }

    #[test]
    fn an_old_or_missing_runsc_is_refused_with_the_way_to_get_one() {
        let missing = GvisorConfig {
            runsc: Some("/nonexistent/runsc".into()),
            ..GvisorConfig::default()
        };
        let why = probe(&missing).unwrap_err();
        assert!(why.contains("bookworm-backports"), "{why}");
        // A stand-in that reports Debian 12's own (2022) build.
        let dir = tempfile::tempdir().unwrap();
        let old = dir.path().join("runsc");
        std::fs::write(&old, "#!/bin/sh\necho 'runsc version 0.0~20221219.0'\n").unwrap();
        std::fs::set_permissions(&old, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let why = probe(&GvisorConfig {
            runsc: Some(old),
            ..GvisorConfig::default()
        })
        .unwrap_err();
        assert!(why.contains("older than this tier needs"), "{why}");
    }
}
