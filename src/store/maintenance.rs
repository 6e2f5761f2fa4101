//! Maintenance windows: one row per window in the `maintenance` table,
//! keyed by its id. A window made or ended is committed with its change
//! events in one transaction, like every operator action.

use redb::ReadableTable;

use super::change::{OutboxEvent, delivered};
use super::events;
use super::stored::StoredMaintenance;
use super::tables::MAINTENANCE;
use super::{Ctx, Store, StoreError, codec};
use crate::core::maintenance::MaintenanceWindow;
use crate::model::Timestamp;

/// The windows read back, and the rows that could not be (each skipped).
pub type LoadedMaintenance = (Vec<MaintenanceWindow>, Vec<StoreError>);

impl Store {
    /// Store `window` (a new one, or one of the same id replaced) and
    /// append `events` to the outbox in the same transaction.
    pub fn put_maintenance_with_events(
        &self,
        window: &MaintenanceWindow,
        events: &[OutboxEvent],
    ) -> Result<(), StoreError> {
        let v = codec::encode_stored(&StoredMaintenance::from(window))?;
        let txn = self.write_txn()?;
        {
            let mut table = txn.open_table(MAINTENANCE.def).ctx("opening table maintenance")?;
            table
                .insert(window.id.as_bytes(), v.as_slice())
                .ctx("writing a maintenance window")?;
        }
        events::append(&txn, events)?;
        self.commit_with_outbox(txn, delivered(events), "committing a maintenance window")
    }

    /// Delete the window `id`, with the events `events` makes of it (it
    /// is read in the same transaction: whether its opening was recorded is
    /// as stored); `None` (and nothing written) when there is none.
    pub fn delete_maintenance_with_events(
        &self,
        id: &str,
        events: impl FnOnce(&MaintenanceWindow) -> Vec<OutboxEvent>,
    ) -> Result<Option<MaintenanceWindow>, StoreError> {
        let txn = self.write_txn()?;
        let removed = {
            let mut table = txn.open_table(MAINTENANCE.def).ctx("opening table maintenance")?;
            let bytes = table
                .remove(id.as_bytes())
                .ctx("deleting a maintenance window")?
                .map(|v| v.value().to_vec());
            bytes.map(|b| decode(id.as_bytes(), &b)).transpose()?
        };
        let events = removed.as_ref().map(events).unwrap_or_default();
        events::append(&txn, &events)?;
        self.commit_with_outbox(txn, delivered(&events), "committing the end of a maintenance window")?;
        Ok(removed)
    }

    /// Record that the window `id` opened (`open_since` its stretch's
    /// start) or closed (`None`), with `events`; `false` (and nothing
    /// written) when the window is gone, ended meanwhile.
    pub fn mark_maintenance_with_events(
        &self,
        id: &str,
        open_since: Option<Timestamp>,
        events: &[OutboxEvent],
    ) -> Result<bool, StoreError> {
        let txn = self.write_txn()?;
        let found = {
            let mut table = txn.open_table(MAINTENANCE.def).ctx("opening table maintenance")?;
            let bytes = table
                .get(id.as_bytes())
                .ctx("reading a maintenance window")?
                .map(|v| v.value().to_vec());
            match bytes {
                Some(b) => {
                    let mut w = decode(id.as_bytes(), &b)?;
                    w.open_since = open_since;
                    let v = codec::encode_stored(&StoredMaintenance::from(&w))?;
                    table
                        .insert(id.as_bytes(), v.as_slice())
                        .ctx("writing a maintenance window")?;
                    true
                }
                None => false,
            }
        };
        let events = if found { events } else { &[] };
        events::append(&txn, events)?;
        self.commit_with_outbox(txn, delivered(events), "committing a maintenance window's edge")?;
        Ok(found)
    }

    /// Every window, oldest first; a row that does not decode is skipped
    /// and returned as an error beside them.
    pub fn load_maintenance(&self) -> Result<LoadedMaintenance, StoreError> {
        let txn = self.read_txn()?;
        let table = txn.open_table(MAINTENANCE.def).ctx("opening table maintenance")?;
        let mut out = Vec::new();
        let mut bad = Vec::new();
        for entry in table.iter().ctx("reading table maintenance")? {
            let (k, v) = entry.ctx("reading table maintenance")?;
            match decode(k.value(), v.value()) {
                Ok(w) => out.push(w),
                Err(e) => bad.push(e),
            }
        }
        out.sort_by(|a, b| (a.created, &a.id).cmp(&(b.created, &b.id)));
        Ok((out, bad))
    }
}

