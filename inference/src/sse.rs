//! Server-sent events, as OpenAI-compatible servers stream them: `data:` lines,
//! events separated by a blank line, `data: [DONE]` at the end. Bytes arrive in
//! arbitrary chunks, so the parser keeps what it has not finished.
//!
//! Linear in the bytes it is fed: each byte is scanned once for a line end
//! (LF, CRLF or a lone CR, as the SSE grammar allows). Lines are read from
//! the chunk itself; only a line a chunk leaves unfinished is kept, and the
//! buffer is compacted at most once per chunk. What it holds of one event is
//! bounded.

/// The most an unfinished line plus the event around it may hold.
pub const MAX_EVENT_BYTES: usize = 32 << 20;

/// Incremental SSE parser: feed chunks, take complete `data` payloads.
#[derive(Debug, Default)]
pub struct SseParser {
    /// What the last chunk left unfinished: the start of a line.
    buffer: Vec<u8>,
    event: EventState,
}

/// The event being read, apart from the bytes, so that lines can be read
/// from a chunk or from the buffer alike.
#[derive(Debug, Default)]
struct EventState {
    /// The data lines of the event being read, joined by newlines.
    data: String,
    has_data: bool,
    /// The previous chunk ended with CR: an LF at the start of this one
    /// belongs to that line end.
    after_cr: bool,
}

/// One complete event's payload, borrowed from the parser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SsePayload<'a> {
    Data(&'a str),
    Done,
}

