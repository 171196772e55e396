//! Contexts: named, stateful places code runs in, one kernel each.
//!
//! Contract:
//! - A context has an id, a [`Language`] and a working directory. Each language has one default
//!   context (made on first use; Python's at start-up, so it is warm), which a request that names a
//!   language but no context runs in.
//! - One execution at a time per context, including the silent steps around it (setting and
//!   restoring per-execution environment variables), so requests never interleave in a kernel.
//! - A context whose kernel died or never started gets a fresh kernel on its next execution; the
//!   state of the old one is gone (as after a restart).

use super::kernel::{Event, Kernel, KernelError};
use super::output;
use serde_json::{json, Value};
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;

/// Idle time after which the stream carries a `keepalive` line.
/// Short, because writing is how a client that went away is noticed (and its code interrupted).
pub const KEEPALIVE: Duration = Duration::from_secs(1);
/// Lines held between an execution and a slow client.
const LINE_BUFFER: usize = 64;
/// Kernel-side set-up of every Python kernel (the chart formatter).
const PYTHON_SETUP: &str = sandboxd_charts::KERNEL_SETUP;

/// Languages the interpreter runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Language {
    Python,
    Bash,
}

impl Language {
    /// Parses a request's language: case-insensitive, with E2B's aliases; anything else is refused
    /// naming what is supported.
    pub fn parse(name: &str) -> Result<Language, String> {
        let lower = name.trim().to_ascii_lowercase();
        let canonical = match lower.as_str() {
            "js" => "javascript",
            "ts" => "typescript",
            "py" | "python3" => "python",
            "sh" => "bash",
            other => other,
        };
        match canonical {
            "python" => Ok(Language::Python),
            "bash" => Ok(Language::Bash),
            other => Err(format!(
                "unsupported language {other:?}: this interpreter runs \"python\" and \"bash\""
            )),
        }
    }

    /// The language's name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            Language::Python => "python",
            Language::Bash => "bash",
        }
    }

    fn kernelspec(self) -> &'static str {
        match self {
            Language::Python => "python3",
            Language::Bash => "bash",
        }
    }
}

/// One context.
pub struct Context {
    pub id: String,
    pub language: Language,
    pub cwd: PathBuf,
    /// The kernel; the lock is also what serializes executions.
    kernel: tokio::sync::Mutex<Option<Arc<Kernel>>>,
}

impl Context {
    /// The context's wire form.
    pub fn to_json(&self) -> Value {
        json!({ "id": self.id, "language": self.language.as_str(), "cwd": self.cwd.to_string_lossy() })
    }
}

/// Why a context operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ContextError {
    /// No context has this id.
    #[error("context {0:?} not found")]
    NotFound(String),
    /// The request cannot be honoured as asked.
    #[error("{0}")]
    Invalid(String),
    /// The context's kernel could not be started.
    #[error(transparent)]
    Kernel(#[from] KernelError),
}

/// Every context of this interpreter.
pub struct Contexts {
    runtime_dir: PathBuf,
    home: PathBuf,
    all: Mutex<HashMap<String, Arc<Context>>>,
    defaults: Mutex<HashMap<Language, String>>,
}

impl Contexts {
    /// No contexts yet; kernels' connection files go to `runtime_dir`, contexts start in `home`
    /// unless they name a directory.
    pub fn new(runtime_dir: PathBuf, home: PathBuf) -> Contexts {
        Contexts {
            runtime_dir,
            home,
            all: Mutex::default(),
            defaults: Mutex::default(),
        }
    }

    /// Makes a context with a running kernel.
    pub async fn create(
        &self,
        language: Language,
        cwd: Option<&str>,
    ) -> Result<Arc<Context>, ContextError> {
        let cwd = match cwd {
            Some(dir) => {
                let dir = Path::new(dir);
                if !dir.is_absolute() || !dir.is_dir() {
                    return Err(ContextError::Invalid(format!(
                        "cwd {:?} is not an existing absolute directory",
                        dir.display()
                    )));
                }
                dir.to_path_buf()
            }
            None => self.home.clone(),
        };
        let kernel = self.start_kernel(language, &cwd).await?;
        let context = Arc::new(Context {
            id: uuid::Uuid::new_v4().to_string(),
            language,
            cwd,
            kernel: tokio::sync::Mutex::new(Some(kernel)),
        });
        self.lock_all().insert(context.id.clone(), context.clone());
        Ok(context)
    }

