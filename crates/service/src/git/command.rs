//! One `git` command in a sandbox, run through [`Service::exec`] (the sandbox's own `git`, as the
//! sandbox's `user`), and the credentials it may carry.
//!
//! - Every run is `git -C <repo> …` with `GIT_TERMINAL_PROMPT=0` (a missing credential fails at
//!   once instead of waiting for a terminal) and `LC_ALL=C` (messages are classified by their text,
//!   [`super::classify()`]).
//! - Credentials ([`Credentials`]) reach git only through a credential helper given with `-c` for
//!   that one command, which prints `username=`/`password=` from two environment variables of that
//!   command: nothing is written to the repository's config, the URL, the command line or a log.
//!   Other configured helpers are cleared for the command. [`strip_userinfo`] moves credentials
//!   written into an `http(s)://user:pass@` URL into the helper the same way.
//! - What git says is returned with the password, if one was given, masked (`***`).

use super::classify::classify;
use crate::{Service, ServiceError};
use sandboxd_api_types as api;
use std::collections::BTreeMap;

/// Longest a network operation (clone, push, pull) may run.
const NETWORK_TIMEOUT_MS: u64 = 15 * 60 * 1000;
/// Longest a local operation may run.
const LOCAL_TIMEOUT_MS: u64 = 2 * 60 * 1000;
/// The environment variables the helper reads.
const USER_VAR: &str = "SANDBOXD_GIT_USERNAME";
const PASSWORD_VAR: &str = "SANDBOXD_GIT_PASSWORD";
/// The helper: answers `get` from the two variables, ignores `store` and `erase`.
const HELPER: &str = "credential.helper=!f() { test \"$1\" = get || exit 0; \
    printf 'username=%s\\npassword=%s\\n' \"$SANDBOXD_GIT_USERNAME\" \"$SANDBOXD_GIT_PASSWORD\"; }; f";

/// A username and password for one command.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({:?}, ***)", self.username)
    }
}

impl Credentials {
    /// Credentials from a request's optional fields: a password alone is a token (GitHub style,
    /// any username works), a username alone has an empty password.
    pub fn of(username: Option<&str>, password: Option<&str>) -> Option<Self> {
        match (
            username.filter(|u| !u.is_empty()),
            password.filter(|p| !p.is_empty()),
        ) {
            (None, None) => None,
            (u, p) => Some(Self {
                username: u.unwrap_or("x-access-token").to_string(),
                password: p.unwrap_or_default().to_string(),
            }),
        }
    }
}

/// `text` with `password` (when there is one) masked.
pub(super) fn masked(text: String, password: &str) -> String {
    if password.is_empty() {
        text
    } else {
        text.replace(password, "***")
    }
}

/// One git command in a sandbox.
pub struct GitRun<'a> {
    pub repo: &'a str,
    pub args: Vec<String>,
    pub credentials: Option<&'a Credentials>,
    /// `-c key=value` settings for this command alone.
    pub config: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub network: bool,
}

impl<'a> GitRun<'a> {
    pub fn new(repo: &'a str, args: &[&str]) -> Self {
        Self {
            repo,
            args: args.iter().map(|a| a.to_string()).collect(),
            credentials: None,
            config: Vec::new(),
            env: BTreeMap::new(),
            network: false,
        }
    }

    /// The command line and environment.
    pub fn command(&self) -> (Vec<String>, BTreeMap<String, String>) {
        let mut cmd = vec!["git".to_string()];
        let mut env = self.env.clone();
        env.insert("GIT_TERMINAL_PROMPT".into(), "0".into());
        env.insert("LC_ALL".into(), "C".into());
        if let Some(c) = self.credentials {
            cmd.extend([
                "-c".into(),
                "credential.helper=".into(),
                "-c".into(),
                HELPER.into(),
            ]);
            env.insert(USER_VAR.into(), c.username.clone());
            env.insert(PASSWORD_VAR.into(), c.password.clone());
        }
        for setting in &self.config {
            cmd.extend(["-c".into(), setting.clone()]);
        }
        cmd.extend(["-C".into(), self.repo.to_string()]);
        cmd.extend(self.args.iter().cloned());
        (cmd, env)
    }

