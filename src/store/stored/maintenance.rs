//! A `maintenance` value: one maintenance window (what it covers, when it
//! is open, why, who made it). Times are milliseconds since the epoch, the
//! repeat's duration is text (`2h`), its time zone an IANA name.

use serde::{Deserialize, Serialize};

use super::super::codec::{Encodes, FORMAT_JSON_V1, Versioned};
use crate::core::maintenance::{Day, LocalTime, MaintenanceTarget, MaintenanceWindow, Schedule, Weekly, Zone};
use crate::model::Timestamp;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct StoredMaintenance {
    #[serde(rename = "id")]
    id: String,
    #[serde(rename = "target")]
    target: StoredTarget,
    #[serde(rename = "schedule")]
    schedule: StoredSchedule,
    #[serde(rename = "reason", default)]
    reason: String,
    #[serde(rename = "created")]
    created: u64,
    #[serde(rename = "created_by", default)]
    created_by: String,
    /// Absent while the window's opening is not recorded.
    #[serde(rename = "open_since", default, skip_serializing_if = "Option::is_none")]
    open_since: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind")]
enum StoredTarget {
    #[serde(rename = "instances")]
    Instances {
        #[serde(rename = "names")]
        names: Vec<String>,
    },
    #[serde(rename = "pool")]
    Pool {
        #[serde(rename = "name")]
        name: String,
    },
    #[serde(rename = "type")]
    Type {
        #[serde(rename = "name")]
        name: String,
    },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind")]
enum StoredSchedule {
    #[serde(rename = "once")]
    Once {
        #[serde(rename = "start")]
        start: u64,
        #[serde(rename = "end")]
        end: u64,
    },
    #[serde(rename = "weekly")]
    Weekly {
        #[serde(rename = "days")]
        days: Vec<String>,
        #[serde(rename = "at")]
        at: String,
        #[serde(rename = "duration", with = "crate::model::duration_str")]
        duration: std::time::Duration,
        #[serde(rename = "timezone")]
        timezone: String,
    },
}

impl Versioned for StoredMaintenance {
    const WHAT: &'static str = "maintenance window";
    const VERSION: u8 = FORMAT_JSON_V1;
}

impl Encodes for StoredMaintenance {
    type Value = StoredMaintenance;
}

impl From<&MaintenanceWindow> for StoredMaintenance {
    fn from(w: &MaintenanceWindow) -> Self {
        StoredMaintenance {
            id: w.id.clone(),
            target: match &w.target {
                MaintenanceTarget::Instances(names) => StoredTarget::Instances { names: names.clone() },
                MaintenanceTarget::Pool(name) => StoredTarget::Pool { name: name.clone() },
                MaintenanceTarget::Type(name) => StoredTarget::Type { name: name.clone() },
            },
            schedule: match &w.schedule {
                Schedule::Once { start, end } => StoredSchedule::Once {
                    start: start.0,
                    end: end.0,
                },
                Schedule::Weekly(r) => StoredSchedule::Weekly {
                    days: r.days().iter().map(|d| d.as_str().to_string()).collect(),
                    at: r.at().to_string(),
                    duration: r.duration(),
                    timezone: r.zone().name().to_string(),
                },
            },
            reason: w.reason.clone(),
            created: w.created.0,
            created_by: w.created_by.clone(),
            open_since: w.open_since.map(|t| t.0),
        }
    }
}

impl TryFrom<StoredMaintenance> for MaintenanceWindow {
    type Error = String;

    /// A repeat whose day, time or zone no longer reads (a zone removed
    /// from the database) is an error, not a window that never opens.
    fn try_from(s: StoredMaintenance) -> Result<Self, String> {
        let schedule = match s.schedule {
            StoredSchedule::Once { start, end } => Schedule::Once {
                start: Timestamp(start),
                end: Timestamp(end),
            },
            StoredSchedule::Weekly {
                days,
                at,
                duration,
                timezone,
            } => {
                let days = days
                    .iter()
                    .map(|d| Day::parse(d).ok_or_else(|| format!("bad day {d:?}")))
                    .collect::<Result<Vec<_>, _>>()?;
                let at = LocalTime::parse(&at).ok_or_else(|| format!("bad time {at:?}"))?;
                let zone = Zone::parse(&timezone)?;
                Schedule::Weekly(Weekly::new(days, at, duration, zone).ok_or("bad weekly repeat")?)
            }
        };
        Ok(MaintenanceWindow {
            id: s.id,
            target: match s.target {
                StoredTarget::Instances { names } => MaintenanceTarget::Instances(names),
                StoredTarget::Pool { name } => MaintenanceTarget::Pool(name),
                StoredTarget::Type { name } => MaintenanceTarget::Type(name),
            },
            schedule,
            reason: s.reason,
            created: Timestamp(s.created),
            created_by: s.created_by,
            open_since: s.open_since.map(Timestamp),
        })
    }
}
