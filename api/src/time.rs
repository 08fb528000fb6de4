//! Times as the pages and the command line show them.

/// Milliseconds since the epoch as `2026-11-22 20:15:03 UTC`.
pub fn readable(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.strftime("%Y-%m-%d %H:%M:%S UTC").to_string())
        .unwrap_or_default()
}

/// Milliseconds since the epoch as RFC 3339, for `<time datetime>`.
pub fn iso(ms: i64) -> String {
    jiff::Timestamp::from_millisecond(ms)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

/// A duration for people: `42s`, `3m 5s`, `2h 10m`, `4d 3h`.
pub fn age(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86400, s % 86400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_as_people_say_them() {
        assert_eq!(age(-5), "0s");
        assert_eq!(age(42_000), "42s");
        assert_eq!(age(185_000), "3m 5s");
        assert_eq!(age(7_800_000), "2h 10m");
        assert_eq!(age(356_400_000), "4d 3h");
        assert_eq!(readable(0), "1970-01-01 00:00:00 UTC");
    }
}
