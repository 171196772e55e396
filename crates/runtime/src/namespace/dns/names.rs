//! The domain names of egress lists: `example.com` names exactly that name, `*.example.com` every
//! name below it (`api.example.com`, `a.b.example.com`) but not `example.com` itself.
//!
//! Contract: [`NamePattern`]'s parser accepts exactly the names a DNS answer can be matched against
//! without surprise, and refuses the rest with the reason ([`NameError`]): labels of ASCII letters,
//! digits and `-` (not at a label's start or end), each 1 to 63 characters, at most 253 characters in
//! all (a trailing dot ignored), at least two labels for an exact name, and a last label that starts
//! with a letter (so a mistyped address such as `1.2.3` is never taken for a name; custom domains
//! follow the same rule). A `*` stands only as
//! a whole first label. Internationalised names are written in their ASCII (`xn--`) form. A pattern's
//! text is canonical: lowercased, without the trailing dot; it is all that travels and is persisted,
//! and since it holds nothing but letters, digits, `-`, `.` and a leading `*`, nothing else can reach
//! a log line or a firewall script through it. Matching ignores ASCII case.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Longest name, in characters, without the trailing dot.
pub const MAX_NAME: usize = 253;
/// Longest label, in characters.
pub const MAX_LABEL: usize = 63;

/// A domain name, or with a leading `*.` every name below one (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct NamePattern {
    /// The canonical text: lowercase, no trailing dot, `*.` first for a wildcard.
    text: String,
}

/// Why a text is not a [`NamePattern`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Nothing to match.
    #[error("it is empty")]
    Empty,
    /// More than [`MAX_NAME`] characters.
    #[error("it is {0} characters long; a domain name has at most 253")]
    TooLong(usize),
    /// Two dots in a row, or a leading dot.
    #[error("it has an empty label")]
    EmptyLabel,
    /// A label of more than [`MAX_LABEL`] characters.
    #[error("it has a label of {0} characters; a label has at most 63")]
    LabelTooLong(usize),
    /// A character no label may hold.
    #[error("it has the character {0:?}; labels hold ASCII letters, digits and '-' (write an internationalised name in its xn-- form)")]
    Character(char),
    /// A label starting or ending with `-`.
    #[error("it has a label that starts or ends with '-'")]
    Hyphen,
    /// A `*` anywhere but as the whole first label.
    #[error("'*' may only be the whole first label, as in *.example.com")]
    Wildcard,
    /// A last label that does not start with a letter.
    #[error("its last label does not start with a letter (an IPv4 address is a.b.c.d, a block a.b.c.d/n)")]
    LastLabel,
    /// An exact name of one label.
    #[error("it is a single label; name a domain such as example.com")]
    SingleLabel,
}

impl NamePattern {
    /// Whether this is a `*.` pattern.
    pub fn is_wildcard(&self) -> bool {
        self.text.starts_with("*.")
    }

    /// The exact name, or for a wildcard the name everything matched is below.
    fn name(&self) -> &str {
        self.text.strip_prefix("*.").unwrap_or(&self.text)
    }

    /// Whether the name made of `labels` (most specific first, as on the wire; no empty root
    /// label) matches: equal to an exact pattern, or strictly below a wildcard's name. ASCII case is
    /// ignored; a label holding a dot never equals one of ours, so escaping cannot fake a match.
    pub fn matches_labels(&self, labels: &[&[u8]]) -> bool {
        let ours: Vec<&[u8]> = self.name().split('.').map(str::as_bytes).collect();
        let below = if self.is_wildcard() {
            labels.len() > ours.len()
        } else {
            labels.len() == ours.len()
        };
        below
            && labels[labels.len() - ours.len()..]
                .iter()
                .zip(&ours)
                .all(|(theirs, ours)| theirs.eq_ignore_ascii_case(ours))
    }

    /// [`Self::matches_labels`] of a name in dotted text (a trailing dot is ignored).
    pub fn matches(&self, name: &str) -> bool {
        let name = name.strip_suffix('.').unwrap_or(name);
        let labels: Vec<&[u8]> = name.split('.').map(str::as_bytes).collect();
        !name.is_empty() && self.matches_labels(&labels)
    }

    /// The same patterns sorted by their text, without duplicates.
    pub fn normalize(mut patterns: Vec<NamePattern>) -> Vec<NamePattern> {
        patterns.sort();
        patterns.dedup();
        patterns
    }
}

fn check_label(label: &str) -> Result<(), NameError> {
    if label.is_empty() {
        return Err(NameError::EmptyLabel);
    }
    if let Some(c) = label
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || *c == '-'))
    {
        return Err(if c == '*' {
            NameError::Wildcard
        } else {
            NameError::Character(c)
        });
    }
    if label.len() > MAX_LABEL {
        return Err(NameError::LabelTooLong(label.len()));
    }
    if label.starts_with('-') || label.ends_with('-') {
        return Err(NameError::Hyphen);
    }
    Ok(())
}

impl FromStr for NamePattern {
    type Err = NameError;