fn decode(key: &[u8], value: &[u8]) -> Result<MaintenanceWindow, StoreError> {
    let stored = codec::decode_stored::<StoredMaintenance>(MAINTENANCE.name, key, value)?;
    MaintenanceWindow::try_from(stored).map_err(|reason| StoreError::Corrupt {
        table: MAINTENANCE.name,
        key: codec::display_key(key),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::maintenance::{Day, LocalTime, MaintenanceTarget, Schedule, Weekly, Zone};
    use std::time::Duration;

    fn weekly_window() -> MaintenanceWindow {
        MaintenanceWindow {
            id: "01KBW0000000000000000000AB".into(),
            target: MaintenanceTarget::Pool("meraki-org".into()),
            schedule: Schedule::Weekly(
                Weekly::new(
                    vec![Day::Sun, Day::Mon],
                    LocalTime::parse("02:30").expect("time"),
                    Duration::from_secs(7200),
                    Zone::parse("Europe/Berlin").expect("zone"),
                )
                .expect("repeat"),
            ),
            reason: "firmware".into(),
            created: Timestamp(1_000),
            created_by: "admin".into(),
            open_since: None,
        }
    }

    /// The bytes a window is written as: a change of shape is a new format
    /// version, never an accident.
    #[test]
    fn a_window_is_stored_in_this_shape() {
        let bytes = codec::encode_stored(&StoredMaintenance::from(&weekly_window())).expect("encode");
        assert_eq!(bytes[0], 1);
        assert_eq!(
            std::str::from_utf8(&bytes[1..]).expect("utf-8"),
            r#"{"id":"01KBW0000000000000000000AB","target":{"kind":"pool","name":"meraki-org"},"schedule":{"kind":"weekly","days":["mon","sun"],"at":"02:30","duration":"2h","timezone":"Europe/Berlin"},"reason":"firmware","created":1000,"created_by":"admin"}"#
        );
        assert_eq!(decode(b"k", &bytes).expect("decode"), weekly_window());
    }

    #[test]
    fn bad_rows_are_corrupt_not_a_panic() {
        for bad in [
            &b""[..],
            b"\x01{",
            b"\x09{}",
            br#"{"id":"x","target":{"kind":"type","name":"t"},"schedule":{"kind":"weekly","days":["mon"],"at":"02:30","duration":"1h","timezone":"Nowhere/Else"},"created":1}"#,
        ] {
            let mut v = bad.to_vec();
            if v.first() == Some(&b'{') {
                v.insert(0, 1);
            }
            let err = decode(b"x", &v).unwrap_err();
            assert!(matches!(err, StoreError::Corrupt { table: "maintenance", .. }), "{err:?}");
        }
    }

    #[test]
    fn windows_survive_reopening_the_file_and_are_deleted_by_id() {
        let dir = tempfile::tempdir().expect("tempdir");
        let once = MaintenanceWindow {
            id: "a".into(),
            target: MaintenanceTarget::Instances(vec!["web-1".into()]),
            schedule: Schedule::Once {
                start: Timestamp(10),
                end: Timestamp(20),
            },
            reason: String::new(),
            created: Timestamp(5),
            created_by: "admin".into(),
            open_since: None,
        };
        {
            let store = Store::open(dir.path()).expect("open");
            store.put_maintenance_with_events(&once, &[]).expect("put");
            store.put_maintenance_with_events(&weekly_window(), &[]).expect("put");
        }
        let store = Store::open(dir.path()).expect("reopen");
        let (windows, bad) = store.load_maintenance().expect("load");
        assert!(bad.is_empty(), "{bad:?}");
        assert_eq!(windows, vec![once.clone(), weekly_window()]);
        assert!(
            store
                .mark_maintenance_with_events("a", Some(Timestamp(10)), &[])
                .expect("mark")
        );
        let (windows, _) = store.load_maintenance().expect("load");
        assert_eq!(windows[0].open_since, Some(Timestamp(10)), "the opening is kept");
        let gone = store
            .delete_maintenance_with_events("a", |_| Vec::new())
            .expect("delete");
        assert_eq!(gone.map(|w| w.open_since), Some(Some(Timestamp(10))));
        assert!(
            store
                .delete_maintenance_with_events("a", |_| Vec::new())
                .expect("again")
                .is_none()
        );
        assert!(
            !store.mark_maintenance_with_events("a", None, &[]).expect("gone"),
            "an ended window is not written back"
        );
        assert_eq!(store.load_maintenance().expect("load").0, vec![weekly_window()]);
    }

    #[test]
    fn a_backup_holds_the_windows() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = Store::open(dir.path()).expect("open");
        store.put_maintenance_with_events(&weekly_window(), &[]).expect("put");
        let out = tempfile::tempdir().expect("tempdir");
        store
            .backup_to(&out.path().join(super::super::FILE_NAME))
            .expect("backup");
        let copy = Store::open(out.path()).expect("open the backup");
        assert_eq!(copy.load_maintenance().expect("load").0, vec![weekly_window()]);
    }
}
