//! Text times as Unix seconds, for `parse = "date"` and `parse =
//! "rfc3339"`: pure, no clock, no time zone database (a date is midnight
//! UTC; an RFC 3339 time carries its own offset).

/// Days from 1970-01-01 to the given civil date (proleptic Gregorian).
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = i64::from((m + 9) % 12);
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(y: i64, m: u32) -> u32 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        _ => 28,
    }
}

/// `n` ASCII digits at the start of `s`, as a number, and the rest.
fn digits(s: &str, n: usize) -> Option<(u32, &str)> {
    let head = s.get(..n)?;
    if !head.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    Some((head.parse().ok()?, &s[n..]))
}

/// `YYYY-MM-DD` and the rest of `s`, as days since the epoch.
fn date_part(s: &str) -> Option<(i64, &str)> {
    let (y, s) = digits(s, 4)?;
    let s = s.strip_prefix('-')?;
    let (m, s) = digits(s, 2)?;
    let s = s.strip_prefix('-')?;
    let (d, s) = digits(s, 2)?;
    let y = i64::from(y);
    if !(1..=12).contains(&m) || d == 0 || d > days_in_month(y, m) {
        return None;
    }
    Some((days_from_civil(y, m, d), s))
}

/// `2027-06-30` → Unix seconds of that day's midnight UTC. Surrounding
/// spaces are allowed; anything else that is not a valid date is `None`.
pub fn parse_date(text: &str) -> Option<f64> {
    let (days, rest) = date_part(text.trim())?;
    rest.is_empty().then_some((days * 86_400) as f64)
}

/// An RFC 3339 date-time (`2026-12-02T08:15:00Z`, `2026-12-02 08:15:00.25+01:00`;
/// `T`, `t` or a space between date and time; `Z`, `z` or `±HH:MM`) →
/// Unix seconds, with its fraction.
pub fn parse_rfc3339(text: &str) -> Option<f64> {
    let (days, s) = date_part(text.trim())?;
    let s = s.strip_prefix(['T', 't', ' '])?;
    let (h, s) = digits(s, 2)?;
    let s = s.strip_prefix(':')?;
    let (mi, s) = digits(s, 2)?;
    let s = s.strip_prefix(':')?;
    let (sec, mut s) = digits(s, 2)?;
    // 60: a leap second, counted as the next second's start.
    if h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut fraction = 0.0;
    if let Some(rest) = s.strip_prefix('.') {
        let n = rest.bytes().take_while(u8::is_ascii_digit).count();
        if n == 0 {
            return None;
        }
        fraction = format!("0.{}", &rest[..n]).parse::<f64>().ok()?;
        s = &rest[n..];
    }
    let offset = match s {
        "Z" | "z" => 0,
        _ => {
            let sign = match s.as_bytes().first()? {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let (oh, r) = digits(&s[1..], 2)?;
            let r = r.strip_prefix(':')?;
            let (om, r) = digits(r, 2)?;
            if !r.is_empty() || oh > 23 || om > 59 {
                return None;
            }
            sign * i64::from(oh * 3600 + om * 60)
        }
    };
    let secs = days * 86_400 + i64::from(h * 3600 + mi * 60 + sec) - offset;
    Some(secs as f64 + fraction)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn dates_are_midnight_utc() {
        assert_eq!(parse_date("1970-01-01"), Some(0.0));
        assert_eq!(parse_date("2027-06-30"), Some(1_814_313_600.0));
        assert_eq!(parse_date(" 2000-02-29 "), Some(951_782_400.0));
        assert_eq!(parse_date("1969-12-31"), Some(-86_400.0));
        for bad in [
            "",
            "2027-6-30",
            "2027-06-31",
            "1900-02-29",
            "2027-13-01",
            "2027-00-10",
            "2027-06-30x",
            "30.06.2027",
            "2027-06-30T00:00:00Z",
            "２０２７-06-30",
        ] {
            assert_eq!(parse_date(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn rfc3339_times_keep_offset_and_fraction() {
        assert_eq!(parse_rfc3339("1970-01-01T00:00:00Z"), Some(0.0));
        assert_eq!(parse_rfc3339("2026-12-02T08:15:00Z"), Some(1_796_199_300.0));
        assert_eq!(parse_rfc3339("2026-12-02t09:15:00+01:00"), Some(1_796_199_300.0));
        assert_eq!(parse_rfc3339("2026-12-02 03:15:00-05:00"), Some(1_796_199_300.0));
        assert_eq!(parse_rfc3339("1970-01-01T00:00:01.25Z"), Some(1.25));
        for bad in [
            "2026-12-02",
            "2026-12-02T08:15Z",
            "2026-12-02T24:00:00Z",
            "2026-12-02T08:15:00",
            "2026-12-02T08:15:00.Z",
            "2026-12-02T08:15:00+0100",
            "2026-12-02T08:15:00+01:00x",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad:?}");
        }
    }

    proptest! {
        /// Every valid day from 1600 to 2400 reads as the day after the one
        /// before it, and its RFC 3339 midnight (in any offset) is the same
        /// instant.
        #[test]
        fn consecutive_days_are_86400_seconds_apart(y in 1600i64..2400, m in 1u32..=12, d in 1u32..=31, oh in 0u32..14) {
            prop_assume!(d <= days_in_month(y, m));
            let text = format!("{y:04}-{m:02}-{d:02}");
            let t = parse_date(&text).expect("a valid date");
            let (ny, nm, nd) = if d < days_in_month(y, m) { (y, m, d + 1) } else if m < 12 { (y, m + 1, 1) } else { (y + 1, 1, 1) };
            prop_assert_eq!(parse_date(&format!("{ny:04}-{nm:02}-{nd:02}")), Some(t + 86_400.0));
            prop_assert_eq!(parse_rfc3339(&format!("{text}T00:00:00Z")), Some(t));
            let shifted = format!("{text}T{oh:02}:00:00+{oh:02}:00");
            prop_assert_eq!(parse_rfc3339(&shifted), Some(t));
        }

        #[test]
        fn any_text_is_total(s in "\\PC{0,40}") {
            let _ = parse_date(&s);
            let _ = parse_rfc3339(&s);
        }
    }
}
