//! Server-sent events, read with a bound on every line: the one SSE reader, for model providers
//! (`models/openai.rs`) and MCP servers over HTTP (`mcp.rs`).
//!
//! An event's data is its `data:` lines joined by newlines, dispatched at the blank line that
//! ends the event (and at the end of the stream, so a last event without its blank line is not
//! lost). `event:`, `id:`, `retry:` and comments are read and ignored: neither user needs them.

use crate::jsonrpc::line_reader::{Line, LineReader};
use std::io::{self, BufReader, Read};

pub enum SseItem {
    /// One event's data.
    Data(String),
    /// A line over the limit, skipped without being buffered (its length in bytes).
    Oversized(u64),
}

pub struct SseReader<R> {
    lines: LineReader<BufReader<R>>,
    data: Option<String>,
}

impl<R: Read> SseReader<R> {
    pub fn new(body: R, max_line: usize) -> SseReader<R> {
        SseReader {
            lines: LineReader::new(BufReader::with_capacity(64 * 1024, body), max_line),
            data: None,
        }
    }

    /// The next event's data, or an oversized line; `Ok(None)` at the end of the stream.
    pub fn next(&mut self) -> io::Result<Option<SseItem>> {
        loop {
            let line = match self.lines.read_one()? {
                None => return Ok(self.data.take().map(SseItem::Data)),
                Some(Line::TooLong { len, .. }) => return Ok(Some(SseItem::Oversized(len as u64))),
                Some(Line::Complete(bytes)) => bytes,
            };
            let text = String::from_utf8_lossy(line);
            if text.is_empty() {
                if let Some(d) = self.data.take() {
                    return Ok(Some(SseItem::Data(d)));
                }
                continue;
            }
            let Some(value) = text.strip_prefix("data:") else {
                continue; // event:, id:, retry:, comments
            };
            let value = value.strip_prefix(' ').unwrap_or(value);
            match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_string()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(input: &str, max: usize) -> Vec<String> {
        let mut r = SseReader::new(input.as_bytes(), max);
        let mut out = vec![];
        while let Some(item) = r.next().unwrap() {
            out.push(match item {
                SseItem::Data(d) => d,
                SseItem::Oversized(n) => format!("<{n} bytes skipped>"),
            });
        }
        out
    }

    #[test]
    fn events_join_data_lines_and_end_at_blank_lines_or_the_end() {
        assert_eq!(
            all(
                ": hi\nevent: message\ndata: a\ndata: b\n\ndata:c\r\n\r\ndata: [DONE]",
                100
            ),
            ["a\nb", "c", "[DONE]"]
        );
        assert_eq!(
            all(&format!("data: {}\n\ndata: ok\n\n", "x".repeat(50)), 20),
            ["<56 bytes skipped>", "ok"]
        );
    }
}
