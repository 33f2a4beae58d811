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

/// Runs `work` on each of `items` on at most `threads` threads named `name`, and returns them
/// (join them to wait for the work). What could not be given to a thread is done on the
/// caller's thread: done late rather than never.
pub fn for_each<T: Send + 'static>(
    name: &str,
    threads: usize,
    items: Vec<T>,
    work: impl Fn(T) + Send + Sync + 'static,
) -> Vec<JoinHandle<()>> {
    let count = items.len().min(threads);
    let (tx, rx) = crossbeam_channel::bounded(items.len());
    for item in items {
        let _ = tx.send(item);
    }
    drop(tx);
    let work = std::sync::Arc::new(work);
    let handles: Vec<JoinHandle<()>> = (0..count)
        .filter_map(|_| {
            let (rx, work) = (rx.clone(), std::sync::Arc::clone(&work));
            spawn(name, move || rx.iter().for_each(|item| work(item)))
        })
        .collect();
    if handles.is_empty() {
        rx.iter().for_each(|item| work(item));
    }
    handles
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[test]
    fn for_each_does_every_item_once_on_the_threads_it_is_given() {
        for (items, threads) in [(0, 4), (1, 4), (3, 8), (100, 8), (5, 1)] {
            let done = Arc::new(AtomicUsize::new(0));
            let names = Arc::new(std::sync::Mutex::new(std::collections::HashSet::new()));
            let (d, n) = (Arc::clone(&done), Arc::clone(&names));
            let handles = super::for_each("test-each", threads, vec![1; items], move |x| {
                d.fetch_add(x, Ordering::Relaxed);
                let name = std::thread::current().name().map(str::to_string);
                n.lock().unwrap().insert(name);
            });
            assert_eq!(handles.len(), items.min(threads));
            handles.into_iter().for_each(|h| h.join().unwrap());
            assert_eq!(done.load(Ordering::Relaxed), items);
            let names = names.lock().unwrap();
            assert!(names.iter().all(|n| n.as_deref() == Some("test-each")));
        }
    }
}
