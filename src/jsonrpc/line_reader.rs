//! Bounded newline-delimited reading.
//!
//! A line longer than the limit is never buffered whole: once it passes the limit the rest of it
//! is consumed and dropped, and the caller learns only that it was too long.

use std::io::{self, BufRead};

/// The longest line the agent accepts: 64 MiB leaves room for prompts with embedded images
/// while keeping one bad client from exhausting memory.
pub const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

#[derive(Debug, PartialEq)]
pub enum Line {
    /// One line without its `\n` (and without a trailing `\r`).
    Complete(Vec<u8>),
    /// A line that exceeded the limit; `len` counts the bytes seen (at least the limit + 1).
    TooLong { len: usize },
}

pub struct LineReader<R> {
    inner: R,
    max: usize,
}

impl<R: BufRead> LineReader<R> {
    pub fn new(inner: R, max: usize) -> LineReader<R> {
        LineReader { inner, max }
    }

    /// The next non-blank line, or `None` at end of input. A final line without a newline
    /// is still returned.
    pub fn next_line(&mut self) -> io::Result<Option<Line>> {
        loop {
            match self.read_one()? {
                None => return Ok(None),
                Some(Line::Complete(l)) if l.iter().all(u8::is_ascii_whitespace) => continue,
                Some(line) => return Ok(Some(line)),
            }
        }
    }

    /// The next line, blank ones included (event streams end an event with a blank line), or
    /// `None` at end of input.
    pub fn read_one(&mut self) -> io::Result<Option<Line>> {
        let mut buf = Vec::new();
        let mut seen = 0usize;
        let mut too_long = false;
        loop {
            let available = match self.inner.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                // End of input: a partial last line still counts.
                if seen == 0 {
                    return Ok(None);
                }
                break;
            }
            let (chunk, found_newline) = match available.iter().position(|&b| b == b'\n') {
                Some(i) => (&available[..i], true),
                None => (available, false),
            };
            seen += chunk.len();
            if !too_long {
                if seen > self.max {
                    too_long = true;
                    buf = Vec::new();
                } else {
                    buf.extend_from_slice(chunk);
                }
            }
            let consumed = chunk.len() + usize::from(found_newline);
            self.inner.consume(consumed);
            if found_newline {
                break;
            }
        }
        if too_long {
            return Ok(Some(Line::TooLong { len: seen }));
        }
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
        Ok(Some(Line::Complete(buf)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufReader, Cursor};

    fn lines(input: &[u8], max: usize, cap: usize) -> Vec<Line> {
        let mut r = LineReader::new(
            BufReader::with_capacity(cap, Cursor::new(input.to_vec())),
            max,
        );
        let mut out = Vec::new();
        while let Some(l) = r.next_line().unwrap() {
            out.push(l);
        }
        out
    }

    #[test]
    fn splits_skips_blanks_and_keeps_last_partial_line() {
        let got = lines(b"a\n\n  \r\nbc\r\nd", 10, 2);
        assert_eq!(
            got,
            vec![
                Line::Complete(b"a".to_vec()),
                Line::Complete(b"bc".to_vec()),
                Line::Complete(b"d".to_vec())
            ]
        );
    }

    #[test]
    fn oversized_line_is_skipped_and_reading_continues() {
        let mut input = vec![b'x'; 25];
        input.extend_from_slice(b"\nok\n");
        let got = lines(&input, 10, 4);
        assert_eq!(
            got,
            vec![Line::TooLong { len: 25 }, Line::Complete(b"ok".to_vec())]
        );
    }

    #[test]
    fn exactly_the_limit_is_accepted() {
        let got = lines(b"0123456789\n", 10, 3);
        assert_eq!(got, vec![Line::Complete(b"0123456789".to_vec())]);
    }
}
