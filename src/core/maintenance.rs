//! Maintenance windows (pure): what a window covers, when it is open, and
//! when it next opens or closes. No clock is read here: `now` is passed in,
//! so every rule is tested with fixed instants, daylight-saving days
//! included.
//!
//! A window is either one span (`start`..`end`) or a weekly repeat: on the
//! named `days`, at the wall-clock time `at` in `timezone`, for `duration`.
//! Wall-clock times come from the IANA time-zone database bundled by `jiff`
//! (never from hand-written offsets). A repeat whose `at` does not exist on
//! a day (the clock jumps over it) opens at the same wall-clock distance
//! after the jump, and one that exists twice (the clock turns back) opens
//! at its first occurrence: `jiff`'s "compatible" rule, the one RFC 5545
//! calendars use. `duration` is elapsed time, so a 1 h window on the night
//! the clock turns back still lasts one real hour. A window includes its
//! start and excludes its end.
//!
//! While a window covers an instance, its tasks are polled, their values
//! served and their breakers still open and close, but no failure moves a
//! task to the dead-letter queue (see `task::on_failure_in`).

use crate::model::Timestamp;
use std::time::Duration;

/// The longest a window (one span, or one weekly occurrence) may last.
pub const MAX_DURATION: Duration = Duration::from_secs(7 * 24 * 3600);

/// What a window covers: named instances, every instance of a budget pool,
/// or every instance of a type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MaintenanceTarget {
    Instances(Vec<String>),
    Pool(String),
    Type(String),
}

impl MaintenanceTarget {
    /// Whether the window covers an instance of `type_name` in `pool`.
    pub fn covers(&self, instance: &str, type_name: &str, pool: Option<&str>) -> bool {
        match self {
            MaintenanceTarget::Instances(names) => names.iter().any(|n| n == instance),
            MaintenanceTarget::Pool(p) => pool == Some(p.as_str()),
            MaintenanceTarget::Type(t) => t == type_name,
        }
    }

    /// `instances a, b`, `pool meraki-org`, `type pve`: for logs and pages.
    pub fn describe(&self) -> String {
        match self {
            MaintenanceTarget::Instances(names) => format!("instances {}", names.join(", ")),
            MaintenanceTarget::Pool(p) => format!("pool {p}"),
            MaintenanceTarget::Type(t) => format!("type {t}"),
        }
    }
}

/// A day of the week, written `mon` … `sun`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Day {
    Mon,
    Tue,
    Wed,
    Thu,
    Fri,
    Sat,
    Sun,
}

impl Day {
    pub const ALL: [Day; 7] = [Day::Mon, Day::Tue, Day::Wed, Day::Thu, Day::Fri, Day::Sat, Day::Sun];

    pub fn as_str(self) -> &'static str {
        match self {
            Day::Mon => "mon",
            Day::Tue => "tue",
            Day::Wed => "wed",
            Day::Thu => "thu",
            Day::Fri => "fri",
            Day::Sat => "sat",
            Day::Sun => "sun",
        }
    }

    /// `mon` or `monday`, in any case.
    pub fn parse(s: &str) -> Option<Day> {
        let s = s.trim().to_ascii_lowercase();
        Day::ALL.into_iter().find(|d| s == d.as_str() || s == d.full_name())
    }

    fn full_name(self) -> &'static str {
        match self {
            Day::Mon => "monday",
            Day::Tue => "tuesday",
            Day::Wed => "wednesday",
            Day::Thu => "thursday",
            Day::Fri => "friday",
            Day::Sat => "saturday",
            Day::Sun => "sunday",
        }
    }

    fn of(w: jiff::civil::Weekday) -> Day {
        use jiff::civil::Weekday as W;
        match w {
            W::Monday => Day::Mon,
            W::Tuesday => Day::Tue,
            W::Wednesday => Day::Wed,
            W::Thursday => Day::Thu,
            W::Friday => Day::Fri,
            W::Saturday => Day::Sat,
            W::Sunday => Day::Sun,
        }
    }
}

/// A wall-clock time of day, written `HH:MM`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct LocalTime {
    hour: u8,
    minute: u8,
}

