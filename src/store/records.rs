//! Task state, UI-managed instances and saved settings. Each method is one
//! redb transaction; writes are durable when they return. The
//! `*_with_events` variants also append change events to the outbox in the
//! same transaction: both are committed, or neither.

use redb::ReadableTable;

use super::change::{OutboxEvent, delivered};
use super::events;
use super::stored::{StoredInstance, StoredSettings, StoredSettingsRef, StoredSink, StoredTask, StoredTaskRef};
use super::tables::{self, INSTANCES, SETTINGS, TASKS};
use super::{Ctx, Store, StoreError, codec};
use crate::model::{InstanceConfig, TaskKey, TaskRecord};
use crate::secrets::DataKey;

/// The `settings` key of the sink's document, whose secrets are sealed:
/// the sink saved from the UI or API (a `[sink]` document, or null for
/// "off": the file's sink no longer applies). The one name of that key.
pub const SINK_SETTINGS: &str = "sink";

/// Tasks read at startup, and the records that could not be read.
pub type LoadedTasks = (Vec<(TaskKey, TaskRecord)>, Vec<StoreError>);

impl Store {
    /// Every stored task. A record that cannot be decoded is skipped and
    /// returned in the second list (as [`StoreError::Corrupt`]) so the caller
    /// can report it and start that task fresh; only a failure of the
    /// database itself is an `Err`.
    pub fn load_tasks(&self) -> Result<LoadedTasks, StoreError> {
        let txn = self.read_txn()?;
        let table = txn.open_table(TASKS.def).ctx("opening table tasks")?;
        let mut tasks = Vec::new();
        let mut bad = Vec::new();
        for entry in table.iter().ctx("reading table tasks")? {
            let (k, v) = entry.ctx("reading table tasks")?;
            let (k, v) = (k.value(), v.value());
            match decode_task(k, v) {
                Ok(pair) => tasks.push(pair),
                Err(e) => bad.push(e),
            }
        }
        Ok((tasks, bad))
    }

    /// Applies the whole batch in ONE durable write transaction: `Some`
    /// writes the record, `None` deletes it (deleting a missing task is not
    /// an error). On any error nothing is written.
    pub fn write_tasks(&self, batch: &[(TaskKey, Option<TaskRecord>)]) -> Result<(), StoreError> {
        self.write_tasks_with_events(batch, &[])
    }

    /// [`Store::write_tasks`] and `events` appended to the outbox, in one
    /// transaction.
    pub fn write_tasks_with_events(
        &self,
        batch: &[(TaskKey, Option<TaskRecord>)],
        events: &[OutboxEvent],
    ) -> Result<(), StoreError> {
        let txn = self.write_txn()?;
        {
            let mut table = txn.open_table(TASKS.def).ctx("opening table tasks")?;
            for (key, record) in batch {
                let k = tables::task_key(key)?;
                match record {
                    Some(record) => {
                        let v = encode_task(record)?;
                        table.insert(k.as_slice(), v.as_slice()).ctx("writing a task")?;
                    }
                    None => {
                        table.remove(k.as_slice()).ctx("deleting a task")?;
                    }
                }
            }
        }
        events::append(&txn, events)?;
        self.commit_with_outbox(txn, delivered(events), "committing tasks")
    }

    /// Instances added from the UI or API, by name. A record that cannot be
    /// decoded fails the whole call with [`StoreError::Corrupt`] naming it;
    /// [`Store::delete_instance`] still removes such a record.
    pub fn list_instances(&self) -> Result<Vec<InstanceConfig>, StoreError> {
        let (txn, key) = self.read_txn_with_key()?;
        let table = txn.open_table(INSTANCES.def).ctx("opening table instances")?;
        let mut out = Vec::new();
        for entry in table.iter().ctx("reading table instances")? {
            let (k, v) = entry.ctx("reading table instances")?;
            out.push(decode_instance_with(k.value(), v.value(), key.as_deref())?);
        }
        Ok(out)
    }

