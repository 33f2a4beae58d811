//! Starting a named thread: every thread of this program has a name that says what it does
//! (it shows in `top -H`, in panics and in the log), and a thread that cannot be started is
//! logged, never a panic — the caller decides what is lost without it.

use std::thread::JoinHandle;

/// Starts `f` on a thread named `name`; `None` (logged) when the system refuses one.
pub fn spawn<T: Send + 'static>(
    name: impl Into<String>,
    f: impl FnOnce() -> T + Send + 'static,
) -> Option<JoinHandle<T>> {
    let name = name.into();
    match std::thread::Builder::new().name(name.clone()).spawn(f) {
        Ok(h) => Some(h),
        Err(e) => {
            log::error!("cannot start thread {name}: {e}");
            None
        }
    }
}