impl LocalTime {
    /// `02:30`: two digits, a colon, two digits; 00:00 to 23:59.
    pub fn parse(s: &str) -> Option<LocalTime> {
        let (h, m) = s.trim().split_once(':')?;
        if h.len() != 2 || m.len() != 2 || !h.bytes().chain(m.bytes()).all(|b| b.is_ascii_digit()) {
            return None;
        }
        let (hour, minute) = (h.parse::<u8>().ok()?, m.parse::<u8>().ok()?);
        (hour < 24 && minute < 60).then_some(LocalTime { hour, minute })
    }

    pub fn hour(self) -> u8 {
        self.hour
    }

    pub fn minute(self) -> u8 {
        self.minute
    }
}

impl std::fmt::Display for LocalTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:02}:{:02}", self.hour, self.minute)
    }
}

/// An IANA time zone (`Europe/Berlin`, `UTC`), looked up in the database
/// `jiff` bundles, so it works without `/usr/share/zoneinfo`.
#[derive(Debug, Clone)]
pub struct Zone {
    name: String,
    tz: jiff::tz::TimeZone,
}

impl PartialEq for Zone {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for Zone {}

impl Zone {
    pub fn utc() -> Zone {
        Zone {
            name: "UTC".into(),
            tz: jiff::tz::TimeZone::UTC,
        }
    }

    /// The zone named `name`, or why there is none.
    pub fn parse(name: &str) -> Result<Zone, String> {
        let name = name.trim();
        if name.is_empty() {
            return Err("a time zone name is required (e.g. UTC or Europe/Berlin)".into());
        }
        match jiff::tz::db().get(name) {
            Ok(tz) => Ok(Zone {
                name: name.to_string(),
                tz,
            }),
            Err(_) => Err(format!(
                "unknown time zone {name:?}: give an IANA name such as Europe/Berlin"
            )),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

/// A weekly repeat: on `days`, at `at` in `zone`, for `duration`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Weekly {
    /// At least one, sorted, no repeats.
    days: Vec<Day>,
    at: LocalTime,
    duration: Duration,
    zone: Zone,
}

impl Weekly {
    /// `None` when `days` is empty or `duration` is zero or longer than
    /// [`MAX_DURATION`] (the parser names the field first).
    pub fn new(mut days: Vec<Day>, at: LocalTime, duration: Duration, zone: Zone) -> Option<Weekly> {
        days.sort();
        days.dedup();
        if days.is_empty() || duration.is_zero() || duration > MAX_DURATION {
            return None;
        }
        Some(Weekly {
            days,
            at,
            duration,
            zone,
        })
    }

    pub fn days(&self) -> &[Day] {
        &self.days
    }
    pub fn at(&self) -> LocalTime {
        self.at
    }
    pub fn duration(&self) -> Duration {
        self.duration
    }
    pub fn zone(&self) -> &Zone {
        &self.zone
    }

    /// The occurrence that opens on local `date`, if `date` is one of the days.
    fn occurrence_on(&self, date: jiff::civil::Date) -> Option<Edges> {
        if !self.days.contains(&Day::of(date.weekday())) {
            return None;
        }
        let time = jiff::civil::Time::new(self.at.hour as i8, self.at.minute as i8, 0, 0).ok()?;
        let start = self
            .zone
            .tz
            .to_ambiguous_timestamp(date.to_datetime(time))
            .compatible()
            .ok()?;
        let start = Timestamp(u64::try_from(start.as_millisecond()).unwrap_or(0));
        Some(Edges {
            start,
            end: start.plus(self.duration),
        })
    }

    /// Occurrences opening on the local days from `days_before` days before
    /// `now`'s to `days_after` days after it, in order of start.
    fn occurrences(&self, now: Timestamp, days_before: i64, days_after: i64) -> Vec<Edges> {
        let Ok(ts) = jiff::Timestamp::from_millisecond(i64::try_from(now.0).unwrap_or(i64::MAX)) else {
            return Vec::new();
        };
        let today = self.zone.tz.to_datetime(ts).date();
        let mut out = Vec::new();
        for offset in -days_before..=days_after {
            let Ok(date) = today.checked_add(jiff::Span::new().days(offset)) else {
                continue;
            };
            out.extend(self.occurrence_on(date));
        }
        out.sort_by_key(|e| e.start);
        out
    }
}

/// When a window is open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    /// One span: from `start` (included) to `end` (excluded).
    Once {
        start: Timestamp,
        end: Timestamp,
    },
    Weekly(Weekly),
}

/// One stretch of time a window is open: from `start` (included) to `end`
/// (excluded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edges {
    pub start: Timestamp,
    pub end: Timestamp,
}

/// A maintenance window, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MaintenanceWindow {
    /// Unique, stable: the API's `{id}`.
    pub id: String,
    pub target: MaintenanceTarget,
    pub schedule: Schedule,
    pub reason: String,
    pub created: Timestamp,
    /// Who made it (a user, a token's name).
    pub created_by: String,
    /// When the window is open and its opening was recorded
    /// (`maintenance.start` written): the start of that stretch. Kept with
    /// the window, so a restart neither records an opening twice nor
    /// forgets a closing that came while the server was down.
    pub open_since: Option<Timestamp>,
}

