//! One session's live state behind one lock: its record, its event ring (frames numbered by
//! `seq`), its transcript, the active turn, pending interactions and client calls.
//!
//! Appending a frame assigns the next `seq`, serializes the frame once, stores it in the ring
//! and wakes every stream reader; all readers see the same total order.

use super::store::{Store, TranscriptFile};
use crate::host_api::wire::{
    now_ms, ErrorCode, FailureClass, Frame, FrameBody, HostError, Interaction, InteractionOutcome,
    MessageContent, Notice, Session, TokenUsage, TranscriptBody, TranscriptItem, TurnSnapshot,
    TurnStatus,
};
use crossbeam_channel::{bounded, Receiver, Sender};
use serde_json::Value;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// The ring keeps at least this many recent frames (and at most `RING_BYTES` of them).
pub const RING_FRAMES: usize = 8192;
pub const RING_BYTES: usize = 8 * 1024 * 1024;
/// A reader cursor that producers no longer wait for.
const ABANDONED: u64 = u64::MAX;
/// Pending interactions per session.
pub const MAX_PENDING_INTERACTIONS: usize = 16;

pub struct SessionCell {
    pub id: String,
    /// The principal the session belongs to (`Session::owner`, which never changes): read by
    /// the owner gate without the state's lock.
    pub owner: Option<String>,
    state: Mutex<SessionState>,
    changed: Condvar,
}

pub struct SessionState {
    pub session: Session,
    pub head_seq: u64,
    ring: Ring,
    transcript: Option<Transcript>,
    pub active: Option<ActiveTurn>,
    /// Prompts waiting for the active turn to end (`turn.start` with `queue`), in order: the
    /// first starts when it ends. In memory: a host restart forgets them (their clients, who
    /// followed the host that went away, are told so).
    pub queued: VecDeque<QueuedTurn>,
    /// Every turn seen since this host started or recovered from the transcript.
    pub turns: HashMap<String, TurnRecord>,
    pub interactions: HashMap<String, InteractionSlot>,
    /// Services the client registered with `client.capability.replace`.
    pub client_services: Vec<String>,
    pub client_calls: HashMap<String, PendingClientCall>,
    pub usage_totals: TokenUsage,
    /// The session's goal, if one was ever armed (`goal.json`).
    pub goal: Option<crate::host_api::wire::Goal>,
    /// The goal whose driver thread runs for this session. A driver of a goal that is no
    /// longer the session's leaves at its next check, without touching this.
    pub goal_driver: Option<String>,
    /// Tokens per model (for costs at the current prices), from the transcript's usage items.
    pub usage_by_model: HashMap<String, TokenUsage>,
    /// Transcript lines that could not be read and were moved aside (once loaded).
    pub quarantine: Vec<Value>,
    pub removed: bool,
    /// Live stream readers: reader id → the last `seq` it has written out.
    readers: HashMap<u64, u64>,
    next_reader: u64,
    /// A producer is waiting for readers to catch up (see `make_room`).
    producer_waiting: bool,
    /// Threads waiting on the cell's condition variable ([`SessionCell::wait`]). A frame wakes
    /// them only when there are some: a wake is a system call, and most frames of a fast
    /// stream find the stream reader still busy writing the previous batch.
    waiters: u32,
    /// The MCP servers the client passed (running while the session is attached).
    pub mcp: Option<Arc<super::mcp::McpSet>>,
    /// Permission rules kept "for this session" (in memory: a host restart asks again).
    pub permission_rules: Vec<crate::host_api::wire::PermissionRule>,
    /// Problems the person was told of once (instruction files, agent declarations): not told
    /// again each turn. In memory, bounded: a host restart tells them again.
    pub told: HashSet<String>,
}

/// A call delegated to the client (`client_call` frame), waiting for `client.call.result`.
pub struct PendingClientCall {
    pub tx: Sender<Result<Value, String>>,
    pub tool_call_id: Option<String>,
    pub service: String,
    /// Served by `client.call.input` (frames carry large inputs by reference).
    pub input: Value,
}

/// The largest serialized frame the host emits; anything larger is replaced by a
/// `frame_omitted` frame (and logged): a reader never meets a line it cannot read.
pub const MAX_FRAME_BYTES: usize = 1024 * 1024;

pub struct TurnRecord {
    pub snapshot: TurnSnapshot,
    /// Identifies the request that started it, for idempotent retries of `turn.start`.
    pub fingerprint: String,
}

