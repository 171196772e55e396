//! The config file: every `serve` flag is also a key of one TOML file, and the command line is read
//! with it.
//!
//! Contract:
//! - The file is `--config` (`SB_CONFIG`), else [`DEFAULT_PATH`] when it exists, else none. A file
//!   named explicitly must exist.
//! - Its keys are `serve`'s long flags with `_` for `-` (`--data-dir` is `data_dir`), at the top level
//!   only. A flag's value is a string, an integer or a boolean; a repeatable flag also takes an
//!   array. An unknown key, a table, or a value the flag refuses is an error naming the file, the
//!   line and the key — the daemon never starts on a file it half understood.
//! - Precedence: flag > environment > file > default. A key is applied only where clap found neither
//!   the flag nor its environment variable, so the one parser (with its value checks and help)
//!   stays the only reading of a value.
//! - [`effective`] lists every key with its value and where it came from, for `sandboxd config
//!   show`; values of flags whose environment values clap hides are masked.

use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Where the daemon looks for its config file when `--config` names none.
pub const DEFAULT_PATH: &str = "/etc/sandboxd/config.toml";
/// The id of the flag naming the file (not itself a key of the file).
const CONFIG_ID: &str = "config";

/// Why the command line and its config file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The command line itself (clap's own message, help and version included).
    #[error(transparent)]
    Cli(#[from] clap::Error),
    /// cannot read the config file {path}
    #[error("cannot read the config file {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// {path}: not TOML: {message}
    #[error("{path}: not TOML: {message}")]
    Syntax { path: PathBuf, message: String },
    /// {path}:{line}: {message}
    #[error("{path}:{line}: {message}")]
    Key {
        path: PathBuf,
        line: usize,
        message: String,
    },
}

/// Where a value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Flag,
    Environment,
    File,
    Default,
    Unset,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Flag => "flag",
            Source::Environment => "environment",
            Source::File => "file",
            Source::Default => "default",
            Source::Unset => "unset",
        }
    }
}

/// One key of the effective configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    pub key: String,
    /// The values as given (several for a repeatable flag); `None` when masked.
    pub values: Option<Vec<String>>,
    pub source: Source,
}

/// A parsed command line with its config file applied.
pub struct Loaded<T> {
    pub parsed: T,
    /// The file that was read, if any.
    pub file: Option<PathBuf>,
    /// The innermost subcommand's matches (for [`effective`]).
    pub matches: ArgMatches,
    /// The keys the file set (they show as `Source::File`).
    pub from_file: Vec<String>,
}