    /// Runs it; its stdout when it succeeds.
    pub async fn run(&self, service: &Service, id: &str) -> Result<String, ServiceError> {
        let (exit_code, stdout, said) = self.output(service, id).await?;
        if exit_code == 0 {
            Ok(stdout)
        } else {
            Err(classify(&said, exit_code).into())
        }
    }

    /// Runs it: its exit code, stdout, and all it said (stderr then stdout, any password masked).
    pub async fn output(
        &self,
        service: &Service,
        id: &str,
    ) -> Result<(i32, String, String), ServiceError> {
        let (cmd, env) = self.command();
        let timeout = if self.network {
            NETWORK_TIMEOUT_MS
        } else {
            LOCAL_TIMEOUT_MS
        };
        let result = service
            .exec(
                id,
                api::ExecRequest {
                    cmd,
                    env: Some(env),
                    timeout_ms: Some(timeout),
                    ..Default::default()
                },
            )
            .await?;
        let said = format!("{}\n{}", result.stderr, result.stdout);
        let password = self.credentials.map_or("", |c| c.password.as_str());
        Ok((result.exit_code, result.stdout, masked(said, password)))
    }
}

/// `url` without the `user:password@` of an `http(s)://` URL, and those credentials.
pub fn strip_userinfo(url: &str) -> (String, Option<Credentials>) {
    let Some((scheme, rest)) = url.split_once("://") else {
        return (url.to_string(), None);
    };
    if !scheme.eq_ignore_ascii_case("http") && !scheme.eq_ignore_ascii_case("https") {
        return (url.to_string(), None);
    }
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let Some(at) = rest[..authority_end].rfind('@') else {
        return (url.to_string(), None);
    };
    let (user, password) = match rest[..at].split_once(':') {
        Some((u, p)) => (u, p),
        None => (&rest[..at], ""),
    };
    let decode = |s: &str| {
        form_urlencoded::parse(format!("v={}", s.replace('+', "%2B")).as_bytes())
            .next()
            .map(|(_, v)| v.into_owned())
            .unwrap_or_default()
    };
    let credentials = Credentials {
        username: decode(user),
        password: decode(password),
    };
    (format!("{scheme}://{}", &rest[at + 1..]), Some(credentials))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_never_reach_the_command_line() {
        let creds = Credentials::of(Some("alice"), Some("s3cret")).unwrap();
        let mut run = GitRun::new("/repo", &["push", "origin", "HEAD"]);
        run.credentials = Some(&creds);
        let (cmd, env) = run.command();
        assert!(
            !cmd.iter()
                .any(|a| a.contains("s3cret") || a.contains("alice")),
            "{cmd:?}"
        );
        assert_eq!(env[PASSWORD_VAR], "s3cret");
        assert_eq!(env[USER_VAR], "alice");
        assert_eq!(&cmd[1..5], ["-c", "credential.helper=", "-c", HELPER]);
        assert!(!format!("{creds:?}").contains("s3cret"));
        let e = GitRun::new("/r", &["status"]).command().1;
        assert!(!e.contains_key(PASSWORD_VAR));
        assert_eq!(e["GIT_TERMINAL_PROMPT"], "0");
    }

    #[test]
    fn userinfo_leaves_urls() {
        let (url, creds) = strip_userinfo("https://bob:p%40ss@git.example/r.git");
        assert_eq!(url, "https://git.example/r.git");
        let creds = creds.unwrap();
        assert_eq!(
            (creds.username.as_str(), creds.password.as_str()),
            ("bob", "p@ss")
        );
        assert_eq!(
            strip_userinfo("git@host:r.git"),
            ("git@host:r.git".into(), None)
        );
        assert_eq!(
            strip_userinfo("http://host/a@b"),
            ("http://host/a@b".into(), None)
        );
        assert!(Credentials::of(None, None).is_none());
        assert_eq!(
            Credentials::of(None, Some("tok")).unwrap().username,
            "x-access-token"
        );
    }
}