impl<'a> SsePayload<'a> {
    fn of(payload: &'a str) -> SsePayload<'a> {
        if payload.trim() == "[DONE]" {
            SsePayload::Done
        } else {
            SsePayload::Data(payload)
        }
    }
}

impl SseParser {
    /// Feeds a chunk and hands each event it completes to `each`, borrowed:
    /// a stream of a thousand tokens is a thousand events, and this path
    /// allocates nothing per event (an event's data lines are copied into
    /// one reused string) and, when the last chunk ended on a line end (as
    /// servers send them), does not copy the chunk into the buffer. `each`
    /// returns true to stop (the stream is done); the parser is then spent.
    /// Invalid UTF-8 in a line is an error (the body cannot be trusted), and
    /// goes through `malformed`.
    pub fn feed_each<E>(
        &mut self,
        chunk: &[u8],
        malformed: impl Fn(String) -> E,
        mut each: impl FnMut(SsePayload<'_>) -> Result<bool, E>,
    ) -> Result<bool, E> {
        if chunk.is_empty() {
            // Nothing to read, and an LF owed to a CR may still come.
            return Ok(false);
        }
        let mut chunk = chunk;
        if self.event.after_cr && chunk.first() == Some(&b'\n') {
            chunk = &chunk[1..];
        }
        self.event.after_cr = false;
        if self.buffer.is_empty() {
            let (rest, stop) = self.event.lines(chunk, 0, &malformed, &mut each)?;
            if stop {
                return Ok(true);
            }
            self.buffer.extend_from_slice(&chunk[rest..]);
        } else {
            let scan_from = self.buffer.len();
            self.buffer.extend_from_slice(chunk);
            let (rest, stop) = self
                .event
                .lines(&self.buffer, scan_from, &malformed, &mut each)?;
            if stop {
                return Ok(true);
            }
            self.buffer.drain(..rest);
        }
        if self.buffer.len() + self.event.data.len() > MAX_EVENT_BYTES {
            return Err(malformed(format!(
                "a stream event is over {MAX_EVENT_BYTES} bytes; the stream is not what an \
                 OpenAI-compatible server sends"
            )));
        }
        Ok(false)
    }

    /// Whatever a stream left unfinished when it ended: a last event without
    /// its blank line still counts. The parser is then spent.
    pub fn finish(&mut self) -> Option<SsePayload<'_>> {
        let rest = std::mem::take(&mut self.buffer);
        let event = &mut self.event;
        if let Ok(line) = std::str::from_utf8(&rest) {
            if let Some(value) = line.trim_end().strip_prefix("data:") {
                if event.has_data {
                    event.data.push('\n');
                }
                event.data.push_str(value.trim_start());
                event.has_data = true;
            }
        }
        std::mem::take(&mut event.has_data).then(|| SsePayload::of(&event.data))
    }
}

impl EventState {
    /// Reads the lines of `bytes`, whose line ends are searched from
    /// `scan_from` (the bytes before it were searched before), handing each
    /// event completed to `each`. Returns where the unfinished line starts,
    /// and whether `each` said stop.
    fn lines<E>(
        &mut self,
        bytes: &[u8],
        scan_from: usize,
        malformed: &impl Fn(String) -> E,
        each: &mut impl FnMut(SsePayload<'_>) -> Result<bool, E>,
    ) -> Result<(usize, bool), E> {
        let mut line_start = 0;
        let mut at = scan_from;
        while let Some(offset) = memchr::memchr2(b'\n', b'\r', &bytes[at..]) {
            let end = at + offset;
            let next = match bytes[end] {
                b'\r' if end + 1 == bytes.len() => {
                    // Perhaps the first half of CRLF: the next chunk says.
                    self.after_cr = true;
                    end + 1
                }
                b'\r' if bytes[end + 1] == b'\n' => end + 2,
                _ => end + 1,
            };
            let line = std::str::from_utf8(&bytes[line_start..end])
                .map_err(|_| malformed("stream carried invalid UTF-8".to_string()))?;
            line_start = next;
            at = next;
            if self.line(line) {
                let stop = each(SsePayload::of(&self.data))?;
                self.data.clear();
                if stop {
                    return Ok((line_start, true));
                }
            }
        }
        Ok((line_start, false))
    }

    /// Takes one line; true if it is the blank line that completes an event.
    fn line(&mut self, line: &str) -> bool {
        if line.is_empty() {
            if self.has_data {
                self.has_data = false;
                return true;
            }
        } else if let Some(value) = line.strip_prefix("data:") {
            let value = value.strip_prefix(' ').unwrap_or(value);
            if self.has_data {
                self.data.push('\n');
            }
            self.data.push_str(value);
            self.has_data = true;
        }
        // Comments (":"), "event:", "id:" and "retry:" lines carry nothing
        // the completion needs.
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An event, owned, to compare.
    #[derive(Debug, Clone, PartialEq, Eq)]
    enum SseEvent {
        Data(String),
        Done,
    }

    fn owned(payload: SsePayload<'_>) -> SseEvent {
        match payload {
            SsePayload::Data(data) => SseEvent::Data(data.to_string()),
            SsePayload::Done => SseEvent::Done,
        }
    }

    impl SseParser {
        /// The events a chunk completes, in order.
        fn feed(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, String> {
            let mut events = Vec::new();
            self.feed_each(chunk, std::convert::identity, |payload| {
                events.push(owned(payload));
                Ok::<_, String>(false)
            })?;
            Ok(events)
        }
    }

    fn all(stream: &[u8], chunk: usize) -> Vec<SseEvent> {
        let mut p = SseParser::default();
        let mut events = Vec::new();
        for part in stream.chunks(chunk) {
            events.extend(p.feed(part).unwrap());
        }
        events.extend(p.finish().map(owned));
        events
    }

    #[test]
    fn events_split_across_chunks_come_out_whole() {
        let stream = b"data: {\"a\":1}\n\n: keep-alive\n\ndata: {\"b\"\r\n\r\ndata: [DONE]\n\n";
        let want = vec![
            SseEvent::Data("{\"a\":1}".into()),
            SseEvent::Data("{\"b\"".into()),
            SseEvent::Done,
        ];
        for size in 1..stream.len() {
            assert_eq!(all(stream, size), want, "chunks of {size}");
        }
    }

    #[test]
    fn cr_only_line_ends_are_line_ends() {
        let stream = b"data: x\r\rdata: y\r\n\r\ndata: z\rdata: w\r\r";
        let want = vec![
            SseEvent::Data("x".into()),
            SseEvent::Data("y".into()),
            SseEvent::Data("z\nw".into()),
        ];
        for size in 1..stream.len() {
            assert_eq!(all(stream, size), want, "chunks of {size}");
        }
    }

    #[test]
    fn an_empty_chunk_between_cr_and_lf_leaves_them_one_line_end() {
        let mut p = SseParser::default();
        let mut events = p.feed(b"data: a\r").unwrap();
        events.extend(p.feed(b"").unwrap());
        events.extend(p.feed(b"\ndata: b\r\n\r\n").unwrap());
        assert_eq!(events, vec![SseEvent::Data("a\nb".into())]);
    }

    #[test]
    fn a_last_event_without_its_blank_line_is_kept() {
        let mut p = SseParser::default();
        assert!(p.feed(b"data: {\"x\":2}").unwrap().is_empty());
        assert_eq!(
            p.finish().map(owned),
            Some(SseEvent::Data("{\"x\":2}".into()))
        );
    }

    #[test]
    fn invalid_utf8_is_an_error() {
        let mut p = SseParser::default();
        assert!(p.feed(b"data: \xff\xfe\n\n").is_err());
    }

    #[test]
    fn an_endless_line_is_refused() {
        let mut p = SseParser::default();
        let chunk = vec![b'x'; 1 << 20];
        let mut refused = false;
        for _ in 0..40 {
            if p.feed(&chunk).is_err() {
                refused = true;
                break;
            }
        }
        assert!(refused);
    }

    #[test]
    fn one_byte_chunks_of_a_long_event() {
        let mut stream = b"data: ".to_vec();
        stream.extend(std::iter::repeat_n(b'y', 100_000));
        stream.extend_from_slice(b"\n\n");
        let events = all(&stream, 1);
        assert_eq!(events, vec![SseEvent::Data("y".repeat(100_000))]);
    }
}