/// A prompt queued behind the active turn (`turn.start` with `queue`).
pub struct QueuedTurn {
    pub turn_id: String,
    pub content: crate::host_api::wire::MessageContent,
    pub fingerprint: String,
    pub max_steps: usize,
}

pub struct InteractionSlot {
    pub interaction: Interaction,
    /// Present while pending: the turn thread waits on the other end.
    pub answer_tx: Option<Sender<InteractionOutcome>>,
}

pub struct ActiveTurn {
    pub turn_id: String,
    pub run_id: String,
    pub cancel: CancelToken,
    /// Text streamed so far but not yet in the transcript, for `session.open`.
    pub streams: Vec<ActiveStream>,
    pub tools: Vec<crate::host_api::ops::ActiveTool>,
    /// Review kinds the user allowed "for this turn".
    pub remembered: HashSet<crate::host_api::wire::Review>,
    /// Paths approved through `sandbox_boundary` during this turn.
    pub approved_paths: Vec<String>,
    /// Messages added while it runs (`turn.message.submit`), taken in at its next model step.
    pub steering: Vec<(String, MessageContent)>,
    /// The goal it runs for (origin `goal`).
    pub goal_id: Option<String>,
    /// The call running now that can be cancelled alone (`turn.tool.cancel`), with its token.
    pub cancellable_call: Option<(String, CancelToken)>,
}

#[derive(Clone)]
pub struct ActiveStream {
    pub kind: &'static str,
    pub message_id: String,
    pub text: String,
}

/// The live conversation: the file's items minus the turns a rewind abandoned (those stay in
/// the file, before the `rewind` marker that abandoned them).
struct Transcript {
    items: Vec<TranscriptItem>,
    file: TranscriptFile,
    /// The file's last `messageSeq` (abandoned items included): appends continue from it.
    last_seq: u64,
}

/// Drops the items of turns that a `rewind` item abandoned.
fn live_items(mut items: Vec<TranscriptItem>) -> Vec<TranscriptItem> {
    let abandoned: HashSet<String> = items
        .iter()
        .filter_map(|i| match &i.body {
            TranscriptBody::Rewind {
                abandoned_turn_ids, ..
            } => Some(abandoned_turn_ids.iter().cloned()),
            _ => None,
        })
        .flatten()
        .collect();
    if !abandoned.is_empty() {
        items.retain(|i| !abandoned.contains(&i.turn_id));
    }
    items
}

struct Ring {
    frames: VecDeque<Arc<str>>,
    /// `seq` of `frames[0]`.
    first_seq: u64,
    bytes: usize,
}

pub enum Since {
    Frames(Vec<Arc<str>>),
    /// `after` is older than what the ring still holds.
    Evicted {
        oldest_seq: u64,
    },
}

impl Ring {
    fn clear(&mut self) {
        self.frames.clear();
        self.bytes = 0;
    }

    fn push(&mut self, seq: u64, line: Arc<str>) {
        if self.frames.is_empty() {
            self.first_seq = seq;
        }
        self.bytes += line.len();
        self.frames.push_back(line);
        while self.frames.len() > RING_FRAMES || (self.bytes > RING_BYTES && self.frames.len() > 1)
        {
            if let Some(old) = self.frames.pop_front() {
                self.bytes -= old.len();
                self.first_seq += 1;
            }
        }
    }

    fn since(&self, after: u64, head: u64, max: usize) -> Since {
        if after >= head {
            return Since::Frames(Vec::new());
        }
        if self.frames.is_empty() || after + 1 < self.first_seq {
            return Since::Evicted {
                oldest_seq: self.first_seq,
            };
        }
        let start = (after + 1 - self.first_seq) as usize;
        Since::Frames(self.frames.iter().skip(start).take(max).cloned().collect())
    }
}

impl SessionCell {
    pub fn new(session: Session) -> Arc<SessionCell> {
        Arc::new(SessionCell {
            id: session.id.clone(),
            owner: session.owner.clone(),
            state: Mutex::new(SessionState {
                session,
                head_seq: 0,
                ring: Ring {
                    frames: VecDeque::new(),
                    first_seq: 1,
                    bytes: 0,
                },
                transcript: None,
                active: None,
                queued: VecDeque::new(),
                turns: HashMap::new(),
                interactions: HashMap::new(),
                client_services: Vec::new(),
                client_calls: HashMap::new(),
                usage_totals: TokenUsage::default(),
                usage_by_model: HashMap::new(),
                goal: None,
                goal_driver: None,
                quarantine: Vec::new(),
                removed: false,
                readers: HashMap::new(),
                next_reader: 0,
                producer_waiting: false,
                waiters: 0,
                mcp: None,
                permission_rules: Vec::new(),
                told: HashSet::new(),
            }),
            changed: Condvar::new(),
        })
    }