/// The stretch of `schedule` that is open at `now`, or else the next one;
/// `None` when the window will not open again. Overlapping weekly
/// occurrences (a daily repeat longer than a day) are one stretch.
pub fn next_edges(schedule: &Schedule, now: Timestamp) -> Option<Edges> {
    match schedule {
        Schedule::Once { start, end } => (now < *end && start < end).then_some(Edges {
            start: *start,
            end: *end,
        }),
        Schedule::Weekly(w) => {
            // An occurrence lasts at most 7 days, so one open now opened at
            // most 8 local days ago; and with at least one day a week, the
            // next opens within 8 days. Later ones are looked at only to
            // merge overlapping occurrences.
            let occurrences = w.occurrences(now, 8, 16);
            let mut stretch: Option<Edges> = None;
            for o in occurrences {
                match stretch.as_mut() {
                    Some(s) if o.start <= s.end => s.end = s.end.max(o.end),
                    Some(s) if s.end > now => break,
                    _ => stretch = Some(o),
                }
            }
            stretch.filter(|s| s.end > now)
        }
    }
}

/// Whether `schedule` is open at `now`.
pub fn is_active(schedule: &Schedule, now: Timestamp) -> bool {
    next_edges(schedule, now).is_some_and(|e| e.start <= now)
}

/// Whether any of `windows` covers the instance (of `type_name`, in
/// `pool`) at `now`.
pub fn covered(
    windows: &[MaintenanceWindow],
    instance: &str,
    type_name: &str,
    pool: Option<&str>,
    now: Timestamp,
) -> bool {
    windows
        .iter()
        .any(|w| w.target.covers(instance, type_name, pool) && is_active(&w.schedule, now))
}

/// The next instant after `now` at which some window opens or closes.
pub fn next_change(windows: &[MaintenanceWindow], now: Timestamp) -> Option<Timestamp> {
    windows
        .iter()
        .filter_map(|w| next_edges(&w.schedule, now))
        .map(|e| if e.start > now { e.start } else { e.end })
        .min()
}

/// Whether a window is over for good: it will never be open again.
pub fn is_over(schedule: &Schedule, now: Timestamp) -> bool {
    next_edges(schedule, now).is_none()
}

