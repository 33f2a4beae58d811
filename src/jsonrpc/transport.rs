//! The transport of one connection (stdio, or a `maka-acp serve` connection's channel and
//! streams: [`Connection::from_io`]): a reader thread, a single writer thread, and the channels
//! between them and the dispatcher. The writer is the only code that writes the connection's
//! output (on stdio, stdout); whatever is enqueued first is written first, which is what every
//! ordering guarantee of the agent rests on.

use super::incoming::{IncomingRequests, Responder};
use super::line::{self as outgoing_line, Line};
use super::line_reader::{Line as InputLine, LineReader, MAX_LINE_BYTES};
use super::message::{
    code, parse_line, Message, Notification, Request, RequestId, Response, ResponseError,
};
use super::outgoing::ClientCalls;
use super::oversized::{self, Head};
use crossbeam_channel::{bounded, Receiver, Sender};
use std::io::{self, BufRead, BufWriter, Write};
use std::sync::Arc;
use std::thread::{self, JoinHandle};

/// Lines waiting for the writer. Producers block when it is full, which bounds memory and
/// slows a streaming session down to the speed of the client instead of buffering forever.
const OUTBOX_CAPACITY: usize = 4096;
/// Requests and notifications waiting for the dispatcher.
const INBOX_CAPACITY: usize = 256;

pub(crate) enum Outgoing {
    /// Boxed: the outbox's slots are allocated (and touched) up front, 4096 a connection, so
    /// each is one pointer wide (a `maka-acp serve` process holds hundreds of outboxes).
    Line(Box<Line>),
    /// Written after everything enqueued before it; then the writer exits.
    Stop,
}

/// An outbox whose lines the caller delivers itself (MCP over HTTP+SSE POSTs each one), with
/// the receiving end of its queue.
#[cfg(feature = "host")]
pub(crate) fn outbox_pair() -> (Outbox, Receiver<Outgoing>) {
    let (tx, rx) = bounded(OUTBOX_CAPACITY);
    (Outbox { tx }, rx)
}

/// A cheap handle for enqueueing messages to the writer thread.
#[derive(Clone)]
pub struct Outbox {
    tx: Sender<Outgoing>,
}

impl Outbox {
    /// Serializes on the caller's thread (so sessions serialize in parallel) and enqueues.
    /// Returns false once the writer is gone (stdout closed or connection finished).
    pub fn send(&self, message: &Message) -> bool {
        self.tx
            .send(Outgoing::Line(Box::new(message.to_routed_line())))
            .is_ok()
    }

    /// A notification of `session` whose params are a typed value, serialized straight to its
    /// line (no intermediate `Value` tree on the streaming path).
    pub fn notify<P: serde::Serialize>(&self, session: &str, method: &str, params: &P) -> bool {
        match outgoing_line::notification(Some(session), method, params) {
            Ok(line) => self.tx.send(Outgoing::Line(Box::new(line))).is_ok(),
            Err(e) => {
                log::error!("cannot serialize a {method} notification: {e}");
                false
            }
        }
    }
}

/// What the dispatcher receives: requests (with the responder that must answer them) and
/// notifications. Responses and `$/cancel_request` are handled by the reader itself.
pub enum Incoming {
    Request(Request, Responder),
    Notification(Notification),
}

/// One ACP connection: the queues and tables shared by the dispatcher and session threads.
pub struct Connection {
    pub outbox: Outbox,
    pub client_calls: Arc<ClientCalls>,
    pub incoming: Arc<IncomingRequests>,
    pub inbox: Receiver<Incoming>,
    writer: JoinHandle<()>,
    stop: Sender<Outgoing>,
}

impl Connection {
    pub fn stdio() -> io::Result<Connection> {
        // Stdin is buffered internally; a larger BufReader on top reads big lines in fewer calls.
        Connection::from_io(
            "acp",
            io::BufReader::with_capacity(64 * 1024, io::stdin()),
            io::stdout(),
        )
    }

    /// A connection over `input` and `output`, its two threads named `<name>-reader` and
    /// `<name>-writer` (`acp` for the client on stdio; the host names its MCP servers and
    /// subagents). Fails when the system refuses a thread: the caller decides what that costs
    /// (the agent cannot serve at all; the host fails that one child).
    pub fn from_io<R, W>(name: &str, input: R, output: W) -> io::Result<Connection>
    where
        R: BufRead + Send + 'static,
        W: Write + Send + 'static,
    {
        Connection::from_sink(name, input, BufWriter::with_capacity(64 * 1024, output))
    }

