//! Lexing: the escape directive, instructions split from comments and continuations, RUN
//! heredoc bodies, and words split at unquoted blanks. Nothing here substitutes or interprets.

use super::{DockerfileError, Result, MAX_INSTRUCTIONS};

/// One instruction, continuations joined, with its heredoc bodies.
pub(super) struct Logical {
    pub(super) line: usize,
    pub(super) keyword: String,
    pub(super) rest: String,
    pub(super) heredocs: Vec<String>,
}

/// The escape character the `# escape=` directive at the top sets (`\` otherwise).
pub(super) fn escape_directive(lines: &[&str]) -> Result<char> {
    let mut escape = '\\';
    for (index, line) in lines.iter().enumerate() {
        let Some(body) = line.trim().strip_prefix('#') else {
            break;
        };
        let Some((name, value)) = body.split_once('=') else {
            break;
        };
        let name = name.trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric()) {
            break;
        }
        if name.eq_ignore_ascii_case("escape") {
            escape = match value.trim() {
                "\\" => '\\',
                "`" => '`',
                other => {
                    return Err(DockerfileError::Escape {
                        line: index + 1,
                        value: other.to_string(),
                    })
                }
            };
        }
    }
    Ok(escape)
}

pub(super) fn is_comment_or_blank(line: &str) -> bool {
    let trimmed = line.trim_start();
    trimmed.is_empty() || trimmed.starts_with('#')
}

/// `line` without a trailing escape character (and the blanks after it), and whether it had one.
pub(super) fn strip_continuation(line: &str, escape: char) -> (&str, bool) {
    let trimmed = line.trim_end_matches([' ', '\t']);
    match trimmed.strip_suffix(escape) {
        Some(content) => (content, true),
        None => (line, false),
    }
}

pub(super) fn split_instructions(lines: &[&str], escape: char) -> Result<Vec<Logical>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        if is_comment_or_blank(lines[i]) {
            i += 1;
            continue;
        }
        let line = i + 1;
        if out.len() == MAX_INSTRUCTIONS {
            return Err(DockerfileError::TooManyInstructions { line });
        }
        let mut joined = String::new();
        loop {
            let (content, continued) = strip_continuation(lines[i], escape);
            joined.push_str(content);
            i += 1;
            if !continued {
                break;
            }
            while i < lines.len() && is_comment_or_blank(lines[i]) {
                i += 1;
            }
            if i == lines.len() {
                break;
            }
        }
        let joined = joined.trim();
        let (keyword, rest) = match joined.find(char::is_whitespace) {
            Some(at) => (&joined[..at], joined[at..].trim_start()),
            None => (joined, ""),
        };
        let mut heredocs = Vec::new();
        if keyword.eq_ignore_ascii_case("RUN") {
            for marker in heredoc_markers(rest) {
                let mut body = Vec::new();
                loop {
                    let Some(next) = lines.get(i) else {
                        return Err(DockerfileError::UnterminatedHeredoc {
                            line,
                            word: marker.word,
                        });
                    };
                    i += 1;
                    let candidate = if marker.strip_tabs {
                        next.trim_start_matches('\t')
                    } else {
                        next
                    };
                    if candidate == marker.word {
                        break;
                    }
                    body.push(*next);
                }
                heredocs.push(body.join("\n"));
            }
        }
        out.push(Logical {
            line,
            keyword: keyword.to_string(),
            rest: rest.to_string(),
            heredocs,
        });
    }
    Ok(out)
}

pub(super) struct Marker {
    pub(super) word: String,
    pub(super) strip_tabs: bool,
    /// Byte range of the marker (`<<-"EOF"`) in the text.
    pub(super) start: usize,
    pub(super) end: usize,
}

/// The `<<WORD` heredoc markers of a RUN's text, outside shell quotes.
pub(super) fn heredoc_markers(text: &str) -> Vec<Marker> {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut quote: Option<u8> = None;
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match quote {
            Some(q) => {
                if b == b'\\' && q == b'"' {
                    i += 1;
                } else if b == q {
                    quote = None;
                }
                i += 1;
                continue;
            }
            None if b == b'\'' || b == b'"' => quote = Some(b),
            None if b == b'\\' => i += 1,
            None if bytes[i..].starts_with(b"<<") && !bytes[i..].starts_with(b"<<<") => {
                if let Some(marker) = heredoc_marker(text, i) {
                    i = marker.end;
                    out.push(marker);
                    continue;
                }
                i += 1;
            }
            None => {}
        }
        i += 1;
    }
    out
}

pub(super) fn heredoc_marker(text: &str, start: usize) -> Option<Marker> {
    let mut rest = &text[start + 2..];
    let strip_tabs = rest.starts_with('-');
    if strip_tabs {
        rest = &rest[1..];
    }
    let quote = rest.chars().next().filter(|c| *c == '"' || *c == '\'');
    if quote.is_some() {
        rest = &rest[1..];
    }
    let len = rest
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    let word = &rest[..len];
    if !word.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_') {
        return None;
    }
    let mut consumed = len;
    if let Some(q) = quote {
        if !rest[len..].starts_with(q) {
            return None;
        }
        consumed += 1;
    }
    let end = text.len() - rest.len() + consumed;
    Some(Marker {
        word: word.to_string(),
        strip_tabs,
        start,
        end,
    })
}

/// Splits at unquoted blanks, keeping quotes and escapes for substitution; `None` on an
/// unterminated quote.
pub(super) fn split_raw(text: &str, escape: char) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote: Option<char> = None;
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match quote {
            Some(q) => {
                word.push(c);
                if c == escape && q == '"' {
                    word.extend(chars.next());
                } else if c == q {
                    quote = None;
                }
            }
            None if c.is_whitespace() => {
                if !word.is_empty() {
                    words.push(std::mem::take(&mut word));
                }
            }
            None => {
                word.push(c);
                if c == escape {
                    word.extend(chars.next());
                } else if c == '\'' || c == '"' {
                    quote = Some(c);
                }
            }
        }
    }
    if quote.is_some() {
        return None;
    }
    if !word.is_empty() {
        words.push(word);
    }
    Some(words)
}

/// `text` after its first `n` blank-separated words (quote-aware, as [`split_raw`]).
pub(super) fn skip_words(text: &str, n: usize, escape: char) -> &str {
    let mut rest = text.trim_start();
    for _ in 0..n {
        let mut quote: Option<char> = None;
        let mut escaped = false;
        let mut end = rest.len();
        for (i, c) in rest.char_indices() {
            if escaped {
                escaped = false;
                continue;
            }
            match quote {
                Some(q) if c == q => quote = None,
                Some('"') if c == escape => escaped = true,
                Some(_) => {}
                None if c.is_whitespace() => {
                    end = i;
                    break;
                }
                None if c == escape => escaped = true,
                None if c == '\'' || c == '"' => quote = Some(c),
                None => {}
            }
        }
        rest = rest[end..].trim_start();
    }
    rest
}
