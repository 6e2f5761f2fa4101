//! A tower-sessions `SessionStore` over redb, so logins survive restarts.
//! Each call runs its redb transaction on a blocking thread. Expired rows
//! are ignored on load and pruned by [`prune_loop`].
//!
//! A row is keyed by the SHA-256 of the session id and holds the record with
//! its id blanked, so the database (and so a backup) holds nothing a cookie
//! can be made from. An update never brings back a row that is gone: a
//! session ended by logout or a password change stays ended, even when a
//! request of it was still in flight.

use crate::store::{SessionRow, SessionWrite, Store, session_key};
use std::time::Duration;
use tower_sessions::session::{Id, Record};
use tower_sessions::session_store::{self, SessionStore};

#[derive(Debug, Clone)]
pub struct RedbSessionStore {
    store: Store,
}

impl RedbSessionStore {
    pub fn new(store: Store) -> Self {
        RedbSessionStore { store }
    }

    async fn blocking<T: Send + 'static>(
        &self,
        f: impl FnOnce(Store) -> Result<T, crate::store::StoreError> + Send + 'static,
    ) -> session_store::Result<T> {
        let store = self.store.clone();
        tokio::task::spawn_blocking(move || f(store))
            .await
            .map_err(|e| session_store::Error::Backend(e.to_string()))?
            .map_err(|e| session_store::Error::Backend(e.to_string()))
    }
}

fn row(record: &Record) -> session_store::Result<SessionRow> {
    let blanked = Record {
        id: Id(0),
        data: record.data.clone(),
        expiry_date: record.expiry_date,
    };
    Ok(SessionRow {
        expires: record.expiry_date.unix_timestamp(),
        record: serde_json::to_string(&blanked).map_err(|e| session_store::Error::Encode(e.to_string()))?,
        user: record
            .data
            .get(crate::web::session::USER_KEY)
            .and_then(|v| v.as_str())
            .map(str::to_string),
    })
}

#[async_trait::async_trait]
impl SessionStore for RedbSessionStore {
    async fn create(&self, record: &mut Record) -> session_store::Result<()> {
        loop {
            let r = row(record)?;
            let key = session_key(&record.id.to_string());
            if self
                .blocking(move |s| s.put_session(&key, &r, SessionWrite::Create))
                .await?
            {
                return Ok(());
            }
            // Id collision: draw another.
            record.id = Id::default();
        }
    }

    async fn save(&self, record: &Record) -> session_store::Result<()> {
        let r = row(record)?;
        let key = session_key(&record.id.to_string());
        self.blocking(move |s| s.put_session(&key, &r, SessionWrite::Update))
            .await?;
        Ok(())
    }

    async fn load(&self, id: &Id) -> session_store::Result<Option<Record>> {
        let key = session_key(&id.to_string());
        let Some(r) = self.blocking(move |s| s.get_session(&key)).await? else {
            return Ok(None);
        };
        if r.expires < time::OffsetDateTime::now_utc().unix_timestamp() {
            return Ok(None);
        }
        // An unreadable record is a logged-out session, not an error page.
        Ok(serde_json::from_str::<Record>(&r.record).ok().map(|mut rec| {
            rec.id = *id;
            rec
        }))
    }

    async fn delete(&self, id: &Id) -> session_store::Result<()> {
        let key = session_key(&id.to_string());
        self.blocking(move |s| s.delete_session(&key)).await
    }
}

/// Remove expired sessions every `every`.
pub async fn prune_loop(store: Store, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let s = store.clone();
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        match tokio::task::spawn_blocking(move || s.prune_sessions(now)).await {
            Ok(Ok(n)) if n > 0 => tracing::info!(removed = n, "pruned expired sessions"),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "could not prune sessions"),
            Err(e) => tracing::warn!(error = %e, "could not prune sessions"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn records_survive_a_reopen_and_expire() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut rec = Record {
            id: Id::default(),
            data: Default::default(),
            expiry_date: time::OffsetDateTime::now_utc() + time::Duration::hours(1),
        };
        rec.data.insert("user".into(), serde_json::json!("admin"));
        let id = rec.id;
        {
            let s = RedbSessionStore::new(Store::open(dir.path()).expect("open"));
            s.create(&mut rec).await.expect("create");
            assert_eq!(rec.id, id);
        }
        let store = Store::open(dir.path()).expect("reopen");
        let s = RedbSessionStore::new(store.clone());
        let loaded = s.load(&id).await.expect("load").expect("present after reopen");
        assert_eq!(loaded.data.get("user"), Some(&serde_json::json!("admin")));
        assert_eq!(loaded.id, id);
        // Neither the key nor the value holds the id.
        assert!(store.get_session(&id.to_string()).expect("get").is_none());
        let stored = store
            .get_session(&session_key(&id.to_string()))
            .expect("get")
            .expect("stored under the hash");
        assert!(!stored.record.contains(&id.0.to_string()), "{}", stored.record);
        assert_eq!(stored.user.as_deref(), Some("admin"));

        let mut old = loaded.clone();
        old.expiry_date = time::OffsetDateTime::now_utc() - time::Duration::minutes(1);
        s.save(&old).await.expect("save");
        assert!(
            s.load(&id).await.expect("load").is_none(),
            "expired sessions do not load"
        );
        let now = time::OffsetDateTime::now_utc().unix_timestamp();
        assert_eq!(store.prune_sessions(now).expect("prune"), 1);
        s.delete(&id).await.expect("delete of a missing id is fine");
    }
}