    pub fn lock(&self) -> MutexGuard<'_, SessionState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Tells the person `notice` (during turn `turn_id`, or none): its `notice` frame now, and a
    /// durable item that a reload replays and the model never sees. One path for every notice,
    /// so what a client is shown live is what a reload shows it.
    pub fn notice(&self, st: &mut SessionState, turn_id: &str, notice: Notice) {
        self.emit(
            st,
            FrameBody::Notice {
                turn_id: turn_id.to_string(),
                notice: notice.clone(),
            },
        );
        let item = vec![(turn_id.to_string(), TranscriptBody::Notice(notice))];
        if let Err(e) = self.append(st, item) {
            log::error!("session {}: a notice was not kept: {e}", self.id);
        }
    }

    /// Appends durable items (each with its turn id) and tells the readers
    /// (`transcript_advanced`). Returns the last `messageSeq`.
    pub fn append(
        &self,
        st: &mut SessionState,
        items: Vec<(String, TranscriptBody)>,
    ) -> Result<u64, HostError> {
        let through = st.append_transcript(items)?;
        self.emit(
            st,
            FrameBody::TranscriptAdvanced {
                through_message_seq: through,
            },
        );
        Ok(through)
    }

    /// Appends a frame and wakes the stream readers. Returns its `seq`.
    pub fn emit(&self, st: &mut SessionState, body: FrameBody) -> u64 {
        st.head_seq += 1;
        let seq = st.head_seq;
        let frame = Frame {
            seq: Some(seq),
            session_id: Some(self.id.clone()),
            ts: now_ms(),
            body,
        };
        let line: Arc<str> = match serde_json::to_string(&frame) {
            Ok(s) if s.len() <= MAX_FRAME_BYTES => s.into(),
            Ok(s) => {
                // Every producer bounds its frames; this is the net under a bug.
                let kind = serde_json::to_value(&frame.body)
                    .ok()
                    .and_then(|v| v["kind"].as_str().map(String::from))
                    .unwrap_or_default();
                log::error!(
                    "session {}: a {kind} frame of {} bytes is over the {MAX_FRAME_BYTES}-byte frame limit; omitted",
                    self.id,
                    s.len()
                );
                let omitted = Frame {
                    body: FrameBody::FrameOmitted {
                        omitted_kind: kind,
                        bytes: s.len() as u64,
                    },
                    ..frame
                };
                match serde_json::to_string(&omitted) {
                    Ok(s) => s.into(),
                    Err(_) => return seq,
                }
            }
            Err(e) => {
                log::error!("cannot serialize a frame: {e}");
                return seq;
            }
        };
        st.ring.push(seq, line);
        if st.waiters > 0 {
            self.changed.notify_all();
        }
        seq
    }

