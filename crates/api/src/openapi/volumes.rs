//! The limits of the volume operations, written into the document like [`super::requests`]'s: a
//! volume's name and size, where a volume may be mounted (`sandboxd_volumes::mounts`: a plain
//! absolute path, not `/`, no system directory, nothing in the kernel's or the agent's trees), a
//! subpath and a path inside a volume (no `..` component), and a new file's mode.

use serde_json::{json, Value};

/// A volume's name (`sandboxd_service::volumes::validate_name`).
const VOLUME_NAME: &str = "^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$";
/// One path component that is neither `.` nor `..`.
const COMPONENT: &str = "([^/.\\u0000][^/\\u0000]*|\\.[^/.\\u0000][^/\\u0000]*|\\.\\.[^/\\u0000]+)";
/// A path with a `..` component.
const DOT_DOT: &str = "(^|/)\\.\\.(/|$)";
/// A path with a component longer than `NAME_MAX` (255 bytes).
const LONG_NAME: &str = "[^/]{256}";

/// Writes the volume operations' limits into `doc`; `disk_quota`: whether this host can limit a
/// volume's size.
pub(super) fn constrain(doc: &mut Value, disk_quota: bool) {
    let schemas = &mut doc["components"]["schemas"];
    let create = &mut schemas["CreateVolume"]["properties"];
    create["name"]["pattern"] = json!(VOLUME_NAME);
    if disk_quota {
        create["sizeMB"]["minimum"] = json!(1);
        create["sizeMB"]["maximum"] = json!(16u64 << 20);
    } else if let Some(props) = create.as_object_mut() {
        // This host cannot limit disk: a volume that asks for a size is refused.
        props.remove("sizeMB");
    }
    if let Some(labels) = create["labels"].as_object_mut() {
        labels.extend(
            json!({"maxProperties": 64,
                "propertyNames": {"minLength": 1, "maxLength": 128, "pattern": "^[^=]*$"},
                "additionalProperties": {"type": "string", "maxLength": 1024}})
            .as_object()
            .cloned()
            .unwrap_or_default(),
        );
    }
    let mount = &mut schemas["VolumeMount"]["properties"];
    mount["name"]["minLength"] = json!(1);
    mount["path"] = json!({"type": "string", "maxLength": 4096,
    "pattern": format!("^(/{COMPONENT})+/?$"),
    "not": {"anyOf": [
        {"pattern": LONG_NAME},
        {"pattern": "^/(proc|sys|dev|run|\\.sandboxd)(/|$)"},
        {"pattern": "^/(bin|etc|lib|lib32|lib64|sbin|usr|var|boot)/?$"},
    ]}});
    mount["subpath"] = json!({"type": ["string", "null"], "maxLength": 4096,
        "pattern": "^[^\\u0000]*$", "not": {"anyOf": [{"pattern": DOT_DOT}, {"pattern": LONG_NAME}]}});
    // Two mounts at one path, or one inside another, are refused.
    let volumes = &mut schemas["CreateSandbox"]["properties"]["volumes"];
    volumes["maxItems"] = json!(16);
    volumes["uniqueItems"] = json!(true);
    let paths = &mut doc["paths"];
    let inside = json!({"maxLength": 4096, "pattern": "^[^\\u0000]*$",
        "not": {"anyOf": [{"pattern": DOT_DOT}, {"pattern": LONG_NAME}]}});
    let mode = json!({"pattern": "^[0-7]{1,4}$"});
    for (path, method) in [
        ("/v1/volumes/{name}/files", "get"),
        ("/v1/volumes/{name}/files", "delete"),
        ("/v1/volumes/{name}/files/content", "get"),
        ("/v1/volumes/{name}/files/content", "put"),
        ("/v1/volumes/{name}/files/mkdir", "post"),
    ] {
        let op = &mut paths[path][method];
        for p in op["parameters"].as_array_mut().into_iter().flatten() {
            let extra = match p["name"].as_str() {
                Some("path") => &inside,
                Some("mode") => &mode,
                Some("uid" | "gid") => &json!({"maximum": 65535}),
                Some("depth") => &json!({"minimum": 1, "maximum": 64}),
                _ => continue,
            };
            if let (Some(schema), Some(extra)) = (p["schema"].as_object_mut(), extra.as_object()) {
                schema.extend(extra.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::Value;

    fn matches(pattern: &Value, text: &str) -> bool {
        let pattern = pattern
            .as_str()
            .expect("a pattern")
            .replace("\\u0000", "\\x00");
        regex::Regex::new(&pattern).unwrap().is_match(text)
    }

    /// A mount path the document allows is one the daemon takes, and the other way round.
    #[test]
    fn the_documented_mount_paths_are_the_daemons() {
        let doc = super::super::document(&Default::default(), &["namespace"]);
        let path = &doc["components"]["schemas"]["VolumeMount"]["properties"]["path"];
        let long = format!("/data/{}", "z".repeat(256));
        let documented = |p: &str| {
            matches(&path["pattern"], p)
                && !path["not"]["anyOf"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|n| matches(&n["pattern"], p))
        };
        for p in [
            "/data",
            "/data/",
            "/mnt/x/y",
            "/home/user/.cache",
            "/...",
            "/a..b",
            "/usr/local/x",
            "/",
            "",
            "data",
            "/etc",
            "/usr/",
            "/proc",
            "/proc/x",
            "/dev/shm",
            "/run",
            "/.sandboxd/a",
            "/a/../b",
            "/a/./b",
            "/a//b",
            "/..",
            "/.",
            "/sysx",
            "/etcetera",
            &long,
        ] {
            let daemon = sandboxd_volumes::check_mounts(&[p], &["/.sandboxd"]).is_ok();
            assert_eq!(documented(p), daemon, "{p:?}: document vs daemon");
        }
    }

    /// A path inside a volume: anything without a `..` component or a NUL.
    #[test]
    fn the_documented_volume_paths_are_the_daemons() {
        let doc = super::super::document(&Default::default(), &["namespace"]);
        let params = doc["paths"]["/v1/volumes/{name}/files/content"]["get"]["parameters"]
            .as_array()
            .unwrap()
            .clone();
        let schema = &params.iter().find(|p| p["name"] == "path").unwrap()["schema"];
        let long = "y".repeat(256);
        for p in [
            "/a/b",
            "a",
            "/",
            "",
            "/a/../b",
            "..",
            "/x..y",
            "/...",
            long.as_str(),
        ] {
            let documented = matches(&schema["pattern"], p)
                && !schema["not"]["anyOf"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|n| matches(&n["pattern"], p));
            let daemon = sandboxd_volumes::RelPath::parse(p).is_ok();
            assert_eq!(documented, daemon, "{p:?}");
        }
    }
}
