//! The host's table of sessions. Host start reads one directory, not every record: a session's
//! record is read when the session is first named (an open, a prompt, a create with its id),
//! and all of them when a listing needs them.

use super::session::SessionCell;
use super::store::Store;
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

    /// Session `id`'s cell, reading its record first if it has not been. (One small file,
    /// read under the table's lock: a concurrent request for the same session finds it read.)
    pub fn get(&mut self, store: &Store, id: &str) -> Option<Arc<SessionCell>> {
        if let Some(cell) = self.cells.get(id) {
            return Some(Arc::clone(cell));
        }
        if !self.unread.remove(id) {
            return None;
        }
        let cell = SessionCell::new(store.load_session(id)?);
        self.cells.insert(id.to_string(), Arc::clone(&cell));
        Some(cell)
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

    /// Records of `ids` read outside the lock: each still unread becomes a cell (one named in
    /// the meantime was read by [`SessionTable::get`]; one removed was read first, so it is
    /// not unread). Ids whose record could not be read are forgotten, as at start before.
    pub fn add_read(&mut self, ids: &[String], read: Vec<crate::host_api::wire::Session>) {
        for s in read {
            if self.unread.remove(&s.id) {
                self.cells.insert(s.id.clone(), SessionCell::new(s));
            }
        }
        for id in ids {
            self.unread.remove(id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host_api::wire::Session;

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
        assert_eq!(t.get(&store, "s2").map(|c| c.id.clone()), Some("s2".into()));
        assert!(t.get(&store, "missing").is_none());
        assert!(t.get(&store, "broken").is_none());
        assert_eq!((t.len(), t.read_cells().len()), (3, 1));
        // A listing reads the rest outside the lock; s1 is named (read) in the meantime.
        let ids = t.unread_ids();
        let read: Vec<Session> = ids.iter().filter_map(|id| store.load_session(id)).collect();
        let s1 = t.get(&store, "s1").unwrap();
        t.add_read(&ids, read);
        let mut all: Vec<String> = t.read_cells().iter().map(|c| c.id.clone()).collect();
        all.sort();
        assert_eq!(all, ["s1", "s2", "s3"]);
        assert!(
            Arc::ptr_eq(&s1, &t.get(&store, "s1").unwrap()),
            "one cell per session"
        );
        std::fs::remove_dir_all(root).unwrap();
    }
}