    pub fn get_instance(&self, name: &str) -> Result<Option<InstanceConfig>, StoreError> {
        let (txn, key) = self.read_txn_with_key()?;
        let table = txn.open_table(INSTANCES.def).ctx("opening table instances")?;
        let guard = table.get(name.as_bytes()).ctx("reading an instance")?;
        guard
            .map(|v| decode_instance_with(name.as_bytes(), v.value(), key.as_deref()))
            .transpose()
    }

    /// Creates or replaces the instance named `inst.name`.
    pub fn put_instance(&self, inst: &InstanceConfig) -> Result<(), StoreError> {
        self.put_instance_with_events(inst, &[])
    }

    /// Creates or replaces each of `instances`, in one transaction: all or
    /// none (an import, or a benchmark's fleet of 100,000).
    pub fn put_instances(&self, instances: &[InstanceConfig]) -> Result<(), StoreError> {
        for inst in instances {
            tables::check_instance_name(&inst.name)?;
        }
        let txn = self.write_txn()?;
        let key = self.data_key();
        {
            let mut table = txn.open_table(INSTANCES.def).ctx("opening table instances")?;
            for inst in instances {
                let v = encode_instance(inst, key.as_deref())?;
                table
                    .insert(inst.name.as_bytes(), v.as_slice())
                    .ctx("writing an instance")?;
            }
        }
        self.commit_with_outbox(txn, delivered(&[]), "committing instances")
    }

    /// [`Store::put_instance`] and `events`, in one transaction.
    pub fn put_instance_with_events(&self, inst: &InstanceConfig, events: &[OutboxEvent]) -> Result<(), StoreError> {
        tables::check_instance_name(&inst.name)?;
        let txn = self.write_txn()?;
        // Sealed after the transaction has begun: under the key a re-seal
        // that committed before it put in.
        let v = encode_instance(inst, self.data_key().as_deref())?;
        {
            let mut table = txn.open_table(INSTANCES.def).ctx("opening table instances")?;
            table
                .insert(inst.name.as_bytes(), v.as_slice())
                .ctx("writing an instance")?;
        }
        events::append(&txn, events)?;
        self.commit_with_outbox(txn, delivered(events), "committing an instance")
    }

    /// Removes the instance and all its task rows in one transaction.
    /// Returns whether an instance record existed.
    pub fn delete_instance(&self, name: &str) -> Result<bool, StoreError> {
        self.delete_instance_with_events(name, &[])
    }

    /// [`Store::delete_instance`] and `events`, in one transaction.
    pub fn delete_instance_with_events(&self, name: &str, events: &[OutboxEvent]) -> Result<bool, StoreError> {
        let (lo, hi) = tables::instance_task_range(name)?;
        let txn = self.write_txn()?;
        let existed = {
            let mut instances = txn.open_table(INSTANCES.def).ctx("opening table instances")?;
            let existed = instances.remove(name.as_bytes()).ctx("deleting an instance")?.is_some();
            for (table, what) in [
                (TASKS, "deleting the instance's tasks"),
                (tables::VALUES, "deleting the instance's values"),
                (tables::BODIES, "deleting the instance's bodies"),
            ] {
                let mut t = txn.open_table(table.def).ctx("opening a task table")?;
                t.retain_in(lo.as_slice()..hi.as_slice(), |_, _| false).ctx(what)?;
            }
            existed
        };
        events::append(&txn, events)?;
        self.commit_with_outbox(txn, delivered(events), "committing an instance delete")?;
        Ok(existed)
    }

    /// A saved settings document (the partial patch an operator saved).
    pub fn get_settings(&self, name: &str) -> Result<Option<serde_json::Value>, StoreError> {
        let (txn, key) = self.read_txn_with_key()?;
        let table = txn.open_table(SETTINGS.def).ctx("opening table settings")?;
        let guard = table.get(name.as_bytes()).ctx("reading settings")?;
        guard
            .map(|v| {
                if name == SINK_SETTINGS {
                    decode_sink(v.value(), key.as_deref())
                } else {
                    codec::decode_stored(SETTINGS.name, name.as_bytes(), v.value()).map(|s: StoredSettings| s.0)
                }
            })
            .transpose()
    }