    /// Flow control for bursts: before appending, a producer whose next frame would evict
    /// frames a live reader has not read yet waits for that reader — at most `MAX_STALL` in
    /// all, so a stuck reader cannot stall a turn (it gets `resync_required` instead).
    pub fn make_room<'a>(
        &self,
        mut st: MutexGuard<'a, SessionState>,
    ) -> MutexGuard<'a, SessionState> {
        const MAX_STALL: Duration = Duration::from_secs(2);
        if !st.would_evict_unread() {
            return st; // the common case: no clock read
        }
        let deadline = std::time::Instant::now() + MAX_STALL;
        while st.would_evict_unread() {
            let now = std::time::Instant::now();
            if now >= deadline {
                // Give up on the laggards: they will be told to resync, and later frames
                // do not wait for them again.
                let first = st.ring.first_seq;
                for cursor in st.readers.values_mut() {
                    if *cursor < first + 64 {
                        *cursor = ABANDONED;
                    }
                }
                break;
            }
            st.producer_waiting = true;
            st = self.wait(st, deadline - now);
        }
        st.producer_waiting = false;
        st
    }

    /// Registers a stream reader positioned after `after`; returns its id.
    pub fn add_reader(&self, st: &mut SessionState, after: u64) -> u64 {
        st.next_reader += 1;
        st.readers.insert(st.next_reader, after);
        st.next_reader
    }

    /// Records that reader `id` has written everything through `seq`.
    pub fn reader_at(&self, st: &mut SessionState, id: u64, seq: u64) {
        if let Some(cursor) = st.readers.get_mut(&id) {
            if *cursor != ABANDONED {
                *cursor = seq;
            }
        }
        if st.producer_waiting {
            self.changed.notify_all();
        }
    }

    pub fn remove_reader(&self, st: &mut SessionState, id: u64) {
        st.readers.remove(&id);
        if st.producer_waiting {
            self.changed.notify_all();
        }
    }

    /// Wakes stream readers without a frame (removal, drain).
    pub fn wake(&self) {
        self.changed.notify_all();
    }

    /// Waits for a change of the cell (a frame, a reader's progress, a wake), `timeout` at most.
    pub fn wait<'a>(
        &self,
        mut guard: MutexGuard<'a, SessionState>,
        timeout: Duration,
    ) -> MutexGuard<'a, SessionState> {
        // Counted under the lock, which the wait releases atomically: a frame emitted after
        // this sees the waiter and wakes it.
        guard.waiters += 1;
        let mut guard = match self.changed.wait_timeout(guard, timeout) {
            Ok((g, _)) => g,
            Err(p) => p.into_inner().0,
        };
        guard.waiters -= 1;
        guard
    }
}

impl SessionState {
    /// Whether appending now would push out a frame some live reader still needs.
    fn would_evict_unread(&self) -> bool {
        let full = self.ring.frames.len() >= RING_FRAMES
            || self.ring.bytes >= RING_BYTES.saturating_sub(64 * 1024);
        full && self
            .readers
            .values()
            .any(|&cursor| cursor < self.ring.first_seq + 64)
    }

    pub fn frames_since(&self, after: u64, max: usize) -> Since {
        self.ring.since(after, self.head_seq, max)
    }

    /// Loads the transcript on first use, recovering from a crash: runs left `running` are
    /// closed as failed (`crash`) and their pending interactions as `host_restarted`.
    pub fn ensure_transcript(&mut self, store: &Store) -> Result<(), HostError> {
        if self.transcript.is_some() {
            return Ok(());
        }
        let opened = store.open_transcript(&self.session.id).map_err(|e| {
            HostError::new(
                ErrorCode::PersistenceFailed,
                format!("cannot open transcript: {e}"),
            )
        })?;
        let last_seq = opened.items.last().map(|i| i.message_seq).unwrap_or(0);
        self.transcript = Some(Transcript {
            items: live_items(opened.items),
            file: opened.file,
            last_seq,
        });
        self.quarantine = store.quarantined(&self.session.id);
        self.goal = super::goals::load(&store.session_dir(&self.session.id));
        // Borrow the field (not via a method) so the totals stay mutable.
        let items = self
            .transcript
            .as_ref()
            .map(|t| t.items.as_slice())
            .unwrap_or(&[]);
        for item in items {
            if let TranscriptBody::Usage { model, usage, .. } = &item.body {
                self.usage_totals.add(usage);
                self.usage_by_model
                    .entry(model.clone())
                    .or_default()
                    .add(usage);
            }
        }
        self.recover()
    }