/// Parse an RFC 3339 time (`2026-12-04T22:00:00Z`, `2026-12-04T23:00:00+01:00`).
pub fn parse_rfc3339(s: &str) -> Option<Timestamp> {
    let t: jiff::Timestamp = s.trim().parse().ok()?;
    u64::try_from(t.as_millisecond()).ok().map(Timestamp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        parse_rfc3339(s).expect("an RFC 3339 time")
    }

    fn weekly(days: &[Day], at: &str, minutes: u64, zone: &str) -> Schedule {
        Schedule::Weekly(
            Weekly::new(
                days.to_vec(),
                LocalTime::parse(at).expect("HH:MM"),
                Duration::from_secs(minutes * 60),
                Zone::parse(zone).expect("zone"),
            )
            .expect("a valid repeat"),
        )
    }

    #[test]
    fn a_span_is_open_from_its_start_and_closed_at_its_end() {
        let s = Schedule::Once {
            start: t("2026-12-04T10:00:00Z"),
            end: t("2026-12-04T12:00:00Z"),
        };
        assert!(!is_active(&s, t("2026-12-04T09:59:59Z")));
        assert!(is_active(&s, t("2026-12-04T10:00:00Z")));
        assert!(is_active(&s, t("2026-12-04T11:59:59Z")));
        assert!(!is_active(&s, t("2026-12-04T12:00:00Z")));
        let e = next_edges(&s, t("2026-12-04T09:00:00Z")).expect("ahead");
        assert_eq!((e.start, e.end), (t("2026-12-04T10:00:00Z"), t("2026-12-04T12:00:00Z")));
        assert_eq!(next_edges(&s, t("2026-12-04T12:00:00Z")), None);
        assert!(is_over(&s, t("2026-12-04T12:00:00Z")));
    }

    #[test]
    fn a_weekly_window_opens_on_its_days_only() {
        // 2026-12-07 is a Monday.
        let s = weekly(&[Day::Mon, Day::Wed], "02:00", 120, "UTC");
        assert!(is_active(&s, t("2026-12-07T02:00:00Z")));
        assert!(is_active(&s, t("2026-12-07T03:59:00Z")));
        assert!(!is_active(&s, t("2026-12-07T04:00:00Z")));
        assert!(!is_active(&s, t("2026-12-08T02:30:00Z")), "a Tuesday");
        assert!(is_active(&s, t("2026-12-09T02:30:00Z")), "a Wednesday");
        let e = next_edges(&s, t("2026-12-07T04:00:00Z")).expect("next");
        assert_eq!((e.start, e.end), (t("2026-12-09T02:00:00Z"), t("2026-12-09T04:00:00Z")));
        // From Thursday, the next one is Monday's.
        let e = next_edges(&s, t("2026-12-10T12:00:00Z")).expect("next");
        assert_eq!(e.start, t("2026-12-14T02:00:00Z"));
    }

    #[test]
    fn a_weekly_window_follows_its_time_zone() {
        // 02:00 in Berlin in December is 01:00 UTC; in July, 00:00 UTC.
        let s = weekly(&Day::ALL, "02:00", 60, "Europe/Berlin");
        let e = next_edges(&s, t("2026-12-04T00:00:00Z")).expect("next");
        assert_eq!(e.start, t("2026-12-04T01:00:00Z"));
        let e = next_edges(&s, t("2026-07-01T12:00:00Z")).expect("next");
        assert_eq!(e.start, t("2026-07-02T00:00:00Z"));
    }

    #[test]
    fn a_window_at_a_time_the_clock_skips_opens_after_the_jump() {
        // Berlin, Sunday 2026-03-29: at 02:00 CET the clock jumps to 03:00
        // CEST, so 02:30 does not exist; the window opens at 03:30 CEST
        // (01:30 UTC) and lasts one real hour.
        let s = weekly(&[Day::Sun], "02:30", 60, "Europe/Berlin");
        let before = next_edges(&s, t("2026-03-22T00:00:00Z")).expect("the Sunday before");
        assert_eq!(before.start, t("2026-03-22T01:30:00Z"), "02:30 CET");
        let jump = next_edges(&s, t("2026-03-23T00:00:00Z")).expect("the day of the jump");
        assert_eq!(
            (jump.start, jump.end),
            (t("2026-03-29T01:30:00Z"), t("2026-03-29T02:30:00Z"))
        );
        assert!(
            !is_active(&s, t("2026-03-29T01:00:00Z")),
            "02:00 local does not exist; 01:00 UTC is 03:00 CEST"
        );
        assert!(is_active(&s, t("2026-03-29T01:30:00Z")));
        let after = next_edges(&s, t("2026-03-30T00:00:00Z")).expect("the Sunday after");
        assert_eq!(after.start, t("2026-04-05T00:30:00Z"), "02:30 CEST");
    }

    #[test]
    fn a_window_at_a_time_the_clock_repeats_opens_at_the_first_and_lasts_its_duration() {
        // Berlin, Sunday 2026-10-25: at 03:00 CEST the clock turns back to
        // 02:00 CET, so 02:30 happens twice; the window opens at the first
        // (00:30 UTC) and closes one real hour later (01:30 UTC, which is
        // the second 02:30 on the wall).
        let s = weekly(&[Day::Sun], "02:30", 60, "Europe/Berlin");
        let e = next_edges(&s, t("2026-10-24T12:00:00Z")).expect("the day the clock turns back");
        assert_eq!((e.start, e.end), (t("2026-10-25T00:30:00Z"), t("2026-10-25T01:30:00Z")));
        assert!(is_active(&s, t("2026-10-25T01:29:59Z")));
        assert!(!is_active(&s, t("2026-10-25T01:30:00Z")));
        let next = next_edges(&s, t("2026-10-25T02:00:00Z")).expect("a week on");
        assert_eq!(next.start, t("2026-11-01T01:30:00Z"), "02:30 CET");
    }

    #[test]
    fn overlapping_occurrences_are_one_stretch() {
        // Daily at 00:00 for 36 h: open without a break.
        let s = weekly(&Day::ALL, "00:00", 36 * 60, "UTC");
        let e = next_edges(&s, t("2026-12-04T12:00:00Z")).expect("open");
        assert!(e.start <= t("2026-12-04T12:00:00Z"));
        assert!(e.end > t("2026-12-10T00:00:00Z"), "{e:?}");
        // Mon and Tue at 00:00 for 30 h: Mon 00:00 to Wed 06:00.
        let s = weekly(&[Day::Mon, Day::Tue], "00:00", 30 * 60, "UTC");
        let e = next_edges(&s, t("2026-12-06T12:00:00Z")).expect("next");
        assert_eq!((e.start, e.end), (t("2026-12-07T00:00:00Z"), t("2026-12-09T06:00:00Z")));
    }

    #[test]
    fn next_change_is_the_nearest_edge_of_any_window() {
        let w = |id: &str, schedule: Schedule| MaintenanceWindow {
            id: id.into(),
            target: MaintenanceTarget::Instances(vec!["a".into()]),
            schedule,
            reason: String::new(),
            created: Timestamp(0),
            created_by: "admin".into(),
            open_since: None,
        };
        let windows = vec![
            w(
                "1",
                Schedule::Once {
                    start: t("2026-12-04T10:00:00Z"),
                    end: t("2026-12-04T12:00:00Z"),
                },
            ),
            w(
                "2",
                Schedule::Once {
                    start: t("2026-12-04T11:00:00Z"),
                    end: t("2026-12-04T11:30:00Z"),
                },
            ),
        ];
        assert_eq!(
            next_change(&windows, t("2026-12-04T09:00:00Z")),
            Some(t("2026-12-04T10:00:00Z"))
        );
        assert_eq!(
            next_change(&windows, t("2026-12-04T10:30:00Z")),
            Some(t("2026-12-04T11:00:00Z"))
        );
        assert_eq!(
            next_change(&windows, t("2026-12-04T11:10:00Z")),
            Some(t("2026-12-04T11:30:00Z"))
        );
        assert_eq!(
            next_change(&windows, t("2026-12-04T11:30:00Z")),
            Some(t("2026-12-04T12:00:00Z"))
        );
        assert_eq!(next_change(&windows, t("2026-12-04T12:00:00Z")), None);
        assert!(covered(&windows, "a", "http", None, t("2026-12-04T10:00:00Z")));
        assert!(!covered(&windows, "b", "http", None, t("2026-12-04T10:00:00Z")));
    }

    #[test]
    fn targets_cover_by_name_pool_or_type() {
        let names = MaintenanceTarget::Instances(vec!["a".into(), "b".into()]);
        assert!(names.covers("b", "http", None));
        assert!(!names.covers("c", "http", None));
        let pool = MaintenanceTarget::Pool("meraki".into());
        assert!(pool.covers("x", "http", Some("meraki")));
        assert!(!pool.covers("x", "http", None));
        let ty = MaintenanceTarget::Type("pve".into());
        assert!(ty.covers("x", "pve", None));
        assert!(!ty.covers("x", "pbs", None));
    }

    #[test]
    fn days_times_and_zones_parse_or_are_refused() {
        assert_eq!(Day::parse("Mon"), Some(Day::Mon));
        assert_eq!(Day::parse("sunday"), Some(Day::Sun));
        assert_eq!(Day::parse("mo"), None);
        assert_eq!(LocalTime::parse("02:30").map(|t| t.to_string()), Some("02:30".into()));
        for bad in ["2:30", "24:00", "12:60", "1230", "ab:cd", ""] {
            assert_eq!(LocalTime::parse(bad), None, "{bad}");
        }
        assert!(Zone::parse("Europe/Berlin").is_ok());
        assert!(Zone::parse("UTC").is_ok());
        assert!(Zone::parse("Mars/Olympus_Mons").is_err());
        assert!(Zone::parse("").is_err());
        let ok = |d| Weekly::new(vec![Day::Mon], LocalTime::parse("00:00").expect("time"), d, Zone::utc());
        assert!(ok(MAX_DURATION).is_some());
        assert!(ok(MAX_DURATION + Duration::from_secs(1)).is_none());
        assert!(ok(Duration::ZERO).is_none());
    }
}