    /// Replaces the saved settings document `name`, durably.
    pub fn put_settings(&self, name: &str, doc: &serde_json::Value) -> Result<(), StoreError> {
        self.put_settings_with_events(name, doc, &[])
    }

    /// [`Store::put_settings`] and `events`, in one transaction.
    pub fn put_settings_with_events(
        &self,
        name: &str,
        doc: &serde_json::Value,
        events: &[OutboxEvent],
    ) -> Result<(), StoreError> {
        let txn = self.write_txn()?;
        let v = if name == SINK_SETTINGS {
            encode_sink(doc, self.data_key().as_deref())?
        } else {
            codec::encode_stored(&StoredSettingsRef(doc))?
        };
        {
            let mut table = txn.open_table(SETTINGS.def).ctx("opening table settings")?;
            table.insert(name.as_bytes(), v.as_slice()).ctx("writing settings")?;
        }
        events::append(&txn, events)?;
        self.commit_with_outbox(txn, delivered(events), "committing settings")
    }
}

/// A task record as the `tasks` table holds it. Runs for every record of
/// every group commit: it borrows the record rather than copying it.
pub fn encode_task(record: &TaskRecord) -> Result<Vec<u8>, StoreError> {
    codec::encode_stored(&StoredTaskRef::from(record))
}

/// A `tasks` row: its key and its record.
pub fn decode_task(key: &[u8], value: &[u8]) -> Result<(TaskKey, TaskRecord), StoreError> {
    let task = tables::parse_task_key(key)?;
    let stored: StoredTask = codec::decode_stored(TASKS.name, key, value)?;
    Ok((task, stored.into()))
}

/// An instance as the `instances` table holds it, its credentials sealed
/// under `data_key` (an instance with credentials needs one).
pub fn encode_instance(inst: &InstanceConfig, data_key: Option<&DataKey>) -> Result<Vec<u8>, StoreError> {
    let stored =
        StoredInstance::seal(inst, data_key, &mut crate::model::random::os()).map_err(|reason| StoreError::Encode {
            what: "instance",
            reason,
        })?;
    codec::encode_stored(&stored)
}

/// An instance record with no data key: it reads one without sealed
/// credentials (the fuzz targets use it).
pub fn decode_instance(key: &[u8], value: &[u8]) -> Result<InstanceConfig, StoreError> {
    decode_instance_with(key, value, None)
}

/// An instance record, its credentials opened with `data_key`, checked
/// against the key it is stored under.
pub(crate) fn decode_instance_with(
    key: &[u8],
    value: &[u8],
    data_key: Option<&DataKey>,
) -> Result<InstanceConfig, StoreError> {
    let name = tables::str_key(INSTANCES.name, key)?;
    let stored: StoredInstance = codec::decode_stored(INSTANCES.name, key, value)?;
    let inst = stored.open(data_key).map_err(|reason| StoreError::Sealed {
        table: INSTANCES.name,
        key: codec::display_key(key),
        reason,
    })?;
    if inst.name != name {
        return Err(StoreError::Corrupt {
            table: INSTANCES.name,
            key: codec::display_key(key),
            reason: format!("record is named {:?}", inst.name),
        });
    }
    Ok(inst)
}

/// The sink's document as the `settings` table holds it, its secrets sealed.
pub(crate) fn encode_sink(doc: &serde_json::Value, data_key: Option<&DataKey>) -> Result<Vec<u8>, StoreError> {
    let stored =
        StoredSink::seal(doc, data_key, &mut crate::model::random::os()).map_err(|reason| StoreError::Encode {
            what: "sink settings",
            reason,
        })?;
    codec::encode_stored(&stored)
}

/// The sink's document, its secrets opened with `data_key`.
pub(crate) fn decode_sink(value: &[u8], data_key: Option<&DataKey>) -> Result<serde_json::Value, StoreError> {
    let key = SINK_SETTINGS.as_bytes();
    let stored: StoredSink = codec::decode_stored(SETTINGS.name, key, value)?;
    stored.open(data_key).map_err(|reason| StoreError::Sealed {
        table: SETTINGS.name,
        key: SINK_SETTINGS.into(),
        reason,
    })
}