    /// The same, its lines handed to `sink` with their heads (`maka-acp serve` routes each
    /// by its head, never reading it again).
    pub fn from_sink<R, S>(name: &str, input: R, sink: S) -> io::Result<Connection>
    where
        R: BufRead + Send + 'static,
        S: LineSink,
    {
        let (out_tx, out_rx) = bounded(OUTBOX_CAPACITY);
        let writer = thread::Builder::new()
            .name(format!("{name}-writer"))
            .spawn(move || write_lines(sink, out_rx))?;
        let outbox = Outbox { tx: out_tx.clone() };
        let client_calls = Arc::new(ClientCalls::new(outbox.clone()));
        let incoming = IncomingRequests::new(outbox.clone());
        let (in_tx, in_rx) = bounded(INBOX_CAPACITY);
        let reader_state = ReaderState {
            outbox: outbox.clone(),
            client_calls: Arc::clone(&client_calls),
            incoming: Arc::clone(&incoming),
            inbox: in_tx,
        };
        // The reader is never joined: it may be blocked in read() on a stdin that stays open.
        // It exits by itself at EOF, and the process does not wait for it.
        // Should it not start, the writer ends with the last sender of its queue, dropped here.
        thread::Builder::new()
            .name(format!("{name}-reader"))
            .spawn(move || read_lines(input, reader_state, MAX_LINE_BYTES))?;
        Ok(Connection {
            outbox,
            client_calls,
            incoming,
            inbox: in_rx,
            writer,
            stop: out_tx,
        })
    }

    /// Writes everything already enqueued, then stops the writer and waits for it.
    pub fn finish(self) {
        self.client_calls.close_all();
        let _ = self.stop.send(Outgoing::Stop);
        if self.writer.join().is_err() {
            log::error!("the stdout writer thread panicked");
        }
    }
}

/// Where the writer thread puts each line: stdout (or any `Write`, one line each), or a
/// transport that routes lines by their heads.
pub trait LineSink: Send + 'static {
    fn write_line(&mut self, line: Line) -> io::Result<()>;
    fn flush(&mut self) -> io::Result<()>;
}

impl<W: Write + Send + 'static> LineSink for BufWriter<W> {
    fn write_line(&mut self, line: Line) -> io::Result<()> {
        self.write_all(line.text.as_bytes())
            .and_then(|()| self.write_all(b"\n"))
    }

    fn flush(&mut self) -> io::Result<()> {
        Write::flush(self)
    }
}

fn write_lines<S: LineSink>(mut out: S, rx: Receiver<Outgoing>) {
    while let Ok(item) = rx.recv() {
        let Outgoing::Line(line) = item else { break };
        let written = out
            .write_line(*line)
            // Flush once the queue is drained: a burst becomes one write, a lone line goes
            // out at once.
            .and_then(|()| if rx.is_empty() { out.flush() } else { Ok(()) });
        if let Err(e) = written {
            log::error!("cannot write to stdout ({e}); dropping further output");
            return;
        }
    }
    if let Err(e) = out.flush() {
        log::error!("cannot flush stdout: {e}");
    }
}

struct ReaderState {
    outbox: Outbox,
    client_calls: Arc<ClientCalls>,
    incoming: Arc<IncomingRequests>,
    inbox: Sender<Incoming>,
}

/// Reads lines of at most `max` bytes until the end of `input`.
fn read_lines<R: BufRead>(input: R, state: ReaderState, max: usize) {
    let mut reader = LineReader::new(input, max);
    let mut first = true;
    loop {
        match reader.next_line() {
            Ok(None) => break,
            Ok(Some(InputLine::TooLong { len, head })) => {
                log::warn!("skipping an input line of {len}+ bytes (limit {max})");
                state.skip_oversized(head, max);
            }
            Ok(Some(InputLine::Complete(bytes))) => {
                // A UTF-8 byte-order mark before the first message (some Windows tools write
                // one) is not part of the JSON.
                let line = match bytes.strip_prefix(b"\xEF\xBB\xBF") {
                    Some(rest) if first => rest,
                    _ => bytes,
                };
                first = false;
                if !state.handle_line(line) {
                    break;
                }
                reader.release_large();
            }
            Err(e) => {
                log::error!("cannot read stdin: {e}");
                break;
            }
        }
    }
    log::debug!("stdin closed");
    // Dropping `state.inbox` tells the dispatcher to shut down.
    state.client_calls.close_all();
}

impl ReaderState {
    /// A line over the limit, of which only `head` was kept: a request is answered with its
    /// own id when its start shows it (else `null`); a response is its request's failure.
    fn skip_oversized(&self, head: &[u8], max: usize) {
        let error = ResponseError::new(
            code::INVALID_REQUEST,
            format!("Invalid request: line exceeds the {max}-byte limit and was skipped"),
        );
        let id = match oversized::read_head(head) {
            Head::Request(id) => id,
            Head::Response(id) => {
                log::warn!("the answer to our request {id} was over the limit; that request fails");
                let message =
                    format!("The answer exceeds the {max}-byte line limit and was skipped.");
                let result = Err(ResponseError::new(code::INVALID_REQUEST, message));
                return self.client_calls.complete(Response { id, result });
            }
            Head::Unknown => RequestId::Null,
        };
        // Answered, not begun: the request is not in flight (its params were never read).
        self.outbox.send(&Message::response(id, Err(error)));
    }

