use super::*;
use crate::config::{Cli, Command, ConfigCommand};

const SERVE: &[&[&str]] = &[&["serve"], &["config", "show"]];

fn file(text: &str) -> tempfile::NamedTempFile {
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), text).unwrap();
    f
}

fn argv(words: &[&str]) -> Vec<OsString> {
    words.iter().map(OsString::from).collect()
}

fn serve_with(f: &tempfile::NamedTempFile, more: &[&str]) -> Result<Loaded<Cli>, ConfigError> {
    let path = f.path().to_str().unwrap().to_string();
    let mut words = vec!["sandboxd", "serve", "--config", &path];
    words.extend_from_slice(more);
    load::<Cli>(argv(&words), SERVE)
}

fn serve_config(loaded: Loaded<Cli>) -> crate::config::ServeConfig {
    match loaded.parsed.command {
        Command::Serve(c) => *c,
        other => panic!("not serve: {other:?}"),
    }
}

fn key_error(result: Result<Loaded<Cli>, ConfigError>) -> (usize, String) {
    match result {
        Err(ConfigError::Key { line, message, .. }) => (line, message),
        Err(other) => panic!("not a key error: {other}"),
        Ok(_) => panic!("the file was accepted"),
    }
}

#[test]
fn keys_of_the_file_set_serves_flags_and_a_flag_wins_over_the_file() {
    let f = file(
        "# a comment\n\
         data_dir = \"/var/lib/sandboxd\"\n\
         net_slots = 512\n\
         listen = \"0.0.0.0:8080\"\n\
         registry_mirror = [\"docker.io=http://127.0.0.1:5000\", \"ghcr.io=http://127.0.0.1:5001\"]\n\
         allow_wildcard_domains = true\n",
    );
    let c = serve_config(serve_with(&f, &["--listen", "127.0.0.1:9999"]).unwrap());
    assert_eq!(c.data_dir, PathBuf::from("/var/lib/sandboxd"));
    assert_eq!(c.net_slots, 512);
    assert_eq!(c.listen.to_string(), "127.0.0.1:9999", "the flag wins");
    assert_eq!(c.registry_mirrors.len(), 2);
    assert!(c.allow_wildcard_domains);
    // Untouched keys keep their defaults.
    assert_eq!(c.default_timeout, 300);
}

/// The one test of this module that sets an environment variable (tests run in parallel threads).
#[test]
fn the_environment_wins_over_the_file_and_show_names_every_source() {
    std::env::set_var("SB_WEBHOOK_POLL_MS", "4321");
    let f = file("webhook_poll_ms = 10\nnet_slots = 64\nhost_ports = \"30000-30100\"\n");
    let path = f.path().to_str().unwrap().to_string();
    let loaded = load::<Cli>(
        argv(&[
            "sandboxd",
            "config",
            "show",
            "--config",
            &path,
            "--net-slots",
            "32",
        ]),
        SERVE,
    )
    .unwrap();
    std::env::remove_var("SB_WEBHOOK_POLL_MS");
    assert!(matches!(
        loaded.parsed.command,
        Command::Config(ConfigCommand::Show(_))
    ));
    let settings = effective::<Cli>(&loaded);
    let find = |key: &str| settings.iter().find(|s| s.key == key).unwrap().clone();
    let show = |key: &str| {
        let s = find(key);
        (s.values.unwrap_or_default().join(","), s.source)
    };
    assert_eq!(
        show("webhook_poll_ms"),
        ("4321".into(), Source::Environment)
    );
    assert_eq!(show("net_slots"), ("32".into(), Source::Flag));
    assert_eq!(show("host_ports"), ("30000-30100".into(), Source::File));
    assert_eq!(show("domain"), ("localhost".into(), Source::Default));
    assert_eq!(find("tls_listen").source, Source::Unset);
    assert!(settings
        .iter()
        .all(|s| s.key != "config" && s.key != "json"));
    let text = render_toml(&settings, loaded.file.as_deref());
    assert!(
        text.contains("host_ports = \"30000-30100\"  # file"),
        "{text}"
    );
    assert!(text.contains("net_slots = 32  # flag"), "{text}");
    assert!(text.contains("# tls_listen (unset)"), "{text}");
    // What show prints is a config file this reader takes back.
    let again = file(
        &text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .collect::<Vec<_>>()
            .join("\n"),
    );
    let c = serve_config(serve_with(&again, &[]).unwrap());
    assert_eq!((c.net_slots, c.webhook_poll_ms), (32, 4321));
}

#[test]
fn an_unknown_key_is_an_error_naming_its_line_and_the_key_it_resembles() {
    let f = file("listen = \"127.0.0.1:1\"\n\nnet_slot = 5\n");
    let (line, message) = key_error(serve_with(&f, &[]));
    assert_eq!(line, 3);
    assert!(message.contains("`net_slot`"), "{message}");
    assert!(message.contains("did you mean `net_slots`"), "{message}");
    // Flags spelled as on the command line, or the file's own flag, are not keys.
    for (text, key) in [
        ("data-dir = \"/x\"\n", "data-dir"),
        ("config = \"/x\"\n", "config"),
    ] {
        let (line, message) = key_error(serve_with(&file(text), &[]));
        assert_eq!(line, 1);
        assert!(
            message.contains(&format!("unknown key `{key}`")),
            "{message}"
        );
    }
}

#[test]
fn a_value_the_flag_refuses_names_its_line() {
    for (text, line, says) in [
        ("domain = \"d\"\nnet_slots = \"many\"\n", 2, "net_slots"),
        ("listen = [\"a\", \"b\"]\n", 1, "takes one value"),
        ("[cluster]\nlisten = \"x\"\n", 1, "is a table"),
        ("allow_wildcard_domains = \"yes\"\n", 1, "true or false"),
        ("default_isolation = \"vm\"\n", 1, "default_isolation"),
        (
            "listen = 1979-05-27\n",
            1,
            "a string, an integer or a boolean",
        ),
    ] {
        let (at, message) = key_error(serve_with(&file(text), &[]));
        assert_eq!(at, line, "{text}: {message}");
        assert!(message.contains(says), "{text}: {message}");
    }
    match serve_with(&file("listen = \n"), &[]) {
        Err(ConfigError::Syntax { .. }) => {}
        other => panic!("not a syntax error: {:?}", other.err()),
    }
}

#[test]
fn a_file_named_explicitly_must_exist_and_other_commands_read_none() {
    let gone = tempfile::tempdir().unwrap().path().join("none.toml");
    let words = ["sandboxd", "serve", "--config", gone.to_str().unwrap()];
    assert!(matches!(
        load::<Cli>(argv(&words), SERVE),
        Err(ConfigError::Read { .. })
    ));
    let mcp = load::<Cli>(argv(&["sandboxd", "mcp", "--token", "t"]), SERVE).unwrap();
    assert!(mcp.file.is_none());
    assert!(matches!(mcp.parsed.command, Command::Mcp(_)));
}
