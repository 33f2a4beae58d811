//! Server-sent events, read with a bound on every line: the one SSE reader, for model providers
//! (`models/openai.rs`) and MCP servers over HTTP (`mcp.rs`).
//!
//! An event's data is its `data:` lines joined by newlines, dispatched at the blank line that
//! ends the event (and at the end of the stream, so a last event without its blank line is not
//! lost). `event:`, `id:`, `retry:` and comments are read and ignored: neither user needs them.

use std::io::{self, BufRead, BufReader, Read};

pub enum SseItem {
    /// One event's data.
    Data(String),
    /// A line over the limit, skipped without being buffered (its length in bytes).
    Oversized(u64),
}

pub struct SseReader<R> {
    reader: BufReader<R>,
    max_line: u64,
    data: Option<String>,
}

impl<R: Read> SseReader<R> {
    pub fn new(body: R, max_line: usize) -> SseReader<R> {
        SseReader {
            reader: BufReader::with_capacity(64 * 1024, body),
            max_line: max_line as u64,
            data: None,
        }
    }

    /// The next event's data, or an oversized line; `Ok(None)` at the end of the stream.
    pub fn next(&mut self) -> io::Result<Option<SseItem>> {
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = (&mut self.reader)
                .take(self.max_line)
                .read_until(b'\n', &mut line)?;
            if n == 0 {
                return Ok(self.data.take().map(SseItem::Data));
            }
            if line.last() != Some(&b'\n') && n as u64 == self.max_line {
                let skipped = skip_line(&mut self.reader)?;
                return Ok(Some(SseItem::Oversized(n as u64 + skipped)));
            }
            let text = String::from_utf8_lossy(&line);
            let text = text.trim_end_matches(['\n', '\r']);
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

/// Consumes the rest of a line without keeping it; returns how many bytes it had.
fn skip_line(reader: &mut impl BufRead) -> io::Result<u64> {
    let mut skipped = 0u64;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(skipped);
        }
        match buf.iter().position(|&b| b == b'\n') {
            Some(i) => {
                reader.consume(i + 1);
                return Ok(skipped + i as u64 + 1);
            }
            None => {
                let n = buf.len();
                reader.consume(n);
                skipped += n as u64;
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
            ["<57 bytes skipped>", "ok"]
        );
    }
}
