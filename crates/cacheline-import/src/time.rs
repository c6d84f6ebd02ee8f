//! Times as the stores write them: ISO-8601 in UTC (`2026-12-04T23:57:00.630Z`, an offset
//! such as `+02:00` allowed) and milliseconds since the epoch; days as `YYYY-MM-DD` (UTC).

use prompt_core::calendar::{civil_from_days, days_from_civil};

/// Seconds since the Unix epoch of an ISO-8601 date and time (`2026-12-04T23:57:00.630Z`,
/// `2026-12-04 23:57:00+02:00`, or a bare date `2026-12-04` at midnight UTC); `None` for
/// anything else.
///
/// ```
/// use cacheline_import::time::parse_iso;
/// assert_eq!(parse_iso("1970-01-02T00:00:01.500Z"), Some(86_401.5));
/// assert_eq!(parse_iso("2026-12-05"), parse_iso("2026-12-05T00:00:00Z"));
/// assert_eq!(parse_iso("yesterday"), None);
/// ```
pub fn parse_iso(text: &str) -> Option<f64> {
    let b = text.trim().as_bytes();
    let num = |range: std::ops::Range<usize>| -> Option<i64> {
        let digits = b.get(range)?;
        if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
            return None;
        }
        std::str::from_utf8(digits).ok()?.parse().ok()
    };
    if b.get(4) != Some(&b'-') || b.get(7) != Some(&b'-') {
        return None;
    }
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let days = days_from_civil(year, month, day);
    if b.len() == 10 {
        return Some(days as f64 * 86_400.0);
    }
    if !matches!(b.get(10), Some(b'T' | b't' | b' ')) || b.get(13) != Some(&b':') {
        return None;
    }
    let (hour, minute) = (num(11..13)?, num(14..16)?);
    let mut i = 16;
    let mut second = 0.0;
    if b.get(16) == Some(&b':') {
        second = num(17..19)? as f64;
        i = 19;
        if b.get(19) == Some(&b'.') {
            let start = 20;
            let mut end = start;
            while b.get(end).is_some_and(u8::is_ascii_digit) {
                end += 1;
            }
            let frac = std::str::from_utf8(b.get(19..end)?).ok()?;
            second += format!("0{frac}").parse::<f64>().ok()?;
            i = end;
        }
    }
    if hour > 23 || minute > 59 || second >= 61.0 {
        return None;
    }
    let offset = match b.get(i..)? {
        [] | [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), h1, h2, b':', m1, m2] | [sign @ (b'+' | b'-'), h1, h2, m1, m2] => {
            let digit = |c: &u8| c.is_ascii_digit().then(|| i64::from(c - b'0'));
            let minutes = (digit(h1)? * 10 + digit(h2)?) * 60 + digit(m1)? * 10 + digit(m2)?;
            if *sign == b'+' { minutes } else { -minutes }
        }
        _ => return None,
    };
    Some(days as f64 * 86_400.0 + (hour * 3600 + minute * 60 - offset * 60) as f64 + second)
}

/// The day (`YYYY-MM-DD`, UTC) of `secs` since the epoch.
///
/// ```
/// use cacheline_import::time::day;
/// assert_eq!(day(0.0), "1970-01-01");
/// assert_eq!(day(1_796_428_626.185), "2026-12-04");
/// ```
pub fn day(secs: f64) -> String {
    let (y, m, d) = civil_from_days(day_number(secs));
    format!("{y:04}-{m:02}-{d:02}")
}

/// `secs` since the epoch as ISO-8601 UTC with milliseconds (`2026-12-04T23:57:06.185Z`).
///
/// ```
/// use cacheline_import::time::iso;
/// assert_eq!(iso(1_796_428_626.185), "2026-12-04T23:57:06.185Z");
/// ```
pub fn iso(secs: f64) -> String {
    let days = day_number(secs);
    let (y, m, d) = civil_from_days(days);
    let ms_of_day = ((secs - days as f64 * 86_400.0) * 1000.0)
        .round()
        .clamp(0.0, 86_399_999.0) as i64;
    let (h, rest) = (ms_of_day / 3_600_000, ms_of_day % 3_600_000);
    let (min, rest) = (rest / 60_000, rest % 60_000);
    format!(
        "{y:04}-{m:02}-{d:02}T{h:02}:{min:02}:{:02}.{:03}Z",
        rest / 1000,
        rest % 1000
    )
}

fn day_number(secs: f64) -> i64 {
    let secs = if secs.is_finite() {
        secs.clamp(-1e13, 1e13)
    } else {
        0.0
    };
    (secs / 86_400.0).floor() as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any millisecond within ±300 years reads back as it was written.
        #[test]
        fn iso_round_trips(ms in -9_000_000_000_000i64..9_000_000_000_000i64) {
            let secs = ms as f64 / 1000.0;
            let back = parse_iso(&iso(secs));
            prop_assert!(back.is_some_and(|b| (b - secs).abs() < 0.0005), "{secs} {:?}", back);
        }

        /// No text panics the parser.
        #[test]
        fn any_text_parses_or_not(text in ".{0,40}") {
            let _ = parse_iso(&text);
        }
    }

    #[test]
    fn offsets_shift_to_utc() {
        assert_eq!(
            parse_iso("2026-12-05T01:00:00+01:00"),
            parse_iso("2026-12-05T00:00:00Z")
        );
    }
}
