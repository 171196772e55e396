//! Variable substitution over one word, with quote removal, as Docker's shell lexer does it.

use super::{
    DockerfileError, Result, StepContext, MAX_NESTING, MAX_SUBSTITUTED_BYTES, MAX_VALUE_BYTES,
};
use std::collections::BTreeMap;

/// Where substitution looks values up.
pub(super) trait Vars {
    fn var(&self, name: &str) -> Option<&str>;
}

impl Vars for BTreeMap<String, String> {
    fn var(&self, name: &str) -> Option<&str> {
        self.get(name).map(String::as_str)
    }
}

impl Vars for StepContext {
    fn var(&self, name: &str) -> Option<&str> {
        StepContext::var(self, name)
    }
}

/// Substitution over one word.
pub(super) struct Expander<'a> {
    pub(super) chars: &'a [char],
    pub(super) at: usize,
    pub(super) escape: char,
    pub(super) vars: &'a dyn Vars,
    pub(super) line: usize,
    pub(super) substituted: &'a std::cell::Cell<usize>,
}

impl Expander<'_> {
    /// Expands until the end, or until an unescaped `}` when `close` (inside `${V:-…}`).
    pub(super) fn run(
        &mut self,
        quotes: bool,
        close: Option<char>,
        depth: usize,
    ) -> Result<String> {
        let line = self.line;
        let mut out = String::new();
        let mut in_double = false;
        while let Some(&c) = self.chars.get(self.at) {
            if out.len() > MAX_VALUE_BYTES {
                return Err(DockerfileError::TooLong {
                    line,
                    limit: MAX_VALUE_BYTES,
                });
            }
            if close == Some(c) && !in_double {
                return Ok(out);
            }
            self.at += 1;
            if quotes && !in_double && c == '\'' {
                loop {
                    match self.chars.get(self.at) {
                        Some('\'') => break,
                        Some(&q) => out.push(q),
                        None => return Err(DockerfileError::UnterminatedQuote { line }),
                    }
                    self.at += 1;
                }
                self.at += 1;
            } else if quotes && c == '"' {
                in_double = !in_double;
            } else if c == self.escape {
                match self.chars.get(self.at) {
                    Some(&next)
                        if !in_double || next == '"' || next == '$' || next == self.escape =>
                    {
                        out.push(next);
                        self.at += 1;
                    }
                    _ => out.push(c),
                }
            } else if c == '$' {
                self.variable(&mut out, depth)?;
            } else {
                out.push(c);
            }
        }
        if in_double {
            return Err(DockerfileError::UnterminatedQuote { line });
        }
        if close.is_some() {
            return Err(DockerfileError::UnterminatedBrace { line });
        }
        Ok(out)
    }

    /// After a `$`: appends the variable's value (or the `$` itself, if no name follows).
    fn variable(&mut self, out: &mut String, depth: usize) -> Result<()> {
        let line = self.line;
        let start = self.at - 1;
        if self.chars.get(self.at) != Some(&'{') {
            let name = self.name();
            if name.is_empty() {
                out.push('$');
            } else {
                self.push(out, self.vars.var(&name).unwrap_or(""))?;
            }
            return Ok(());
        }
        self.at += 1;
        let name = self.name();
        let bad = |at: usize, chars: &[char]| DockerfileError::BadSubstitution {
            line,
            text: chars[start..at.min(chars.len())].iter().take(64).collect(),
        };
        if name.is_empty() {
            return match self.chars.get(self.at) {
                None => Err(DockerfileError::UnterminatedBrace { line }),
                Some(_) => Err(bad(self.at + 1, self.chars)),
            };
        }
        let vars = self.vars;
        let value = vars.var(&name);
        let colon = self.chars.get(self.at) == Some(&':');
        if colon {
            self.at += 1;
        }
        match self.chars.get(self.at) {
            None => Err(DockerfileError::UnterminatedBrace { line }),
            Some('}') if !colon => {
                self.at += 1;
                self.push(out, value.unwrap_or(""))
            }
            Some(&op @ ('-' | '+')) => {
                self.at += 1;
                if depth >= MAX_NESTING {
                    return Err(bad(self.at, self.chars));
                }
                let word = self.run(false, Some('}'), depth + 1)?;
                self.at += 1; // the `}`
                let set = match value {
                    Some(v) => !colon || !v.is_empty(),
                    None => false,
                };
                match (op, set) {
                    ('-', true) => self.push(out, value.unwrap_or("")),
                    ('-', false) | ('+', true) => {
                        out.push_str(&word);
                        Ok(())
                    }
                    _ => Ok(()),
                }
            }
            Some(_) => Err(bad(self.at + 1, self.chars)),
        }
    }

    /// Appends a variable's value, counting it against [`MAX_SUBSTITUTED_BYTES`].
    fn push(&self, out: &mut String, value: &str) -> Result<()> {
        let total = self.substituted.get() + value.len();
        self.substituted.set(total);
        if total > MAX_SUBSTITUTED_BYTES {
            return Err(DockerfileError::TooLong {
                line: self.line,
                limit: MAX_SUBSTITUTED_BYTES,
            });
        }
        out.push_str(value);
        Ok(())
    }

    fn name(&mut self) -> String {
        let mut name = String::new();
        while let Some(&c) = self.chars.get(self.at) {
            let ok =
                c == '_' || c.is_ascii_alphabetic() || (!name.is_empty() && c.is_ascii_digit());
            if !ok {
                break;
            }
            name.push(c);
            self.at += 1;
        }
        name
    }
}
