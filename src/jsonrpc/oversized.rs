//! What the start of a line too long to read says about it. Such a line is skipped, but its
//! first few KiB are kept ([`super::line_reader::HEAD_KEPT`]): when they show a request and its
//! id, the request is answered with its own id (not `null`, which its sender cannot match), and
//! when they show a response to one of our requests, that request's waiter learns it failed.
//!
//! Only the top-level object's members count: an `"id"` inside `params` is another thing's id,
//! and answering it would answer the wrong request. The scan is bounded by the kept bytes and
//! never recurses.

use super::message::RequestId;

/// What the kept start of an oversized line shows.
#[derive(Debug, PartialEq)]
pub enum Head {
    /// A request: `id` and `method` are top-level members, `result` and `error` are not.
    Request(RequestId),
    /// A response: `id` and `result` or `error` are top-level members, `method` is not.
    Response(RequestId),
    /// Neither can be told from the start (the id comes later, or the line is not an object).
    Unknown,
}

/// Reads the top-level members at the start of `head` until they say what the line is.
pub fn read_head(head: &[u8]) -> Head {
    let mut scan = Scan { b: head, at: 0 };
    let mut seen = Seen::default();
    if scan.members(&mut seen).is_none() {
        log::debug!("the start of an oversized line shows no request id");
    }
    seen.head()
}

/// The top-level members read so far.
#[derive(Default)]
struct Seen {
    id: Option<RequestId>,
    method: bool,
    outcome: bool,
}

impl Seen {
    fn head(self) -> Head {
        match (self.id, self.method, self.outcome) {
            (Some(id), true, false) => Head::Request(id),
            (Some(id), false, true) => Head::Response(id),
            _ => Head::Unknown,
        }
    }

    /// Whether more members could change what is known.
    fn settled(&self) -> bool {
        self.id.is_some() && (self.method || self.outcome)
    }
}

struct Scan<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Scan<'a> {
    /// Reads `{ "key": value, … ` into `seen`; `None` where the bytes end or stop making sense.
    fn members(&mut self, seen: &mut Seen) -> Option<()> {
        self.expect(b'{')?;
        loop {
            self.skip_space();
            let key = self.string()?;
            self.skip_space();
            self.expect(b':')?;
            self.skip_space();
            // The key says all for the others (their values may be what is too long).
            match key.as_str() {
                "method" => seen.method = true,
                "result" | "error" => seen.outcome = true,
                _ => {}
            }
            let value = self.value();
            // The first `id` counts (a duplicate member makes nothing more certain).
            if key == "id" && seen.id.is_none() {
                seen.id = Some(read_id(value?)?);
            }
            if seen.settled() {
                return Some(());
            }
            value?;
            self.skip_space();
            self.expect(b',')?;
        }
    }

    fn peek(&self) -> Option<u8> {
        self.b.get(self.at).copied()
    }

    fn expect(&mut self, byte: u8) -> Option<()> {
        (self.peek()? == byte).then(|| self.at += 1)
    }

    fn skip_space(&mut self) {
        while self
            .peek()
            .is_some_and(|c| matches!(c, b' ' | b'\t' | b'\n' | b'\r'))
        {
            self.at += 1;
        }
    }

    /// A string, decoded (escapes included: `"\u0069d"` is the key `id`, as a JSON parser
    /// reads it).
    fn string(&mut self) -> Option<String> {
        serde_json::from_slice(self.string_bytes()?).ok()
    }

    /// A string's bytes, quotes included.
    fn string_bytes(&mut self) -> Option<&'a [u8]> {
        let start = self.at;
        self.expect(b'"')?;
        loop {
            match self.peek()? {
                b'"' => {
                    self.at += 1;
                    return self.b.get(start..self.at);
                }
                b'\\' => self.at += 2,
                _ => self.at += 1,
            }
        }
    }

    /// A whole value's bytes: a string, an object or array (matched brackets, strings inside
    /// skipped), or a number or literal (up to the next delimiter).
    fn value(&mut self) -> Option<&'a [u8]> {
        let start = self.at;
        match self.peek()? {
            b'"' => {
                self.string_bytes()?;
            }
            b'{' | b'[' => self.nested()?,
            _ => {
                while !matches!(
                    self.peek()?,
                    b',' | b'}' | b']' | b' ' | b'\t' | b'\n' | b'\r'
                ) {
                    self.at += 1;
                }
            }
        }
        self.b.get(start..self.at)
    }

    /// Skips an object or array by counting brackets outside strings (nesting depth is a
    /// counter, not the stack).
    fn nested(&mut self) -> Option<()> {
        let mut depth = 0usize;
        loop {
            match self.peek()? {
                b'"' => {
                    self.string_bytes()?;
                    continue;
                }
                b'{' | b'[' => depth += 1,
                b'}' | b']' => depth = depth.checked_sub(1)?,
                _ => {}
            }
            self.at += 1;
            if depth == 0 {
                return Some(());
            }
        }
    }
}

