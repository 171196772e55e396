//! LSP's base protocol: each message is `Content-Length: N\r\n` (other headers may follow),
//! `\r\n`, then N bytes of JSON.
//!
//! [`Decoder`] may be fed a stream joined at any byte. Until it has read one header it skips
//! forward to the next `Content-Length:` followed by a number and a raw CR LF. No JSON body can hold
//! that: a string escapes control characters, and outside strings the words cannot appear at all;
//! so a header found that way is a real one. A body larger than [`MAX_BODY`] is refused rather
//! than buffered.

use crate::Error;
use bytes::{Buf, Bytes, BytesMut};

/// The largest message accepted from a server (completion lists of big modules run to a few MiB).
pub const MAX_BODY: usize = 64 << 20;
/// The longest header block accepted.
const MAX_HEADER: usize = 4096;
const LENGTH: &[u8] = b"content-length:";

/// The bytes of one message whose body is `json`.
pub fn encode(json: &[u8]) -> Bytes {
    let mut out = BytesMut::with_capacity(json.len() + 32);
    out.extend_from_slice(format!("Content-Length: {}\r\n\r\n", json.len()).as_bytes());
    out.extend_from_slice(json);
    out.freeze()
}

/// Splits a server's output into message bodies.
#[derive(Default)]
pub struct Decoder {
    buf: BytesMut,
    /// Whether the stream has been aligned on a header.
    aligned: bool,
}

impl Decoder {
    /// A decoder for a stream read from its very first byte (no resynchronising needed).
    pub fn from_start() -> Self {
        Self {
            buf: BytesMut::new(),
            aligned: true,
        }
    }