    /// The default context of `language`, made (and its kernel started) on first use.
    pub async fn default_for(&self, language: Language) -> Result<Arc<Context>, ContextError> {
        let existing = self
            .defaults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&language)
            .and_then(|id| self.lock_all().get(id).cloned());
        if let Some(context) = existing {
            return Ok(context);
        }
        let context = Arc::new(Context {
            id: uuid::Uuid::new_v4().to_string(),
            language,
            cwd: self.home.clone(),
            kernel: tokio::sync::Mutex::new(None),
        });
        let chosen = {
            let mut defaults = self.defaults.lock().unwrap_or_else(|p| p.into_inner());
            match defaults
                .get(&language)
                .and_then(|id| self.lock_all().get(id).cloned())
            {
                Some(raced) => raced,
                None => {
                    defaults.insert(language, context.id.clone());
                    self.lock_all().insert(context.id.clone(), context.clone());
                    context
                }
            }
        };
        self.ensure_kernel(&chosen).await?;
        Ok(chosen)
    }

    /// The context `id`.
    pub fn get(&self, id: &str) -> Result<Arc<Context>, ContextError> {
        self.lock_all()
            .get(id)
            .cloned()
            .ok_or_else(|| ContextError::NotFound(id.to_string()))
    }

    /// Every context, oldest ids first is not promised: sorted by id for a stable answer.
    pub fn list(&self) -> Vec<Arc<Context>> {
        let mut all: Vec<_> = self.lock_all().values().cloned().collect();
        all.sort_by(|a, b| a.id.cmp(&b.id));
        all
    }

    /// Replaces the kernel of context `id` with a fresh one (its state is lost). Waits for a running
    /// execution to end.
    pub async fn restart(&self, id: &str) -> Result<(), ContextError> {
        let context = self.get(id)?;
        let mut kernel = context.kernel.lock().await;
        if let Some(old) = kernel.take() {
            old.shutdown().await;
        }
        *kernel = Some(self.start_kernel(context.language, &context.cwd).await?);
        Ok(())
    }

    /// Removes context `id` and shuts its kernel down.
    pub async fn remove(&self, id: &str) -> Result<(), ContextError> {
        let context = self
            .lock_all()
            .remove(id)
            .ok_or_else(|| ContextError::NotFound(id.to_string()))?;
        self.defaults
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|_, default| default != id);
        if let Some(kernel) = context.kernel.lock().await.take() {
            kernel.shutdown().await;
        }
        Ok(())
    }

    /// Runs `code` in `context` with `envs` set for this execution only, streaming the output lines
    /// (ending with `end_of_execution`). Dropping the receiver interrupts the code.
    pub fn execute(
        self: &Arc<Self>,
        context: Arc<Context>,
        code: String,
        envs: BTreeMap<String, String>,
    ) -> mpsc::Receiver<Value> {
        let (out, rx) = mpsc::channel(LINE_BUFFER);
        let contexts = self.clone();
        tokio::spawn(async move {
            let mut slot = context.kernel.lock().await;
            let kernel = match contexts.live_kernel(&context, &mut slot).await {
                Ok(k) => k,
                Err(e) => {
                    let why = crate::interpreter::chain(&e);
                    let _ = out.send(output::error("KernelStartError", &why, "")).await;
                    let _ = out.send(json!({"type": "end_of_execution"})).await;
                    return;
                }
            };
            let (set, restore) = env_code(context.language, &envs);
            if let Some(set) = set {
                if let Err(e) = kernel.execute_silently(set).await {
                    let why = crate::interpreter::chain(&e);
                    let _ = out.send(output::error("KernelDied", &why, "")).await;
                    let _ = out.send(json!({"type": "end_of_execution"})).await;
                    return;
                }
            }
            let mut events = kernel.execute(code).await;
            loop {
                let line = match tokio::time::timeout(KEEPALIVE, events.recv()).await {
                    Err(_) => json!({"type": "keepalive"}),
                    Ok(None) => break,
                    Ok(Some(Event::Message(content))) => match output::line(&content, &now()) {
                        Some(line) => line,
                        None => continue,
                    },
                    Ok(Some(Event::Died(why))) => output::error(
                        "KernelDied",
                        &format!("the kernel died ({why}); it is restarted on the next execution, without the state it had"),
                        "",
                    ),
                };
                if out.send(line).await.is_err() {
                    // The client went away: dropping `events` interrupts the code.
                    break;
                }
            }
            drop(events);
            if let Some(restore) = restore {
                let _ = kernel.execute_silently(restore).await;
            }
            let _ = out.send(json!({"type": "end_of_execution"})).await;
        });
        rx
    }

    async fn ensure_kernel(&self, context: &Context) -> Result<(), ContextError> {
        let mut slot = context.kernel.lock().await;
        self.live_kernel(context, &mut slot).await.map(|_| ())
    }

    /// The context's kernel, started anew when it has none or its kernel died.
    async fn live_kernel(
        &self,
        context: &Context,
        slot: &mut Option<Arc<Kernel>>,
    ) -> Result<Arc<Kernel>, ContextError> {
        if let Some(k) = slot.as_ref().filter(|k| k.is_alive()) {
            return Ok(k.clone());
        }
        if let Some(dead) = slot.take() {
            tracing::info!(context = %context.id, why = %dead.death(), "restarting a dead kernel");
        }
        let kernel = self.start_kernel(context.language, &context.cwd).await?;
        *slot = Some(kernel.clone());
        Ok(kernel)
    }

    async fn start_kernel(
        &self,
        language: Language,
        cwd: &Path,
    ) -> Result<Arc<Kernel>, ContextError> {
        let kernel = Arc::new(Kernel::start(language.kernelspec(), cwd, &self.runtime_dir).await?);
        if language == Language::Python {
            kernel.execute_silently(PYTHON_SETUP.to_string()).await?;
        }
        Ok(kernel)
    }

    fn lock_all(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<Context>>> {
        self.all.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Refuses environment variables no process could carry (or, for bash, no shell could name).
pub fn check_envs(language: Language, envs: &BTreeMap<String, String>) -> Result<(), String> {
    for (key, value) in envs {
        let portable = !key.is_empty()
            && !key.as_bytes()[0].is_ascii_digit()
            && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        let carried = !key.is_empty() && !key.contains(['=', '\0']) && !value.contains('\0');
        if !carried || (language == Language::Bash && !portable) {
            return Err(format!("invalid environment variable {key:?}"));
        }
    }
    Ok(())
}

/// The silent code that sets `envs` in a kernel before an execution, and the code that restores
/// what was there after it.
fn env_code(
    language: Language,
    envs: &BTreeMap<String, String>,
) -> (Option<String>, Option<String>) {
    if envs.is_empty() {
        return (None, None);
    }
    match language {
        Language::Python => {
            let values = serde_json::to_string(envs).expect("strings serialize");
            let keys =
                serde_json::to_string(&envs.keys().collect::<Vec<_>>()).expect("strings serialize");
            (
                Some(format!(
                    "import os as __sbx_os\n__sbx_env_saved = {{k: __sbx_os.environ.get(k) for k in {keys}}}\n__sbx_os.environ.update({values})\n"
                )),
                Some(
                    "for __sbx_k, __sbx_v in __sbx_env_saved.items():\n    if __sbx_v is None:\n        __sbx_os.environ.pop(__sbx_k, None)\n    else:\n        __sbx_os.environ[__sbx_k] = __sbx_v\ndel __sbx_env_saved\n"
                        .to_string(),
                ),
            )
        }
        Language::Bash => {
            let quote = |v: &str| format!("'{}'", v.replace('\'', "'\\''"));
            let mut set = String::new();
            let mut restore = String::new();
            for (k, v) in envs {
                set.push_str(&format!(
                    "__sbx_set_{k}=${{{k}+1}}; __sbx_val_{k}=${{{k}-}}; export {k}={}\n",
                    quote(v)
                ));
                restore.push_str(&format!(
                    "if [ -n \"$__sbx_set_{k}\" ]; then export {k}=\"$__sbx_val_{k}\"; else unset {k}; fi; unset __sbx_set_{k} __sbx_val_{k}\n"
                ));
            }
            (Some(set), Some(restore))
        }
    }
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn languages_parse_case_insensitively_and_refuse_others_naming_the_supported() {
        assert_eq!(Language::parse("Python").unwrap(), Language::Python);
        assert_eq!(Language::parse("bash").unwrap(), Language::Bash);
        let js = Language::parse("js").unwrap_err();
        assert!(
            js.contains("\"javascript\"") && js.contains("python") && js.contains("bash"),
            "{js}"
        );
        assert!(Language::parse("r").is_err());
    }

    #[test]
    fn environment_names_are_checked_per_language() {
        let envs = |k: &str| BTreeMap::from([(k.to_string(), "v".to_string())]);
        assert!(check_envs(Language::Python, &envs("MY_VAR")).is_ok());
        assert!(check_envs(Language::Python, &envs("A-B")).is_ok());
        assert!(check_envs(Language::Bash, &envs("A-B")).is_err());
        assert!(check_envs(Language::Python, &envs("A=B")).is_err());
        assert!(check_envs(Language::Bash, &envs("1X")).is_err());
    }

    #[test]
    fn bash_values_are_single_quoted_so_nothing_in_them_runs() {
        let envs = BTreeMap::from([("X".to_string(), "it's $(reboot)".to_string())]);
        let (set, restore) = env_code(Language::Bash, &envs);
        assert!(set.unwrap().contains("export X='it'\\''s $(reboot)'"));
        assert!(restore.unwrap().contains("unset X"));
        assert_eq!(env_code(Language::Python, &BTreeMap::new()), (None, None));
    }
}
