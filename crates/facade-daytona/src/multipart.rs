//! The framing of a streamed `multipart/form-data` response (RFC 7578), as Daytona's bulk download
//! sends one: each part `--BOUNDARY\r\n`, its headers, an empty line, its bytes, `\r\n`; then
//! `--BOUNDARY--\r\n`. (Parsing multipart is `multer`'s; no maintained crate writes a streamed
//! response body, and the framing is these few lines.)
//!
//! A part names its file by `filename="<path>"` exactly as requested (the SDK matches parts to
//! requests by string equality): `"` and `\` are escaped as quoted pairs; a path that is not
//! printable ASCII also gets `filename*=utf-8''<percent-encoded>` (RFC 5987), which the SDK
//! prefers, with `_` for the other characters in the plain form. The boundary is random, so no
//! file's bytes end a part early.

/// A fresh boundary: 32 random hexadecimal digits after a fixed prefix.
pub fn boundary() -> String {
    let bytes: [u8; 16] = rand::random();
    format!("sandboxd-{}", hex::encode(bytes))
}

/// The `Content-Type` of a body framed with `boundary`.
pub fn content_type(boundary: &str) -> String {
    format!("multipart/form-data; boundary={boundary}")
}

/// What opens a part: its boundary line and headers.
pub fn part_head(boundary: &str, name: &str, filename: &str, content_type: &str) -> Vec<u8> {
    format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"{name}\"; {}\r\nContent-Type: {content_type}\r\n\r\n",
        filename_params(filename)
    )
    .into_bytes()
}

/// What ends a part.
pub const PART_END: &[u8] = b"\r\n";

/// What ends the body.
pub fn closing(boundary: &str) -> Vec<u8> {
    format!("--{boundary}--\r\n").into_bytes()
}

/// `filename="…"` and, when needed, `filename*=…`.
pub fn filename_params(filename: &str) -> String {
    let plain = filename.bytes().all(|b| (0x20..0x7f).contains(&b));
    let mut quoted = String::with_capacity(filename.len() + 2);
    for c in filename.chars() {
        match c {
            '"' | '\\' => {
                quoted.push('\\');
                quoted.push(c);
            }
            ' '..='~' => quoted.push(c),
            _ => quoted.push('_'),
        }
    }
    if plain {
        return format!("filename=\"{quoted}\"");
    }
    let mut encoded = String::new();
    for b in filename.bytes() {
        if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~/".contains(&b) {
            encoded.push(b as char);
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    format!("filename=\"{quoted}\"; filename*=utf-8''{encoded}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_framed_as_rfc_7578_says() {
        let mut body = part_head("B", "file", "/a/b.txt", "application/octet-stream");
        body.extend_from_slice(b"data");
        body.extend_from_slice(PART_END);
        body.extend_from_slice(&closing("B"));
        assert_eq!(
            String::from_utf8(body).unwrap(),
            "--B\r\nContent-Disposition: form-data; name=\"file\"; filename=\"/a/b.txt\"\r\n\
             Content-Type: application/octet-stream\r\n\r\ndata\r\n--B--\r\n"
        );
    }

    #[test]
    fn filenames_survive_exactly() {
        assert_eq!(filename_params(r#"/x/"q"\y"#), r#"filename="/x/\"q\"\\y""#);
        assert_eq!(
            filename_params("/tmp/é\r\n.txt"),
            "filename=\"/tmp/___.txt\"; filename*=utf-8''/tmp/%C3%A9%0D%0A.txt"
        );
    }

    #[test]
    fn boundaries_differ() {
        let (a, b) = (boundary(), boundary());
        assert_ne!(a, b);
        assert_eq!(a.len(), "sandboxd-".len() + 32);
    }
}