    fn recover(&mut self) -> Result<(), HostError> {
        // Borrow the field (not via a method) so the other fields stay mutable.
        let items: &[TranscriptItem] = self
            .transcript
            .as_ref()
            .map(|t| t.items.as_slice())
            .unwrap_or(&[]);
        let mut running: Vec<(String, String)> = Vec::new();
        let mut pending: HashMap<String, Interaction> = HashMap::new();
        for item in items {
            match &item.body {
                TranscriptBody::TurnState {
                    run_id,
                    status,
                    origin,
                    reason,
                    failure_class,
                    failure_message,
                    ..
                } => {
                    let rec =
                        self.turns
                            .entry(item.turn_id.clone())
                            .or_insert_with(|| TurnRecord {
                                snapshot: TurnSnapshot {
                                    session_id: self.session.id.clone(),
                                    turn_id: item.turn_id.clone(),
                                    run_id: run_id.clone(),
                                    origin: origin.clone().unwrap_or_else(|| "prompt".into()),
                                    status: *status,
                                    reason: None,
                                    failure_class: None,
                                    failure_message: None,
                                    failure_details: None,
                                    started_at: item.ts,
                                    ended_at: None,
                                },
                                fingerprint: String::new(),
                            });
                    rec.snapshot.status = *status;
                    rec.snapshot.run_id = run_id.clone();
                    rec.snapshot.reason = reason.clone();
                    rec.snapshot.failure_class = *failure_class;
                    rec.snapshot.failure_message = failure_message.clone();
                    if matches!(status, TurnStatus::Running | TurnStatus::WaitingForUser) {
                        running.push((item.turn_id.clone(), run_id.clone()));
                    } else {
                        rec.snapshot.ended_at = Some(item.ts);
                        running.retain(|(_, r)| r != run_id);
                    }
                }
                TranscriptBody::Interaction { interaction } => {
                    if interaction.status == "pending" {
                        pending.insert(interaction.interaction_id.clone(), interaction.clone());
                    } else {
                        pending.remove(&interaction.interaction_id);
                    }
                    self.interactions.insert(
                        interaction.interaction_id.clone(),
                        InteractionSlot {
                            interaction: interaction.clone(),
                            answer_tx: None,
                        },
                    );
                }
                _ => {}
            }
        }
        if running.is_empty() {
            return Ok(());
        }
        let mut repairs = Vec::new();
        for mut i in pending.into_values() {
            i.status = "closed".into();
            i.outcome = Some(InteractionOutcome::Closure {
                reason: "host_restarted".into(),
            });
            if let Some(slot) = self.interactions.get_mut(&i.interaction_id) {
                slot.interaction = i.clone();
            }
            repairs.push((
                i.turn_id.clone(),
                TranscriptBody::Interaction { interaction: i },
            ));
        }
        for (turn_id, run_id) in running {
            log::warn!(
                "session {}: turn {turn_id} (run {run_id}) was interrupted by a host restart",
                self.session.id
            );
            if let Some(rec) = self.turns.get_mut(&turn_id) {
                rec.snapshot.status = TurnStatus::Failed;
                rec.snapshot.reason = Some("error".into());
                rec.snapshot.failure_class = Some(FailureClass::Crash);
                rec.snapshot.failure_message =
                    Some("the host stopped while this turn was running".into());
                rec.snapshot.ended_at = Some(now_ms());
            }
            repairs.push((
                turn_id,
                TranscriptBody::TurnState {
                    run_id,
                    status: TurnStatus::Failed,
                    origin: None,
                    reason: Some("error".into()),
                    failure_class: Some(FailureClass::Crash),
                    failure_message: Some("the host stopped while this turn was running".into()),
                    resumed_from_run_id: None,
                    goal_id: None,
                },
            ));
        }
        self.append_transcript(repairs).map(|_| ())
    }

    /// A session nobody uses any more (its client closed it): drops what is cached of it —
    /// the transcript's items and the totals read from them — when no turn runs, no reader
    /// follows it, no dialog waits and no goal drives it. The next use reads it again.
    pub fn unload_if_idle(&mut self) -> bool {
        let idle = self.active.is_none()
            && self.readers.is_empty()
            && self.interactions.values().all(|i| i.answer_tx.is_none())
            && self.client_calls.is_empty()
            && self.goal_driver.is_none();
        if idle && self.transcript.is_some() {
            self.transcript = None;
            self.usage_totals = TokenUsage::default();
            self.usage_by_model.clear();
            self.quarantine.clear();
            self.ring.clear();
        }
        idle
    }

    pub fn transcript_items(&self) -> &[TranscriptItem] {
        self.transcript
            .as_ref()
            .map(|t| t.items.as_slice())
            .unwrap_or(&[])
    }

    pub fn through_message_seq(&self) -> u64 {
        self.transcript.as_ref().map(|t| t.last_seq).unwrap_or(0)
    }

    /// Abandons `turn_ids` (durably: a `rewind` item first): they leave the live conversation
    /// and the turn table. Returns the marker's `messageSeq`.
    pub fn abandon_turns(
        &mut self,
        revision_id: &str,
        turn_ids: Vec<String>,
    ) -> Result<u64, HostError> {
        let marker = TranscriptBody::Rewind {
            revision_id: revision_id.into(),
            abandoned_turn_ids: turn_ids.clone(),
        };
        let seq = self.append_transcript(vec![(String::new(), marker)])?;
        let gone: HashSet<String> = turn_ids.into_iter().collect();
        if let Some(t) = self.transcript.as_mut() {
            t.items.retain(|i| !gone.contains(&i.turn_id));
        }
        self.turns.retain(|id, _| !gone.contains(id));
        Ok(seq)
    }

