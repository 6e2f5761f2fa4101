//! Time as the scheduling core sees it: [`Timestamp`] (milliseconds since
//! the epoch, passed in, never read inside the rules) and durations written
//! as `250ms`, `10s`, `5m`, `1h`.

use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Where the engine, and the event sink it runs, read the time. Sleeps go
/// through tokio's timer, so a clock must agree with it: [`SystemClock`] in
/// production (tokio runs on real time), `engine::ports::TokioClock` on
/// paused time.
pub trait Clock: Send + Sync + std::fmt::Debug + 'static {
    fn now(&self) -> Timestamp;
}

/// The wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// Milliseconds since the Unix epoch. The scheduling core only ever sees these
/// values; the engine reads its clock (see `engine::ports`) and passes them in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(pub u64);

impl Timestamp {
    pub fn from_system_time(t: std::time::SystemTime) -> Self {
        Timestamp(
            t.duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
        )
    }
    pub fn now() -> Self {
        Self::from_system_time(std::time::SystemTime::now())
    }
    /// The same instant as a [`std::time::SystemTime`].
    pub fn to_system_time(self) -> std::time::SystemTime {
        std::time::UNIX_EPOCH + Duration::from_millis(self.0)
    }
    pub fn plus(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_add(d.as_millis().min(u64::MAX as u128) as u64))
    }
    pub fn minus(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_sub(d.as_millis().min(u64::MAX as u128) as u64))
    }
    /// Time from `earlier` to `self`, zero when `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }
    /// RFC 3339 UTC with second precision, e.g. `2025-03-21T18:05:00Z`.
    /// A time past the year 9999 (a retry or recheck pushed out by an
    /// enormous interval) shows as the last second of 9999: RFC 3339 has
    /// four-digit years.
    pub fn to_rfc3339(self) -> String {
        humantime::format_rfc3339_seconds(self.rfc3339_time()).to_string()
    }
    /// The same with milliseconds, e.g. `2025-03-21T18:05:00.123Z`.
    pub fn to_rfc3339_millis(self) -> String {
        humantime::format_rfc3339_millis(self.rfc3339_time()).to_string()
    }
    fn rfc3339_time(self) -> std::time::SystemTime {
        // 9999-12-31T23:59:59.999Z
        const LAST_MS: u64 = 253_402_300_799_999;
        std::time::UNIX_EPOCH + Duration::from_millis(self.0.min(LAST_MS))
    }
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 / 1000.0
    }
}

/// Seconds for people: `45s`, `4.5s`, `7m30s`, `16m52.5s`, `1h`, `2h30m`.
pub fn human_secs(s: f64) -> String {
    if !s.is_finite() || s <= 0.0 {
        return "0s".into();
    }
    // Whole milliseconds, then drop what is zero.
    let ms = (s * 1000.0).round() as u64;
    let (h, rest) = (ms / 3_600_000, ms % 3_600_000);
    let (m, rest) = (rest / 60_000, rest % 60_000);
    let secs = rest as f64 / 1000.0;
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if m > 0 {
        out.push_str(&format!("{m}m"));
    }
    if rest > 0 || out.is_empty() {
        let t = format!("{secs:.3}");
        let t = t.trim_end_matches('0').trim_end_matches('.');
        out.push_str(&format!("{t}s"));
    }
    out
}

/// Serde for `Duration` written as `250ms`, `10s`, `5m`, `1h`.
pub mod duration_str {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn parse(s: &str) -> Result<Duration, String> {
        let s = s.trim();
        if s.is_empty() {
            return Err("empty duration".into());
        }
        humantime::parse_duration(s).map_err(|e| format!("invalid duration {s:?}: {e}"))
    }

    pub fn format(d: Duration) -> String {
        if d.is_zero() {
            return "0s".into();
        }
        humantime::format_duration(d).to_string().replace(' ', "")
    }

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format(*d))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let s = String::deserialize(d)?;
        parse(&s).map_err(serde::de::Error::custom)
    }

    pub mod option {
        use super::*;
        use serde::Serialize;
        pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
            d.map(super::format).serialize(s)
        }
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
            match Option::<String>::deserialize(d)? {
                None => Ok(None),
                Some(s) => super::parse(&s).map(Some).map_err(serde::de::Error::custom),
            }
        }
    }

    pub mod map {
        use super::*;
        use serde::Serialize;
        use std::collections::BTreeMap;
        pub fn serialize<S: Serializer>(m: &BTreeMap<String, Duration>, s: S) -> Result<S::Ok, S::Error> {
            m.iter()
                .map(|(k, v)| (k.clone(), super::format(*v)))
                .collect::<BTreeMap<_, _>>()
                .serialize(s)
        }
        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeMap<String, Duration>, D::Error> {
            let raw = BTreeMap::<String, String>::deserialize(d)?;
            raw.into_iter()
                .map(|(k, v)| super::parse(&v).map(|d| (k, d)))
                .collect::<Result<_, _>>()
                .map_err(serde::de::Error::custom)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_past_year_9999_format_as_its_last_second() {
        assert_eq!(Timestamp(0).to_rfc3339(), "1970-01-01T00:00:00Z");
        assert_eq!(Timestamp(1_742_580_300_000).to_rfc3339(), "2025-03-21T18:05:00Z");
        let last = "9999-12-31T23:59:59Z";
        assert_eq!(Timestamp(253_402_300_799_999).to_rfc3339(), last);
        assert_eq!(Timestamp(253_402_300_800_000).to_rfc3339(), last);
        assert_eq!(
            Timestamp(1_742_580_300_000)
                .plus(Duration::from_secs(20_000 * 31_557_600))
                .to_rfc3339(),
            last
        );
        assert_eq!(Timestamp(u64::MAX).to_rfc3339(), last);
        assert_eq!(
            Timestamp(1_742_580_300_123).to_rfc3339_millis(),
            "2025-03-21T18:05:00.123Z"
        );
        assert_eq!(Timestamp(u64::MAX).to_rfc3339_millis(), "9999-12-31T23:59:59.999Z");
    }

    #[test]
    fn seconds_read_like_durations() {
        for (s, want) in [
            (45.0, "45s"),
            (4.5, "4.5s"),
            (0.1, "0.1s"),
            (450.0, "7m30s"),
            (1012.5, "16m52.5s"),
            (1200.0, "20m"),
            (3600.0, "1h"),
            (9000.0, "2h30m"),
            (0.0, "0s"),
            (f64::NAN, "0s"),
        ] {
            assert_eq!(human_secs(s), want, "{s}");
        }
    }
}