    fn from_str(text: &str) -> Result<Self, NameError> {
        let trimmed = text.strip_suffix('.').unwrap_or(text);
        if trimmed.is_empty() {
            return Err(NameError::Empty);
        }
        let chars = trimmed.chars().count();
        if chars > MAX_NAME {
            return Err(NameError::TooLong(chars));
        }
        let (wildcard, name) = match trimmed.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, trimmed),
        };
        let labels: Vec<&str> = name.split('.').collect();
        for label in &labels {
            check_label(label)?;
        }
        if labels
            .last()
            .is_some_and(|l| !l.starts_with(|c: char| c.is_ascii_alphabetic()))
        {
            return Err(NameError::LastLabel);
        }
        if !wildcard && labels.len() < 2 {
            return Err(NameError::SingleLabel);
        }
        Ok(NamePattern {
            text: trimmed.to_ascii_lowercase(),
        })
    }
}

impl fmt::Display for NamePattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl TryFrom<String> for NamePattern {
    type Error = NameError;

    fn try_from(text: String) -> Result<Self, NameError> {
        text.parse()
    }
}

impl From<NamePattern> for String {
    fn from(pattern: NamePattern) -> String {
        pattern.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pattern(text: &str) -> NamePattern {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn patterns_parse_to_their_canonical_text() {
        for (text, canonical) in [
            ("example.com", "example.com"),
            ("API.OpenAI.com.", "api.openai.com"),
            ("*.Example.COM", "*.example.com"),
            ("*.internal", "*.internal"),
            ("xn--bcher-kva.example", "xn--bcher-kva.example"),
            ("a-b.c0.io", "a-b.c0.io"),
            ("1.2.3.example", "1.2.3.example"),
        ] {
            assert_eq!(pattern(text).to_string(), canonical, "{text}");
        }
        let longest_label = format!("{}.com", "a".repeat(63));
        assert_eq!(pattern(&longest_label).to_string(), longest_label);
        let longest_name = format!("{0}.{0}.{0}.{1}", "a".repeat(63), "a".repeat(61));
        assert_eq!(longest_name.len(), 253);
        assert!(longest_name.parse::<NamePattern>().is_ok());
        assert!(format!("{longest_name}.").parse::<NamePattern>().is_ok());
    }

    #[test]
    fn bad_names_are_refused_with_the_reason() {
        let long_label = format!("{}.com", "a".repeat(64));
        let long_name = format!("{0}.{0}.{0}.{1}", "a".repeat(63), "a".repeat(62));
        for (text, why) in [
            ("", NameError::Empty),
            (".", NameError::Empty),
            (long_name.as_str(), NameError::TooLong(254)),
            (long_label.as_str(), NameError::LabelTooLong(64)),
            ("a..com", NameError::EmptyLabel),
            (".example.com", NameError::EmptyLabel),
            ("example.com..", NameError::EmptyLabel),
            ("*.", NameError::Wildcard),
            ("a_b.com", NameError::Character('_')),
            ("a b.com", NameError::Character(' ')),
            ("bücher.de", NameError::Character('ü')),
            ("x.com;flush", NameError::Character(';')),
            ("1.2.3.4/24", NameError::Character('/')),
            ("-a.com", NameError::Hyphen),
            ("a-.com", NameError::Hyphen),
            ("*", NameError::Wildcard),
            ("*example.com", NameError::Wildcard),
            ("a.*.com", NameError::Wildcard),
            ("*.*.com", NameError::Wildcard),
            ("**.com", NameError::Wildcard),
            ("1.2.3", NameError::LastLabel),
            ("1.2.3.4", NameError::LastLabel),
            ("*.10", NameError::LastLabel),
            ("example.1com", NameError::LastLabel),
            ("localhost", NameError::SingleLabel),
        ] {
            assert_eq!(text.parse::<NamePattern>(), Err(why), "{text:?}");
        }
    }

    #[test]
    fn an_exact_name_matches_itself_whatever_its_case() {
        let p = pattern("api.example.com");
        for yes in ["api.example.com", "API.Example.Com", "api.example.com."] {
            assert!(p.matches(yes), "{yes}");
        }
        for no in [
            "example.com",
            "x.api.example.com",
            "api.example.co",
            "",
            ".",
        ] {
            assert!(!p.matches(no), "{no}");
        }
    }

    #[test]
    fn a_wildcard_matches_every_name_below_but_not_its_own() {
        let p = pattern("*.example.com");
        for yes in ["a.example.com", "a.b.example.com", "A.EXAMPLE.COM."] {
            assert!(p.matches(yes), "{yes}");
        }
        for no in [
            "example.com",
            "example.com.",
            "badexample.com",
            "a.example.org",
            "com",
        ] {
            assert!(!p.matches(no), "{no}");
        }
        // A wire label holding a dot is one label, not two.
        assert!(!p.matches_labels(&[b"a.example", b"com"]));
        assert!(p.matches_labels(&[b"x", b"example", b"com"]));
    }

    #[test]
    fn patterns_normalize_sorted_and_deduplicated_and_travel_as_text() {
        let list = ["b.com", "*.a.com", "B.com.", "a.com"]
            .map(pattern)
            .to_vec();
        let texts: Vec<String> = NamePattern::normalize(list)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(texts, ["*.a.com", "a.com", "b.com"]);
        let json = serde_json::to_string(&pattern("*.Example.com")).unwrap();
        assert_eq!(json, r#""*.example.com""#);
        assert!(serde_json::from_str::<NamePattern>(r#""a..b""#).is_err());
    }
}
