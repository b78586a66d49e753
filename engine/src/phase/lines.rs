//! Reading an input file line by line with bounded memory, and the survey a
//! pass makes of its input before the first record: how many lines, and
//! which lines repeat an earlier line's record id.
//!
//! Duplicates are found without a set of every id: a Bloom filter sized to
//! the file flags ids that may have been seen; a second read keeps exactly
//! those ids and tells true repeats from the filter's false alarms.
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::hash::{Hash, Hasher};
use std::io::{self, BufRead, BufReader, Seek, SeekFrom};
use std::path::Path;

use super::cursor::Line;
use super::files::{open_input, InputIdentity};

/// The longest prompt line a generation reads (and so an adaptation
/// writes): longer ones are rejected without being read.
pub const MAX_PROMPT_LINE_BYTES: usize = 1 << 20;

/// Reads lines of at most `limit` bytes; longer lines are reported as cut
/// (their first `limit` bytes kept) so that a 2 GB line costs no more memory
/// than a short one.
pub struct LineReader {
    reader: BufReader<File>,
    offset: u64,
    number: u64,
    limit: usize,
}

/// One line as read: its place, its bytes (without the newline and a CR
/// before it) and whether it was longer than the limit.
pub struct RawLine {
    pub line: Line,
    pub bytes: Vec<u8>,
    pub too_long: bool,
}

impl LineReader {
    /// Starts at byte `offset`, which is where line `number` begins.
    pub fn open(path: &Path, offset: u64, number: u64, limit: usize) -> io::Result<LineReader> {
        let mut file = open_input(path)?;
        file.seek(SeekFrom::Start(offset))?;
        Ok(LineReader {
            reader: BufReader::with_capacity(1 << 20, file),
            offset,
            number,
            limit,
        })
    }

    pub fn file(&self) -> &File {
        self.reader.get_ref()
    }

    /// The next line, or `None` at the end of the file.
    pub fn next_line(&mut self) -> io::Result<Option<RawLine>> {
        let mut bytes = Vec::new();
        let mut total = 0usize;
        let mut ended = false;
        loop {
            let buf = self.reader.fill_buf()?;
            if buf.is_empty() {
                break;
            }
            let (take, found) = match memchr::memchr(b'\n', buf) {
                Some(at) => (at + 1, true),
                None => (buf.len(), false),
            };
            let room = (self.limit + 1).saturating_sub(bytes.len());
            bytes.extend_from_slice(&buf[..take.min(room)]);
            total += take;
            self.reader.consume(take);
            if found {
                ended = true;
                break;
            }
        }
        if total == 0 {
            return Ok(None);
        }
        let start = self.offset;
        self.offset += total as u64;
        let number = self.number;
        self.number += 1;
        if ended && bytes.last() == Some(&b'\n') {
            bytes.pop();
        }
        let content = total - usize::from(ended);
        let too_long = content > self.limit;
        if too_long {
            bytes.truncate(self.limit);
        } else if bytes.last() == Some(&b'\r') {
            bytes.pop();
        }
        Ok(Some(RawLine {
            line: Line {
                number,
                start,
                end: self.offset,
            },
            bytes,
            too_long,
        }))
    }
}

/// What a survey found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Survey {
    pub identity: InputIdentity,
    pub lines: u64,
    /// Lines (1-based) whose id an earlier line already had, in order.
    pub duplicates: Vec<u64>,
}

fn id_hash(id: &str) -> u64 {
    // SipHash with fixed keys: the same on every run, well spread.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    id.hash(&mut hasher);
    hasher.finish()
}

/// A Bloom filter of 64-bit hashes (k probes derived by double hashing).
struct Bloom {
    bits: Vec<u64>,
    probes: u32,
}

impl Bloom {
    fn new(items: u64) -> Bloom {
        // 10 bits per item and 7 probes: about 1% false positives.
        let bits = (items.max(64) * 10).next_power_of_two();
        Bloom {
            bits: vec![0; (bits / 64) as usize],
            probes: 7,
        }
    }

