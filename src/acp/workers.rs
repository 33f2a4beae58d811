//! A small, bounded pool of worker threads for the methods that talk to the Runtime Host, so a
//! burst of requests costs a bounded number of threads. Workers start when work arrives and
//! none is idle, up to [`WORKERS`] (an agent that is only initialized starts none: startup stays
//! a few spawns shorter). The queue of methods is bounded too: when it is full, the dispatcher
//! waits, which slows the connection's reader (stdin's, on stdio) down to the speed of the work
//! instead of buffering without end. Client responses never wait on it (the reader routes them
//! itself), so a worker waiting for the client cannot be starved by its own queue. Each
//! connection has a pool of its own (under `maka-acp serve`, one per connection).
//!
//! Turn starts have a queue of their own that never makes the dispatcher wait: a turn is
//! queued only once its prompt is the session's pending prompt, and a session has one at most,
//! so that queue is bounded by the session table. A start can take seconds (the host's stream
//! slots are full: it waits for one), and a dispatcher waiting behind a thousand of them would
//! hold back the `session/cancel` that makes them quick — and, at stdin's end, the drain.

use crossbeam_channel::{bounded, select, unbounded, Receiver, Sender};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// Workers at most: enough for a few sessions loading and prompting at once; the host
/// serializes per session anyway.
pub const WORKERS: usize = 8;
const QUEUE: usize = 256;

type Job = Box<dyn FnOnce() + Send>;

pub struct Workers {
    tx: Sender<Job>,
    rx: Receiver<Job>,
    /// Turn starts: one per session with a pending prompt at most (see the module's comment).
    turns_tx: Sender<Job>,
    turns_rx: Receiver<Job>,
    started: usize,
    /// Workers waiting for a job.
    idle: Arc<AtomicUsize>,
}

impl Workers {
    pub fn new() -> Workers {
        let (tx, rx) = bounded::<Job>(QUEUE);
        let (turns_tx, turns_rx) = unbounded::<Job>();
        Workers {
            tx,
            rx,
            turns_tx,
            turns_rx,
            started: 0,
            idle: Arc::default(),
        }
    }

    /// Queues `job`, starting a worker if none is idle and fewer than [`WORKERS`] run; waits
    /// while the queue is full.
    pub fn run(&mut self, job: impl FnOnce() + Send + 'static) {
        let tx = self.tx.clone();
        self.queue(&tx, Box::new(job));
    }

    /// Queues the start of a turn whose prompt was just registered as its session's pending
    /// prompt; never waits.
    pub fn start_turn(&mut self, job: impl FnOnce() + Send + 'static) {
        let tx = self.turns_tx.clone();
        self.queue(&tx, Box::new(job));
    }

    fn queue(&mut self, tx: &Sender<Job>, job: Job) {
        // Fewer idle workers than jobs waiting (this one included): one more, up to the cap.
        let waiting = self.tx.len() + self.turns_tx.len();
        if self.idle.load(Ordering::Acquire) <= waiting && self.started < WORKERS {
            self.start_one();
        }
        if self.started == 0 {
            // Not even one worker could start: do the work here rather than never.
            return job();
        }
        if tx.send(job).is_err() {
            log::error!("the worker queue is closed; the request fails");
        }
    }

    fn start_one(&mut self) {
        let (rx, turns) = (self.rx.clone(), self.turns_rx.clone());
        let (idle, n) = (Arc::clone(&self.idle), self.started);
        let spawned = std::thread::Builder::new()
            .name(format!("acp-worker-{n}"))
            .spawn(move || loop {
                idle.fetch_add(1, Ordering::AcqRel);
                let job = next_job(&rx, &turns);
                idle.fetch_sub(1, Ordering::AcqRel);
                let Some(job) = job else { return };
                run_job(job);
            });
        match spawned {
            Ok(_) => self.started += 1,
            Err(e) => log::error!("cannot start worker {n}: {e}"),
        }
    }
}

/// The next job from either queue; `None` once both are closed and empty.
fn next_job(jobs: &Receiver<Job>, turns: &Receiver<Job>) -> Option<Job> {
    select! {
        recv(jobs) -> job => job.ok().or_else(|| turns.recv().ok()),
        recv(turns) -> job => job.ok().or_else(|| jobs.recv().ok()),
    }
}

/// Release builds abort on a panic (Cargo.toml says why), so there a panicking job ends the
/// process. Where panics unwind (tests, debug builds) the worker survives it — the pool never
/// shrinks — and the job's responder, dropped in the unwind, answers -32603.
#[cfg(panic = "unwind")]
fn run_job(job: Job) {
    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(job)).is_err() {
        log::error!("a request handler panicked; the worker goes on");
    }
}

#[cfg(not(panic = "unwind"))]
fn run_job(job: Job) {
    job()
}
