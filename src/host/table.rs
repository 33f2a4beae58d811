//! The host's table of sessions. Host start reads one directory, not every record: a session's
//! record is read when the session is first named (an open, a prompt, a create with its id),
//! and all of them when a listing needs them.

use super::session::SessionCell;
use super::store::Store;
use crate::host_api::wire::{ErrorCode, HostError, Session};
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

#[derive(Default)]
pub struct SessionTable {
    /// Sessions in use since the host started (read from disk or created).
    cells: HashMap<String, Arc<SessionCell>>,
    /// Sessions on disk whose records are not read yet.
    unread: HashSet<String>,
}

impl SessionTable {
    /// The sessions on disk, none read yet.
    pub fn on_disk(store: &Store) -> SessionTable {
        SessionTable {
            cells: HashMap::new(),
            unread: store.session_ids().into_iter().collect(),
        }
    }

    /// Session `id`'s cell (`None`: no such session), reading its record first if it has not
    /// been. (One small file, read under the table's lock: a concurrent request for the same
    /// session finds it read.) A record that cannot be read now is an error and stays unread.
    pub fn get(&mut self, store: &Store, id: &str) -> Result<Option<Arc<SessionCell>>, HostError> {
        if let Some(cell) = self.cells.get(id) {
            return Ok(Some(Arc::clone(cell)));
        }
        if !self.unread.contains(id) {
            return Ok(None);
        }
        let record = store.load_session(id).map_err(|e| {
            HostError::new(
                ErrorCode::PersistenceFailed,
                format!("cannot read session {id}'s record now; try again"),
            )
            .with_details(serde_json::json!({"error": e.to_string()}))
        })?;
        self.unread.remove(id);
        Ok(record.map(|s| {
            let cell = SessionCell::new(s);
            self.cells.insert(id.to_string(), Arc::clone(&cell));
            cell
        }))
    }

    pub fn insert(&mut self, cell: Arc<SessionCell>) {
        self.unread.remove(&cell.id);
        self.cells.insert(cell.id.clone(), cell);
    }

    pub fn remove(&mut self, id: &str) {
        self.cells.remove(id);
        self.unread.remove(id);
    }

    /// Sessions known, read or not (an unreadable record counts until it is read).
    pub fn len(&self) -> usize {
        self.cells.len() + self.unread.len()
    }

    /// The cells of the sessions read so far (the others have no stream, turn or reader).
    pub fn read_cells(&self) -> Vec<Arc<SessionCell>> {
        self.cells.values().cloned().collect()
    }

    /// The ids not read yet, to read outside the lock ([`SessionTable::add_read`]).
    pub fn unread_ids(&self) -> Vec<String> {
        self.unread.iter().cloned().collect()
    }

    /// Records read outside the lock, by id: each id still unread becomes a cell (one named in
    /// the meantime was read by [`SessionTable::get`]; one removed was read first, so it is
    /// not unread), or is forgotten if it is not a session. Ids not in `read` (their record
    /// could not be read now) stay unread.
    pub fn add_read(&mut self, read: Vec<(String, Option<Session>)>) {
        for (id, record) in read {
            if !self.unread.remove(&id) {
                continue;
            }
            if let Some(s) = record {
                self.cells.insert(id, SessionCell::new(s));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmpdir(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("maka-table-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    fn session(id: &str) -> Session {
        serde_json::from_value(serde_json::json!({
            "id": id, "revision": 1, "workspace": {"kind": "host_path", "path": "/tmp"},
            "name": null, "isArchived": false, "createdAt": 1, "lastUsedAt": 1,
            "configuration": {"modelTarget": {"kind": "default"}, "thinkingLevel": null,
                "permissionMode": "ask", "collaborationMode": "agent",
                "orchestrationMode": "default"},
            "status": "idle", "activeTurnId": null,
        }))
        .unwrap()
    }

    #[test]
    fn records_are_read_when_named_or_listed_and_unreadable_ones_are_forgotten() {
        let root = tmpdir("lazy");
        let store = Store::open(&root, false).unwrap();
        for id in ["s1", "s2", "s3"] {
            store.save_session(&session(id)).unwrap();
        }
        std::fs::create_dir_all(root.join("sessions/broken")).unwrap();
        let mut t = SessionTable::on_disk(&store);
        assert_eq!((t.len(), t.read_cells().len()), (4, 0));
        let id = |c: Option<Arc<SessionCell>>| c.map(|c| c.id.clone());
        assert_eq!(id(t.get(&store, "s2").unwrap()), Some("s2".into()));
        assert!(t.get(&store, "missing").unwrap().is_none());
        assert!(t.get(&store, "broken").unwrap().is_none());
        assert_eq!((t.len(), t.read_cells().len()), (3, 1));
        // A listing reads the rest outside the lock; s1 is named (read) in the meantime, and
        // s3's record cannot be read now (it stays unread, to be asked again).
        let read: Vec<(String, Option<Session>)> = t
            .unread_ids()
            .into_iter()
            .filter(|id| id != "s3")
            .map(|id| {
                let s = store.load_session(&id).unwrap();
                (id, s)
            })
            .collect();
        let s1 = t.get(&store, "s1").unwrap().unwrap();
        t.add_read(read);
        assert_eq!((t.len(), t.read_cells().len()), (3, 2));
        assert_eq!(t.unread_ids(), ["s3"]);
        let again = t.get(&store, "s1").unwrap().unwrap();
        assert!(Arc::ptr_eq(&s1, &again), "one cell per session");
        assert_eq!(id(t.get(&store, "s3").unwrap()), Some("s3".into()));
        std::fs::remove_dir_all(root).unwrap();
    }
}
