//! A small, fixed pool of worker threads for the methods that talk to the Runtime Host, so a
//! burst of requests costs a bounded number of threads. The queue is bounded too: when it is
//! full, the dispatcher waits, which slows the stdin reader down to the speed of the work
//! instead of buffering without end. Client responses never wait on it (the stdin reader routes
//! them itself), so a worker waiting for the client cannot be starved by its own queue.

use crossbeam_channel::{bounded, Sender};
use std::panic::{catch_unwind, AssertUnwindSafe};

/// Workers: enough for a few sessions loading and prompting at once; the host serializes per
/// session anyway.
pub const WORKERS: usize = 8;
const QUEUE: usize = 256;

type Job = Box<dyn FnOnce() + Send>;

pub struct Workers {
    tx: Sender<Job>,
}

impl Workers {
    pub fn start() -> Workers {
        let (tx, rx) = bounded::<Job>(QUEUE);
        for i in 0..WORKERS {
            let rx = rx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("acp-worker-{i}"))
                .spawn(move || {
                    while let Ok(job) = rx.recv() {
                        // A bug in one request must not shrink the pool; the job's responder,
                        // dropped in the unwind, answers -32603.
                        if catch_unwind(AssertUnwindSafe(job)).is_err() {
                            log::error!("a request handler panicked; the worker goes on");
                        }
                    }
                });
            if let Err(e) = spawned {
                log::error!("cannot start worker {i}: {e}");
            }
        }
        Workers { tx }
    }

    /// Queues `job`; waits while the queue is full.
    pub fn run(&self, job: impl FnOnce() + Send + 'static) {
        if self.tx.send(Box::new(job)).is_err() {
            // No worker could start: the job (and its responder, which answers -32603) drops.
            log::error!("no worker thread is running; the request fails");
        }
    }
}