    /// Sets the hash's bits; returns whether they were all set already.
    fn insert(&mut self, hash: u64) -> bool {
        let mask = self.bits.len() as u64 * 64 - 1;
        let (h1, h2) = (hash, hash.rotate_left(32) | 1);
        let mut seen = true;
        for i in 0..self.probes as u64 {
            let bit = h1.wrapping_add(i.wrapping_mul(h2)) & mask;
            let (word, bit) = ((bit / 64) as usize, bit % 64);
            seen &= self.bits[word] & (1 << bit) != 0;
            self.bits[word] |= 1 << bit;
        }
        seen
    }
}

/// How many lines a file has, as the reader numbers them (a last line
/// without its newline counts).
pub fn count_lines(path: &Path) -> io::Result<u64> {
    let mut lines = 0u64;
    let mut file = BufReader::with_capacity(1 << 20, open_input(path)?);
    let mut last = b'\n';
    loop {
        let buf = file.fill_buf()?;
        if buf.is_empty() {
            break;
        }
        lines += memchr::memchr_iter(b'\n', buf).count() as u64;
        last = buf[buf.len() - 1];
        let n = buf.len();
        file.consume(n);
    }
    if last != b'\n' {
        lines += 1; // a last line without its newline
    }
    Ok(lines)
}

/// Counts the lines of `path` and finds the lines whose id (`id_of`, given a
/// line's bytes and number; `None` for a line that has no id of its own) repeats an
/// earlier one. Reads the file two or three times; memory is about 1.25 bytes
/// per line plus the ids that collide in the filter.
pub fn survey(
    path: &Path,
    limit: usize,
    id_of: &(dyn Fn(&[u8], u64) -> Option<String> + Sync),
) -> io::Result<Survey> {
    let identity = InputIdentity::of(&open_input(path)?)?;
    let lines = count_lines(path)?;
    let mut bloom = Bloom::new(lines);
    let mut maybe: HashSet<u64> = HashSet::new();
    let mut reader = LineReader::open(path, 0, 1, limit)?;
    while let Some(raw) = reader.next_line()? {
        if raw.too_long {
            continue;
        }
        if let Some(id) = id_of(&raw.bytes, raw.line.number) {
            let hash = id_hash(&id);
            if bloom.insert(hash) {
                maybe.insert(hash);
            }
        }
    }
    let mut duplicates = Vec::new();
    if !maybe.is_empty() {
        let mut first: HashMap<String, u64> = HashMap::new();
        let mut reader = LineReader::open(path, 0, 1, limit)?;
        while let Some(raw) = reader.next_line()? {
            if raw.too_long {
                continue;
            }
            if let Some(id) = id_of(&raw.bytes, raw.line.number) {
                if maybe.contains(&id_hash(&id)) {
                    match first.entry(id) {
                        std::collections::hash_map::Entry::Occupied(_) => {
                            duplicates.push(raw.line.number)
                        }
                        std::collections::hash_map::Entry::Vacant(slot) => {
                            slot.insert(raw.line.number);
                        }
                    }
                }
            }
        }
    }
    Ok(Survey {
        identity,
        lines,
        duplicates,
    })
}

/// The value of one top-level field of a JSON object line, without building
/// the rest of the object. `None` if the line is not an object or lacks it.
pub fn json_field(line: &[u8], name: &str) -> Option<serde_json::Value> {
    use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, Visitor};
    struct Field<'a>(&'a str);
    impl<'de> DeserializeSeed<'de> for Field<'_> {
        type Value = Option<serde_json::Value>;
        fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_map(self)
        }
    }
    impl<'de> Visitor<'de> for Field<'_> {
        type Value = Option<serde_json::Value>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut found = None;
            while let Some(key) = map.next_key::<std::borrow::Cow<'de, str>>()? {
                if key == self.0 && found.is_none() {
                    found = Some(map.next_value::<serde_json::Value>()?);
                } else {
                    map.next_value::<IgnoredAny>()?;
                }
            }
            Ok(found)
        }
    }
    let mut de = serde_json::Deserializer::from_slice(line);
    Field(name).deserialize(&mut de).ok().flatten()
}

