//! Timestamps as the surfaces give and take them: RFC 3339 text, from and to Unix milliseconds.

use sandboxd_store::UnixMillis;

/// RFC 3339 in UTC with millisecond precision, from Unix milliseconds.
pub fn rfc3339(ms: UnixMillis) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

/// An RFC 3339 timestamp (`Z` or a `±HH:MM` offset; also `±HHMM`, as Python's `%z` writes it) in
/// Unix milliseconds (E2B's `startedAfter`, Daytona's metric ranges).
pub fn parse_timestamp(text: &str) -> Option<UnixMillis> {
    let text = text.trim();
    let offset = |len: usize| {
        let i = text.len().checked_sub(len)?;
        let (rest, off) = (text.get(..i)?, text.get(i..)?.as_bytes());
        let sign = match off[0] {
            b'+' => 1,
            b'-' => -1,
            _ => return None,
        };
        let digits: Vec<u8> = off[1..].iter().copied().filter(|b| *b != b':').collect();
        if digits.len() != 4
            || (len == 6 && off[3] != b':')
            || !digits.iter().all(u8::is_ascii_digit)
        {
            return None;
        }
        let n = |d: &[u8]| i64::from(d[0] - b'0') * 10 + i64::from(d[1] - b'0');
        Some((
            rest,
            sign * (n(&digits[..2]) * 60 + n(&digits[2..])) * 60_000,
        ))
    };
    let (utc, offset_ms) = match offset(6).or_else(|| offset(5)) {
        Some((rest, ms)) => (format!("{rest}Z"), ms),
        None => (text.to_string(), 0),
    };
    let t = humantime::parse_rfc3339_weak(&utc).ok()?;
    let ms = t.duration_since(std::time::UNIX_EPOCH).ok()?.as_millis();
    Some(i64::try_from(ms).ok()? - offset_ms)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_render_as_rfc3339() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_798_502_400_123), "2026-12-29T00:00:00.123Z");
        assert_eq!(rfc3339(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn timestamps_parse_as_rfc3339() {
        assert_eq!(parse_timestamp("1970-01-01T00:00:01Z"), Some(1_000));
        assert_eq!(
            parse_timestamp("2026-12-29T00:00:00.123Z"),
            Some(1_798_502_400_123)
        );
        assert_eq!(
            parse_timestamp("1970-01-01T01:00:01.500+01:00"),
            Some(1_500)
        );
        assert_eq!(
            parse_timestamp("1970-01-01T01:00:01.500000+0100"),
            Some(1_500),
            "Python's %z"
        );
        assert_eq!(
            parse_timestamp("1970-01-01T00:00:01-00:30"),
            Some(1_801_000)
        );
        assert_eq!(parse_timestamp("1970-01-01T00:00:01+01:0x"), None);
        assert_eq!(parse_timestamp("yesterday"), None);
        assert_eq!(parse_timestamp("éééééé"), None);
    }
}