    /// Returns false when the dispatcher is gone.
    fn handle_line(&self, bytes: &[u8]) -> bool {
        let message = match parse_line(bytes) {
            Ok(m) => m,
            Err(invalid) => {
                log::warn!("bad input line: {}", invalid.error.message);
                self.outbox
                    .send(&Message::response(invalid.id, Err(invalid.error)));
                return true;
            }
        };
        match message {
            Message::Response(r) => self.client_calls.complete(r),
            Message::Notification(n) if n.method == "$/cancel_request" => {
                match n.params.get("requestId").and_then(RequestId::from_value) {
                    // Answered here at once; the dispatcher is told too, so that what the
                    // request started can be withdrawn (a prompt not yet inserted).
                    Some(id) if self.incoming.cancel(&id) => {
                        return self.inbox.send(Incoming::Notification(n)).is_ok();
                    }
                    Some(_) => {}
                    None => log::warn!("$/cancel_request without a valid requestId"),
                }
            }
            Message::Notification(n) => return self.inbox.send(Incoming::Notification(n)).is_ok(),
            Message::Request(r) => match self.incoming.begin(r.id.clone(), &r.method) {
                Ok(responder) => return self.inbox.send(Incoming::Request(r, responder)).is_ok(),
                Err(id) => {
                    self.outbox.send(&Message::response(
                        id.clone(),
                        Err(ResponseError::new(
                            code::INVALID_REQUEST,
                            format!(
                                "Invalid request: id {id} is already used by a request in progress"
                            ),
                        )),
                    ));
                }
            },
        }
        true
    }
}

/// An outbox whose lines can be inspected synchronously, for unit tests.
#[cfg(test)]
pub fn test_outbox() -> (Outbox, TestLines) {
    let (tx, rx) = bounded(1024);
    (Outbox { tx }, TestLines(rx))
}

#[cfg(test)]
pub struct TestLines(Receiver<Outgoing>);

#[cfg(test)]
impl TestLines {
    pub fn try_iter(&self) -> impl Iterator<Item = String> + '_ {
        self.0.try_iter().filter_map(|o| match o {
            Outgoing::Line(l) => Some(l.text),
            Outgoing::Stop => None,
        })
    }

    /// The next line written, waiting until `deadline` at most.
    pub fn next_before(&self, deadline: std::time::Instant) -> Option<String> {
        loop {
            match self.0.recv_deadline(deadline) {
                Ok(Outgoing::Line(l)) => return Some(l.text),
                Ok(Outgoing::Stop) => continue,
                Err(_) => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::jsonrpc::line_reader;
    use serde_json::{json, Value};

    /// Lines over the limit: a request is answered with its own id when its start shows it
    /// (else `null`), the answer to one of our requests fails that request, and reading goes
    /// on.
    #[test]
    fn an_oversized_line_is_answered_with_the_id_its_start_shows() {
        let (outbox, lines) = test_outbox();
        let client_calls = Arc::new(ClientCalls::new(outbox.clone()));
        let ours = client_calls.call("fs/read_text_file", json!({}));
        let (inbox, requests) = bounded(8);
        let state = ReaderState {
            outbox: outbox.clone(),
            client_calls: Arc::clone(&client_calls),
            incoming: IncomingRequests::new(outbox),
            inbox,
        };
        let filler = "x".repeat(line_reader::HEAD_KEPT);
        let input = [
            format!(r#"{{"jsonrpc":"2.0","id":7,"method":"session/prompt","params":{{"t":"{filler}"}}}}"#),
            format!(r#"{{"jsonrpc":"2.0","method":"m","params":{{"id":8,"t":"{filler}"}},"id":9}}"#),
            format!(r#"{{"jsonrpc":"2.0","id":0,"result":{{"content":"{filler}"}}}}"#),
            r#"{"jsonrpc":"2.0","id":10,"method":"m"}"#.to_string(),
        ]
        .join("\n");
        read_lines(input.as_bytes(), state, 100);

        let answers: Vec<(Value, i64)> = lines
            .try_iter()
            .map(|l| serde_json::from_str::<Value>(&l).unwrap())
            .filter(|v| v.get("method").is_none())
            .map(|v| (v["id"].clone(), v["error"]["code"].as_i64().unwrap_or(0)))
            .collect();
        assert_eq!(answers, [(json!(7), -32600), (Value::Null, -32600)]);
        assert_eq!(ours.wait().map_err(|e| e.code), Err(-32600));
        let read: Vec<RequestId> = requests
            .try_iter()
            .filter_map(|i| match i {
                Incoming::Request(r, _) => Some(r.id),
                Incoming::Notification(_) => None,
            })
            .collect();
        assert_eq!(read, [RequestId::Int(10)]);
    }
}
