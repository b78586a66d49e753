//! Server-sent events, as OpenAI-compatible servers stream them: `data:` lines,
//! events separated by a blank line, `data: [DONE]` at the end. Bytes arrive in
//! arbitrary chunks, so the parser keeps what it has not finished.

/// Incremental SSE parser: feed chunks, take complete `data` payloads.
#[derive(Debug, Default)]
pub struct SseParser {
    buffer: Vec<u8>,
    data: Vec<String>,
}

/// One complete event's payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SseEvent {
    Data(String),
    Done,
}

impl SseParser {
    /// Feeds a chunk; returns the events it completed, in order. Invalid UTF-8
    /// in a line is an error: the body cannot be trusted.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Vec<SseEvent>, String> {
        self.buffer.extend_from_slice(chunk);
        let mut events = Vec::new();
        while let Some(end) = self.buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.buffer.drain(..=end).collect();
            let line = std::str::from_utf8(&line)
                .map_err(|_| "stream carried invalid UTF-8".to_string())?
                .trim_end_matches(['\n', '\r']);
            if line.is_empty() {
                if !self.data.is_empty() {
                    let payload = self.data.join("\n");
                    self.data.clear();
                    events.push(if payload.trim() == "[DONE]" {
                        SseEvent::Done
                    } else {
                        SseEvent::Data(payload)
                    });
                }
            } else if let Some(value) = line.strip_prefix("data:") {
                self.data
                    .push(value.strip_prefix(' ').unwrap_or(value).to_string());
            }
            // Comments (":"), "event:", "id:" and "retry:" lines carry nothing
            // the completion needs.
        }
        Ok(events)
    }

    /// Whatever a stream left unfinished when it ended: a last event without
    /// its blank line still counts.
    pub fn finish(&mut self) -> Option<SseEvent> {
        let rest = std::mem::take(&mut self.buffer);
        if let Ok(line) = std::str::from_utf8(&rest) {
            if let Some(value) = line.trim_end().strip_prefix("data:") {
                self.data.push(value.trim_start().to_string());
            }
        }
        if self.data.is_empty() {
            return None;
        }
        let payload = self.data.join("\n");
        self.data.clear();
        Some(if payload.trim() == "[DONE]" {
            SseEvent::Done
        } else {
            SseEvent::Data(payload)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_across_chunks_come_out_whole() {
        let mut p = SseParser::default();
        let stream = b"data: {\"a\":1}\n\n: keep-alive\n\ndata: {\"b\"\r\n\r\ndata: [DONE]\n\n";
        let mut events = Vec::new();
        for chunk in stream.chunks(3) {
            events.extend(p.feed(chunk).unwrap());
        }
        assert_eq!(
            events,
            vec![
                SseEvent::Data("{\"a\":1}".into()),
                SseEvent::Data("{\"b\"".into()),
                SseEvent::Done
            ]
        );
        assert_eq!(p.finish(), None);
    }

    #[test]
    fn a_last_event_without_its_blank_line_is_kept() {
        let mut p = SseParser::default();
        assert!(p.feed(b"data: {\"x\":2}").unwrap().is_empty());
        assert_eq!(p.finish(), Some(SseEvent::Data("{\"x\":2}".into())));
    }

    #[test]
    fn invalid_utf8_is_an_error() {
        let mut p = SseParser::default();
        assert!(p.feed(b"data: \xff\xfe\n\n").is_err());
    }
}
