//! The session's configuration as the client was told it — the one place of the echo rule: a
//! client's own change is never echoed back; any other change (the agent's, another
//! client's, one made while nothing followed the stream) is announced once, as
//! `config_option_update` (and `current_mode_update` when the mode moved). Pure.

use crate::acp::config_options::{self, Catalog, SessionConfig, View};
use crate::acp::types::{ConfigOption, SessionUpdate};
use crate::host_api::wire::{Configuration, PermissionMode};

#[derive(Default)]
pub struct ConfigEcho {
    /// As last read or seen (highest revision wins), and the model catalog it is shown against.
    current: Option<SessionConfig>,
    catalog: Catalog,
    /// Who the options are shown to.
    view: View,
    /// What the client was last told: a change is announced only when it differs from this.
    told_options: Option<Vec<ConfigOption>>,
    told_mode: Option<PermissionMode>,
    /// Configuration writes of this client in flight: a change seen meanwhile is announced
    /// when the last ends (after its response: it may be the writer's own).
    writers: usize,
}

/// What the response to one of this client's configuration writes told it.
pub enum Reply {
    /// The options (as read when the write committed) and, when it set one, the mode.
    Options(Option<PermissionMode>),
    /// `{}`: the options follow as an update; the mode, when it set one, is known.
    Empty(Option<PermissionMode>),
    /// The write failed: nothing.
    Failed,
}

impl ConfigEcho {
    pub fn new(view: View) -> ConfigEcho {
        ConfigEcho {
            view,
            ..ConfigEcho::default()
        }
    }

    /// The models to show (whether the session has subagents is kept).
    pub fn set_catalog(&mut self, catalog: Catalog) {
        let subagents = self.catalog.subagents;
        self.catalog = Catalog {
            subagents,
            ..catalog
        };
    }

    /// Whether the session's folder declares subagents (the orchestration option shows).
    pub fn set_subagents(&mut self, declared: bool) {
        self.catalog.subagents = declared;
    }

    /// The configuration as known, and the catalog it is shown against.
    pub fn known(&self) -> (Option<SessionConfig>, Catalog) {
        (self.current.clone(), self.catalog.clone())
    }

    /// A configuration read from the host (newer revisions only) for a response: the options
    /// that response shows, remembered as told (`mode`: the legacy mode it shows too). `None`
    /// while the configuration is unknown.
    pub fn read(
        &mut self,
        config: Option<SessionConfig>,
        mode: Option<PermissionMode>,
    ) -> Option<Vec<ConfigOption>> {
        if let Some(c) = config {
            if self
                .current
                .as_ref()
                .is_none_or(|old| c.revision >= old.revision)
            {
                self.current = Some(c);
            }
        }
        let c = self.current.as_ref()?;
        let options = config_options::options(&c.configuration, &self.catalog, self.view);
        self.told_options = Some(options.clone());
        if mode.is_some() {
            self.told_mode = mode;
        }
        Some(options)
    }

    /// A configuration write of this client begins; changes seen meanwhile wait for it.
    pub fn begin_write(&mut self) {
        self.writers += 1;
    }

    /// The write is over (its response, `reply`, is queued): what the response did not carry,
    /// then whatever else differs from what the client was told.
    pub fn end_write(&mut self, reply: Reply) -> Vec<SessionUpdate> {
        self.writers = self.writers.saturating_sub(1);
        let mode = match reply {
            Reply::Empty(mode) => {
                self.told_options = None; // the options follow, changed or not
                mode
            }
            Reply::Options(mode) => mode,
            Reply::Failed => None,
        };
        if mode.is_some() {
            self.told_mode = mode;
        }
        self.announcements()
    }

    /// The session record is at `revision` now (a rename): a configuration change of an older
    /// revision is not news.
    pub fn saw_revision(&mut self, revision: u64) {
        if let Some(c) = self.current.as_mut() {
            c.revision = c.revision.max(revision);
        }
    }

    /// A configuration seen on the host (a frame, a snapshot): announced unless this client
    /// already knows it, or one of its own writes is in flight (which then announces).
    pub fn changed(&mut self, revision: u64, configuration: &Configuration) -> Vec<SessionUpdate> {
        match &self.current {
            Some(known) if revision > known.revision => {}
            // Unknown, this client's own change, or one it has re-read.
            _ => return vec![],
        }
        self.current = Some(SessionConfig {
            revision,
            configuration: configuration.clone(),
        });
        self.announcements()
    }

    /// The updates that bring the client's view up to date (none while a write is in flight).
    fn announcements(&mut self) -> Vec<SessionUpdate> {
        let Some(c) = self.current.as_ref().filter(|_| self.writers == 0) else {
            return vec![];
        };
        let mode = c.configuration.permission_mode;
        let options = config_options::options(&c.configuration, &self.catalog, self.view);
        let mut out = vec![];
        if self.told_options.as_ref() != Some(&options) {
            self.told_options = Some(options.clone());
            out.push(SessionUpdate::ConfigOptionUpdate {
                config_options: options,
            });
        }
        if self.told_mode != Some(mode) {
            self.told_mode = Some(mode);
            out.push(SessionUpdate::CurrentModeUpdate {
                current_mode_id: config_options::mode_id(mode).into(),
            });
        }
        out
    }
}