/// Parses `argv` as `T`, applying the config file to the subcommand at `path` (e.g. `["serve"]` or
/// `["config", "show"]`) when `argv` names it. Other subcommands parse as they are.
pub fn load<T: CommandFactory + FromArgMatches>(
    argv: Vec<OsString>,
    paths: &[&[&str]],
) -> Result<Loaded<T>, ConfigError> {
    let command = T::command();
    let first = command.clone().try_get_matches_from(&argv)?;
    let Some(sub) = paths.iter().find_map(|p| descend(&first, p)) else {
        let parsed = T::from_arg_matches(&first)?;
        return Ok(Loaded {
            parsed,
            file: None,
            matches: first,
            from_file: Vec::new(),
        });
    };
    let explicit = sub.get_one::<PathBuf>(CONFIG_ID).cloned();
    let file = match &explicit {
        Some(path) => Some(path.clone()),
        None if Path::new(DEFAULT_PATH).is_file() => Some(PathBuf::from(DEFAULT_PATH)),
        None => None,
    };
    let Some(path) = file else {
        let parsed = T::from_arg_matches(&first)?;
        let matches = innermost(&first);
        return Ok(Loaded {
            parsed,
            file: None,
            matches,
            from_file: Vec::new(),
        });
    };
    let text = std::fs::read_to_string(&path).map_err(|source| ConfigError::Read {
        path: path.clone(),
        source,
    })?;
    let serve = serve_command::<T>();
    let entries = read_entries(&path, &text, &serve)?;
    let mut extended = argv;
    let mut from_file = Vec::new();
    for entry in entries {
        // Flag and environment win over the file.
        if matches!(
            sub.value_source(&entry.id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        ) {
            continue;
        }
        from_file.push(entry.key.clone());
        extended.extend(entry.args);
    }
    let all = command.try_get_matches_from(&extended)?;
    let parsed = T::from_arg_matches(&all)?;
    let matches = innermost(&all);
    Ok(Loaded {
        parsed,
        file: Some(path),
        matches,
        from_file,
    })
}

/// Every `serve` key with its value and source, in the order of `serve --help`. `loaded` must be
/// of a command that takes `serve`'s flags (`serve`, `config show`, `doctor`, `backup`, `restore`).
pub fn effective<T: CommandFactory>(loaded: &Loaded<impl Sized>) -> Vec<Setting> {
    let serve = serve_command::<T>();
    serve
        .get_arguments()
        .filter(|a| is_key(a))
        .map(|arg| {
            let id = arg.get_id().as_str();
            let key = key_of(arg);
            let raw: Option<Vec<String>> = loaded
                .matches
                .get_raw(id)
                .map(|vals| vals.map(|v| v.to_string_lossy().into_owned()).collect());
            let source = if loaded.from_file.contains(&key) {
                Source::File
            } else {
                match loaded.matches.value_source(id) {
                    Some(ValueSource::CommandLine) => Source::Flag,
                    Some(ValueSource::EnvVariable) => Source::Environment,
                    Some(ValueSource::DefaultValue) => Source::Default,
                    _ if raw.is_some() => Source::Default,
                    _ => Source::Unset,
                }
            };
            // A bool flag clap reports as `false` by default.
            let values = if arg.is_hide_env_values_set() && raw.is_some() {
                None
            } else {
                Some(raw.unwrap_or_default())
            };
            Setting {
                key,
                values,
                source,
            }
        })
        .collect()
}

/// `serve`'s command, wherever it sits in `T`.
fn serve_command<T: CommandFactory>() -> clap::Command {
    T::command()
        .find_subcommand("serve")
        .cloned()
        .expect("the command line has a serve subcommand")
}

fn descend(matches: &ArgMatches, path: &[&str]) -> Option<ArgMatches> {
    let mut here = matches.clone();
    for name in path {
        match here.subcommand() {
            Some((n, sub)) if n == *name => here = sub.clone(),
            _ => return None,
        }
    }
    Some(here)
}

fn innermost(matches: &ArgMatches) -> ArgMatches {
    let mut here = matches.clone();
    while let Some((_, sub)) = here.subcommand() {
        here = sub.clone();
    }
    here
}

/// Whether `arg` of `serve` is a key of the file.
fn is_key(arg: &clap::Arg) -> bool {
    let id = arg.get_id().as_str();
    arg.get_long().is_some() && id != CONFIG_ID && !is_builtin(id)
}

fn is_builtin(id: &str) -> bool {
    matches!(id, "help" | "version")
}

/// A flag's key: its long name with `_` for `-`.
fn key_of(arg: &clap::Arg) -> String {
    arg.get_long().unwrap_or_default().replace('-', "_")
}

/// One key of the file, as the arguments that say the same on a command line.
struct Entry {
    key: String,
    id: String,
    args: Vec<OsString>,
}

fn read_entries(path: &Path, text: &str, serve: &clap::Command) -> Result<Vec<Entry>, ConfigError> {
    let doc = toml_edit::Document::parse(text).map_err(|e| ConfigError::Syntax {
        path: path.to_path_buf(),
        message: e.message().to_string(),
    })?;
    let table = doc.as_table();
    let mut entries = Vec::new();
    for (key, item) in table.iter() {
        let at = table
            .key(key)
            .and_then(|k| k.span())
            .map_or(0, |span| span.start);
        let line = text[..at.min(text.len())].matches('\n').count() + 1;
        let fail = |message: String| ConfigError::Key {
            path: path.to_path_buf(),
            line,
            message,
        };
        let Some(value) = item.as_value() else {
            return Err(fail(format!(
                "`{key}` is a table; every key of the file is a top-level `key = value`"
            )));
        };
        let Some(arg) = serve
            .get_arguments()
            .find(|a| is_key(a) && key_of(a) == key)
        else {
            return Err(fail(unknown_key(key, serve)));
        };
        let flag = format!("--{}", arg.get_long().unwrap_or_default());
        let repeatable = arg.get_num_args().is_some_and(|n| n.max_values() > 1)
            || matches!(arg.get_action(), clap::ArgAction::Append);
        let is_switch = matches!(arg.get_action(), clap::ArgAction::SetTrue);
        let values: Vec<&toml_edit::Value> = match value {
            toml_edit::Value::Array(list) if repeatable => list.iter().collect(),
            toml_edit::Value::Array(_) => {
                return Err(fail(format!("`{key}` takes one value, not a list")));
            }
            v => vec![v],
        };
        let mut args = Vec::new();
        for value in values {
            let text = match value {
                toml_edit::Value::String(s) => s.value().clone(),
                toml_edit::Value::Integer(i) => i.value().to_string(),
                toml_edit::Value::Boolean(b) if is_switch => {
                    if *b.value() {
                        args.push(OsString::from(&flag));
                    }
                    continue;
                }
                toml_edit::Value::Boolean(b) => b.value().to_string(),
                _ => {
                    return Err(fail(format!(
                        "`{key}` takes a string, an integer or a boolean"
                    )))
                }
            };
            if is_switch {
                return Err(fail(format!("`{key}` is true or false, not {text:?}")));
            }
            args.push(OsString::from(format!("{flag}={text}")));
        }
        // The flag's own checks, on this value alone, so the error can name the line.
        let mut probe = vec![OsString::from("serve")];
        probe.extend(args.iter().cloned());
        if let Err(e) = serve
            .clone()
            .no_binary_name(true)
            .try_get_matches_from(&probe[1..])
        {
            let message = e.render().to_string();
            let first = message.lines().next().unwrap_or_default();
            let first = first.trim_start_matches("error: ");
            return Err(fail(format!("`{key}`: {first}")));
        }
        entries.push(Entry {
            key: key.to_string(),
            id: arg.get_id().as_str().to_string(),
            args,
        });
    }
    Ok(entries)
}

fn unknown_key(key: &str, serve: &clap::Command) -> String {
    let known: Vec<String> = serve
        .get_arguments()
        .filter(|a| is_key(a))
        .map(key_of)
        .collect();
    let close = known
        .iter()
        .map(|k| (strsim::jaro_winkler(k, &key.replace('-', "_")), k))
        .filter(|(score, _)| *score > 0.85)
        .max_by(|a, b| a.0.total_cmp(&b.0));
    match close {
        Some((_, k)) => format!("unknown key `{key}` (did you mean `{k}`?)"),
        None => format!("unknown key `{key}` (the keys are `sandboxd serve`'s flags with _ for -)"),
    }
}

/// The effective configuration as TOML a config file could hold, each line saying its source.
pub fn render_toml(settings: &[Setting], file: Option<&Path>) -> String {
    let mut out = String::from(
        "# sandboxd serve: the effective configuration (flag > environment > file > default)\n",
    );
    match file {
        Some(path) => out.push_str(&format!("# config file: {}\n", path.display())),
        None => out.push_str(&format!(
            "# config file: none ({DEFAULT_PATH} does not exist and --config names none)\n"
        )),
    }
    for s in settings {
        let value = match &s.values {
            None => "\"********\"".to_string(),
            Some(v) if s.source == Source::Unset || v.is_empty() => {
                out.push_str(&format!("# {} (unset)\n", s.key));
                continue;
            }
            Some(v) if v.len() == 1 => toml_value(&v[0]),
            Some(v) => format!(
                "[{}]",
                v.iter()
                    .map(|x| toml_value(x))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        out.push_str(&format!("{} = {value}  # {}\n", s.key, s.source.as_str()));
    }
    out
}

/// A value as TOML: integers and booleans bare, everything else a quoted string.
fn toml_value(text: &str) -> String {
    if text.parse::<i64>().is_ok() || text == "true" || text == "false" {
        return text.to_string();
    }
    toml_edit::Value::from(text).to_string().trim().to_string()
}

#[cfg(test)]
mod tests;