/// A line's text, or why it cannot be a record: not UTF-8, or blank.
pub fn line_text(bytes: &[u8]) -> Result<&str, String> {
    let text = std::str::from_utf8(bytes).map_err(|_| "not valid UTF-8".to_string())?;
    if text.trim().is_empty() {
        return Err("blank line".into());
    }
    Ok(text)
}

/// A line as a JSON object, or why it cannot be a record: the checks every
/// phase makes of its input lines.
pub fn json_object(bytes: &[u8]) -> Result<serde_json::Map<String, serde_json::Value>, String> {
    let value: serde_json::Value =
        serde_json::from_str(line_text(bytes)?).map_err(|e| format!("not JSON: {e}"))?;
    match value {
        serde_json::Value::Object(object) => Ok(object),
        _ => Err("not a JSON object".into()),
    }
}

/// A record's id: its `field` (a non-empty string or a number), else
/// `line-N` after the line's number.
pub fn record_id(
    object: &serde_json::Map<String, serde_json::Value>,
    field: &str,
    number: u64,
) -> Result<String, String> {
    match object.get(field) {
        None => Ok(format!("line-{number}")),
        Some(v) => id_text(v).ok_or_else(|| format!("{field} is {v}, not a string or number")),
    }
}

/// A record id as prompt sets carry it: a non-empty string or a number.
pub fn id_text(value: &serde_json::Value) -> Option<String> {
    match value {
        serde_json::Value::String(s) if !s.is_empty() => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, text: &[u8]) -> std::path::PathBuf {
        let path = dir.join("in.jsonl");
        std::fs::write(&path, text).unwrap();
        path
    }

    fn id_of(line: &[u8], _number: u64) -> Option<String> {
        json_field(line, "id").as_ref().and_then(id_text)
    }

    #[test]
    fn lines_keep_their_offsets_and_long_ones_are_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), b"ab\r\n\nxxxxxxxxxx\nlast");
        let mut r = LineReader::open(&path, 0, 1, 4).unwrap();
        let a = r.next_line().unwrap().unwrap();
        assert_eq!(
            (a.bytes.as_slice(), a.line.start, a.line.end),
            (&b"ab"[..], 0, 4)
        );
        let blank = r.next_line().unwrap().unwrap();
        assert!(blank.bytes.is_empty() && !blank.too_long);
        let long = r.next_line().unwrap().unwrap();
        assert!(long.too_long);
        assert_eq!(long.bytes.len(), 4);
        assert_eq!(long.line.end, 16);
        let last = r.next_line().unwrap().unwrap();
        assert_eq!(
            (last.bytes.as_slice(), last.line.number, last.line.end),
            (&b"last"[..], 4, 20)
        );
        assert!(r.next_line().unwrap().is_none());
        // Starting in the middle, as a resume does.
        let mut r = LineReader::open(&path, 16, 4, 100).unwrap();
        assert_eq!(r.next_line().unwrap().unwrap().bytes, b"last");
    }

    #[test]
    fn the_survey_counts_lines_and_finds_repeated_ids() {
        let dir = tempfile::tempdir().unwrap();
        let mut text = String::new();
        for i in 0..5000 {
            text.push_str(&format!(
                "{{\"id\": \"p{}\", \"x\": [1, {{\"id\": 0}}]}}\n",
                i % 4000
            ));
        }
        text.push_str("not json\n{\"id\": 7}\n{\"id\": 7}");
        let path = write(dir.path(), text.as_bytes());
        let s = survey(&path, 1 << 20, &id_of).unwrap();
        assert_eq!(s.lines, 5003);
        let expected: Vec<u64> = (4001..=5000).chain([5003]).collect();
        assert_eq!(s.duplicates, expected);
    }

    #[test]
    fn json_field_reads_one_field() {
        assert_eq!(
            json_field(br#"{"a": {"id": 1}, "id": "x"}"#, "id"),
            Some(serde_json::json!("x"))
        );
        assert_eq!(json_field(b"[1]", "id"), None);
        assert_eq!(json_field(b"{\"a\": 1}", "id"), None);
    }
}
