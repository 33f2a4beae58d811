//! A session's configuration as a v2 client sees it: v1's options (`config_options`, the one
//! place that knows the host's configuration) in v2's shape — `configId` for `id`, and the
//! legacy mode view gone (v2 folds modes into the options, where ours already are).

use crate::acp::types::{ConfigOption, SessionUpdate as V1Update};
use crate::acp::v2::types::{self as t, SessionUpdate};

/// v1's options, in v2's shape.
pub fn options(options: &[ConfigOption]) -> Vec<t::SessionConfigOption> {
    options
        .iter()
        .map(t::SessionConfigOption::from_v1)
        .collect()
}

/// What the configuration echo made (v1's updates), as v2 updates: the options; nothing for
/// the legacy mode view.
pub fn from_echo(updates: &[V1Update]) -> Vec<SessionUpdate> {
    updates
        .iter()
        .filter_map(|u| match u {
            V1Update::ConfigOptionUpdate { config_options } => {
                Some(SessionUpdate::ConfigOptionUpdate(t::ConfigOptionUpdate {
                    config_options: options(config_options),
                }))
            }
            _ => None,
        })
        .collect()
}