    /// Appends durable items; returns the last `messageSeq`. The caller emits
    /// `transcript_advanced` if readers should know.
    pub fn append_transcript(
        &mut self,
        bodies: Vec<(String, TranscriptBody)>,
    ) -> Result<u64, HostError> {
        let Some(t) = self.transcript.as_mut() else {
            return Err(HostError::internal("transcript not loaded"));
        };
        let mut seq = t.last_seq;
        let ts = now_ms();
        let mut items: Vec<TranscriptItem> = bodies
            .into_iter()
            .map(|(turn_id, body)| {
                seq += 1;
                TranscriptItem {
                    message_seq: seq,
                    ts,
                    turn_id,
                    body,
                }
            })
            .collect();
        t.file.append(&mut items).map_err(|e| {
            HostError::new(
                ErrorCode::PersistenceFailed,
                format!("cannot append to the transcript: {e}"),
            )
        })?;
        t.items.extend(items);
        t.last_seq = seq;
        Ok(seq)
    }

    /// The session's cost at `prices` (`None` without prices).
    pub fn cost(
        &self,
        prices: &crate::host::models::prices::Prices,
    ) -> Option<crate::host_api::wire::Cost> {
        if prices.is_empty() {
            return None;
        }
        let amount = self
            .usage_by_model
            .iter()
            .filter_map(|(m, u)| prices.cost(m, u))
            .sum();
        Some(crate::host_api::wire::Cost {
            amount,
            currency: prices.currency.clone(),
        })
    }

    /// Whether the client registered `service` (or a family it belongs to: `fs` covers
    /// `fs.read_text_file`).
    pub fn offers(&self, service: &str) -> bool {
        self.client_services
            .iter()
            .any(|s| s == service || service.starts_with(&format!("{s}.")))
    }

    /// Interactions still waiting for an answer.
    pub fn pending_interaction_count(&self) -> usize {
        self.interactions
            .values()
            .filter(|s| s.answer_tx.is_some())
            .count()
    }
}

/// Cancellation that threads can poll or `select!` on: cancelling drops the sender, so every
/// receiver wakes with "disconnected".
#[derive(Clone)]
pub struct CancelToken {
    flag: Arc<AtomicBool>,
    tx: Arc<Mutex<Option<Sender<()>>>>,
    rx: Receiver<()>,
}

impl Default for CancelToken {
    fn default() -> Self {
        let (tx, rx) = bounded(0);
        CancelToken {
            flag: Arc::default(),
            tx: Arc::new(Mutex::new(Some(tx))),
            rx,
        }
    }
}

impl CancelToken {
    pub fn cancel(&self) {
        self.flag.store(true, Ordering::Release);
        if let Ok(mut tx) = self.tx.lock() {
            tx.take();
        }
    }

    pub fn is_cancelled(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }

    /// Becomes ready (disconnected) when cancelled.
    pub fn receiver(&self) -> &Receiver<()> {
        &self.rx
    }

    /// Sleeps up to `d`; returns false if cancelled meanwhile.
    pub fn sleep(&self, d: Duration) -> bool {
        let _ = self.rx.recv_timeout(d);
        !self.is_cancelled()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_serves_after_and_reports_eviction() {
        let mut r = Ring {
            frames: VecDeque::new(),
            first_seq: 1,
            bytes: 0,
        };
        for seq in 1..=(RING_FRAMES as u64 + 10) {
            r.push(seq, Arc::from(format!("{seq}")));
        }
        let head = RING_FRAMES as u64 + 10;
        match r.since(head - 2, head, 100) {
            Since::Frames(f) => assert_eq!(
                f.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                vec![format!("{}", head - 1), format!("{head}")]
            ),
            Since::Evicted { .. } => panic!("should be retained"),
        }
        assert!(matches!(
            r.since(3, head, 100),
            Since::Evicted { oldest_seq: 11 }
        ));
        assert!(matches!(r.since(10, head, 1), Since::Frames(f) if f.len() == 1));
    }

    #[test]
    fn cancel_wakes_receivers() {
        let t = CancelToken::default();
        let t2 = t.clone();
        let h = std::thread::spawn(move || t2.receiver().recv().is_err());
        t.cancel();
        assert!(h.join().unwrap());
        assert!(!t.sleep(Duration::from_secs(5)));
    }
}
