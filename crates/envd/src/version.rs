//! The envd protocol version the agent implements: what the control API reports as a sandbox's
//! `envdVersion`, and therefore which SDK features the E2B SDK enables.
//!
//! The SDK gates features on this version; the value is the highest version whose gated features all
//! work against the agent (with the daemon serving metrics):
//!
//! | version | feature the SDK enables                                | served by                           |
//! |---------|--------------------------------------------------------|-------------------------------------|
//! | 0.1.4   | recursive `watch_dir`                                  | agent (`WatchDir`, watchers)        |
//! | 0.1.5   | `get_metrics`                                          | daemon                              |
//! | 0.3.0   | `stdin: false` on commands                             | agent (`Start`)                     |
//! | 0.4.0   | no `username` sent: the sandbox's default user applies | agent (default user)                |
//! | 0.5.2   | `close_stdin`                                          | agent (`CloseStdin`)                |
//! | 0.5.7   | octet-stream and gzip uploads                          | agent (`POST /files`)               |
//! | 0.6.2   | file metadata (`X-Metadata-*`, `EntryInfo.metadata`)   | agent (`/files`, `Stat`, `ListDir`) |
//! | 0.6.3   | `include_entry` on watch events                        | agent (`WatchDir`, watchers)        |
//! | 0.6.4   | `allow_network_mounts` on watches                      | agent (`WatchDir`, watchers)        |
//!
//! Raise it only together with the feature a newer version gates, and its test.

/// The envd version sandboxd's agent is compatible with.
pub const ENVD_VERSION: &str = "0.6.4";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_is_semver_and_at_least_the_sdk_minimum() {
        let parts: Vec<u32> = ENVD_VERSION
            .split('.')
            .map(|p| p.parse().expect("numeric version part"))
            .collect();
        assert_eq!(parts.len(), 3);
        // The SDK refuses sandboxes below 0.1.0.
        assert!(parts >= vec![0, 1, 0]);
    }
}