    /// Adds bytes read from the stream.
    pub fn feed(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// The next whole message body, if the bytes fed hold one.
    pub fn next_message(&mut self) -> Result<Option<Bytes>, Error> {
        loop {
            if !self.aligned {
                match find_header_start(&self.buf) {
                    Scan::Found(at) => {
                        self.buf.advance(at);
                        self.aligned = true;
                    }
                    Scan::Undecided(at) => {
                        self.buf.advance(at);
                        return Ok(None);
                    }
                }
            }
            let Some(end) = find(&self.buf, b"\r\n\r\n") else {
                if self.buf.len() > MAX_HEADER {
                    return Err(Error::Header(format!(
                        "no end of header within {MAX_HEADER} bytes"
                    )));
                }
                return Ok(None);
            };
            let length = content_length(&self.buf[..end])?;
            let Some(length) = length else {
                // A header block without a length: skip it and look for the next header.
                self.buf.advance(end + 4);
                self.aligned = false;
                continue;
            };
            if length > MAX_BODY {
                return Err(Error::Header(format!(
                    "a body of {length} bytes is larger than {MAX_BODY}"
                )));
            }
            if self.buf.len() < end + 4 + length {
                return Ok(None);
            }
            self.buf.advance(end + 4);
            return Ok(Some(self.buf.split_to(length).freeze()));
        }
    }
}

/// Where a search for a header in an unaligned stream stands.
#[derive(Debug, PartialEq, Eq)]
enum Scan {
    /// A header starts here.
    Found(usize),
    /// No header before this offset; what follows may still begin one.
    Undecided(usize),
}

/// The first `Content-Length:` followed by spaces, digits and a raw CR LF.
fn find_header_start(buf: &[u8]) -> Scan {
    let mut i = 0;
    while i < buf.len() {
        let rest = &buf[i..];
        let prefix = rest.len().min(LENGTH.len());
        if !rest[..prefix].eq_ignore_ascii_case(&LENGTH[..prefix]) {
            i += 1;
            continue;
        }
        if prefix < LENGTH.len() {
            return Scan::Undecided(i);
        }
        let after = &rest[LENGTH.len()..];
        let spaces = after.iter().take_while(|b| **b == b' ').count();
        let digits = after[spaces..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        let tail = &after[spaces + digits..];
        match tail {
            [] | [b'\r'] if spaces + digits <= 24 => return Scan::Undecided(i),
            [b'\r', b'\n', ..] if digits > 0 => return Scan::Found(i),
            _ => i += 1,
        }
    }
    Scan::Undecided(buf.len())
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// The `Content-Length` of a header block; `None` when it has none.
fn content_length(header: &[u8]) -> Result<Option<usize>, Error> {
    for line in header.split(|b| *b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.len() >= LENGTH.len() && line[..LENGTH.len()].eq_ignore_ascii_case(LENGTH) {
            let value = std::str::from_utf8(&line[LENGTH.len()..])
                .map_err(|_| Error::Header("Content-Length is not text".into()))?;
            return value
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| Error::Header(format!("Content-Length {:?}", value.trim())));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(d: &mut Decoder) -> Vec<Bytes> {
        let mut out = vec![];
        while let Some(m) = d.next_message().unwrap() {
            out.push(m);
        }
        out
    }

    #[test]
    fn messages_split_at_every_byte_come_out_whole() {
        let stream = [encode(br#"{"a":1}"#), encode(br#"{"b":"x\r\ny"}"#)].concat();
        for cut in 0..stream.len() {
            let mut d = Decoder::from_start();
            d.feed(&stream[..cut]);
            let mut got = all(&mut d);
            d.feed(&stream[cut..]);
            got.extend(all(&mut d));
            assert_eq!(
                got,
                vec![&br#"{"a":1}"#[..], br#"{"b":"x\r\ny"}"#],
                "cut {cut}"
            );
        }
    }

    #[test]
    fn a_stream_joined_mid_message_finds_the_next_header() {
        let stream = [
            encode(br#"{"text":"Content-Length: 3 in a string"}"#),
            encode(br#"{"id":"7"}"#),
        ]
        .concat();
        for join in 1..stream.len() {
            let mut d = Decoder::default();
            d.feed(&stream[join..]);
            let got = all(&mut d);
            let header_of_second = stream.len() - encode(br#"{"id":"7"}"#).len();
            if join <= header_of_second {
                assert_eq!(got, vec![&br#"{"id":"7"}"#[..]], "join {join}");
            } else {
                assert!(got.is_empty(), "join {join}: {got:?}");
            }
        }
    }

    #[test]
    fn other_headers_and_case_are_accepted() {
        let mut d = Decoder::from_start();
        d.feed(b"content-length: 2\r\nContent-Type: application/vscode-jsonrpc\r\n\r\n{}");
        assert_eq!(all(&mut d), vec![&b"{}"[..]]);
    }

    #[test]
    fn a_bad_or_huge_length_is_an_error_not_a_panic() {
        let mut d = Decoder::from_start();
        d.feed(b"Content-Length: nine\r\n\r\n{}");
        assert!(matches!(d.next_message(), Err(Error::Header(_))));
        let mut d = Decoder::from_start();
        d.feed(format!("Content-Length: {}\r\n\r\n", MAX_BODY + 1).as_bytes());
        assert!(matches!(d.next_message(), Err(Error::Header(_))));
        let mut d = Decoder::from_start();
        d.feed(&[b'x'; MAX_HEADER + 1]);
        assert!(matches!(d.next_message(), Err(Error::Header(_))));
    }

    #[test]
    fn the_words_inside_a_string_are_not_a_header() {
        let mut d = Decoder::default();
        d.feed(br#"tent-Length: 12 is a header"},"Content-Length:"}"#);
        d.feed(&encode(br#"{"id":1}"#));
        assert_eq!(all(&mut d), vec![&br#"{"id":1}"#[..]]);
    }

    #[test]
    fn noise_before_any_header_is_dropped_without_growing() {
        let mut d = Decoder::default();
        for _ in 0..1000 {
            d.feed(&[b'z'; 1000]);
            assert_eq!(d.next_message().unwrap(), None);
        }
        assert!(d.buf.is_empty());
    }
}