/// An `id` member's value as a request id (a number or a string; `null` too, as it is read
/// from a whole line); anything else is no id.
fn read_id(value: &[u8]) -> Option<RequestId> {
    let value: serde_json::Value = serde_json::from_slice(value).ok()?;
    RequestId::from_value(&value)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One row a case: the kept start of a line (the line goes on, too long, after it).
    #[test]
    fn the_id_is_read_from_the_top_level_members_only() {
        let request = |id| Head::Request(id);
        let int = RequestId::Int;
        let s = |v: &str| RequestId::Str(v.into());
        let rows: &[(&str, Head)] = &[
            (
                r#"{"jsonrpc":"2.0","id":7,"method":"session/prompt","params":{"x":"aaa"#,
                request(int(7)),
            ),
            (
                r#"{"jsonrpc":"2.0","id":"seven","method":"x","params":"#,
                request(s("seven")),
            ),
            (
                r#"{"jsonrpc":"2.0","method":"session/prompt","id":-3,"params":{"#,
                request(int(-3)),
            ),
            (
                r#"{ "method" : "x" , "id" : 18446744073709551615 , "params": ["#,
                request(RequestId::Uint(u64::MAX)),
            ),
            (
                r#"{"jsonrpc":"2.0","method":"x","id":null,"params":{"#,
                request(RequestId::Null),
            ),
            (
                r#"{"id":"a\"b\\","method":"x","params":{"#,
                request(s("a\"b\\")),
            ),
            (r#"{"\u0069d":5,"method":"x","params":{"#, request(int(5))),
            (
                r#"{"jsonrpc":"2.0","meta":{"id":1,"s":"}{\""},"method":"x","id":2,"params":"#,
                request(int(2)),
            ),
            (
                r#"{"jsonrpc":"2.0","tags":[1,[2,{"id":3}]],"id":4,"method":"x","#,
                request(int(4)),
            ),
            (
                r#"{"jsonrpc":"2.0","id":7,"result":{"content":"aaa"#,
                Head::Response(int(7)),
            ),
            (
                r#"{"jsonrpc":"2.0","error":{"code":1},"id":"r""#,
                Head::Response(s("r")),
            ),
            // The id comes after what was kept, or never: null.
            (
                r#"{"jsonrpc":"2.0","method":"session/prompt","params":{"id":7,"prompt":"aaa"#,
                Head::Unknown,
            ),
            (
                r#"{"jsonrpc":"2.0","method":"x","params":{"text":"aaa","#,
                Head::Unknown,
            ),
            (
                r#"{"jsonrpc":"2.0","id":7,"params":{"text":"aaa"#,
                Head::Unknown,
            ),
            (r#"{"jsonrpc":"2.0","id":"sev"#, Head::Unknown),
            (r#"{"jsonrpc":"2.0","id":12"#, Head::Unknown),
            // Not an id, not an object, not JSON.
            (r#"{"id":1.5,"method":"x","#, Head::Unknown),
            (r#"{"id":true,"method":"x","#, Head::Unknown),
            (r#"{"id":{"n":1},"method":"x","#, Head::Unknown),
            (r#"[{"id":1,"method":"x"}, {"#, Head::Unknown),
            (r#""id":1,"method":"x","#, Head::Unknown),
            (r#"{"id" 1,"method":"x","#, Head::Unknown),
            (r#"{"id":1 "method":"x","#, Head::Unknown),
            (r#"{"a":]]]],"id":1,"method":"x","#, Head::Unknown),
            (r#"{"id":1,"method":"x","result":1"#, request(int(1))),
            ("\u{feff}", Head::Unknown),
            ("", Head::Unknown),
        ];
        for (head, want) in rows {
            assert_eq!(&read_head(head.as_bytes()), want, "{head}");
        }
    }

    #[test]
    fn any_bytes_are_read_without_panicking() {
        let mut seed = 7u64;
        let alphabet = br#"{}[]":,\ idmethodresult0123-.e"#;
        for _ in 0..20_000 {
            let len = (seed % 40) as usize;
            let bytes: Vec<u8> = (0..len)
                .map(|_| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    alphabet[(seed >> 33) as usize % alphabet.len()]
                })
                .collect();
            let _ = read_head(&bytes);
        }
    }
}
