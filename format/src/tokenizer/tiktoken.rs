//! `tiktoken.model` + `tokenizer_config.json`, as Kimi K2's
//! `tokenization_kimi.py` (`TikTokenTokenizer`) runs them.
//!
//! What Kimi does on top of tiktoken, copied here:
//! * special tokens: ids `num_base .. num_base + 256 + 2`, where `num_base` is
//!   the number of ranks in `tiktoken.model`; an id named in
//!   `added_tokens_decoder` keeps that content (even a relative name such as
//!   `<|reserved_token_5|>`), any other is `<|reserved_token_{id}|>` with the
//!   absolute id. Every one of them is allowed in the text.
//! * the split pattern: the config's `pat_str` if present (not in K2's own
//!   config), else the one `tokenization_kimi.py` hard-codes.
//! * `encode` cuts the text into chunks of 400,000 code points, cuts runs of
//!   more than 25,000 whitespace or non-whitespace code points (Python's
//!   `str.isspace`), and tokenizes each piece on its own.
//!
//! The BPE itself is a port of tiktoken's `CoreBPE` (MIT, openai/tiktoken
//! `src/lib.rs`) with all specials allowed. It is ours rather than
//! `tiktoken-rs` because that crate's `encode` needs a fresh set of 258
//! allowed strings on every call, unwraps internally, panics on a model file
//! without all 256 single bytes, and embeds 8 MB of OpenAI vocabularies.
//! The regex engine is `fancy-regex` 0.19, the one Python tiktoken 0.14 uses.

use std::collections::BinaryHeap;
use std::ops::Range;
use std::path::Path;

use base64::Engine as _;
use fancy_regex::Regex;
use rustc_hash::FxHashMap;

use super::{Encoded, TokenizeError, Tokenizer};

/// `TikTokenTokenizer.pat_str` of `tokenization_kimi.py`.
pub(super) const KIMI_PAT_STR: &str = concat!(
    r"[\p{Han}]+",
    "|",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    "|",
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
    "|",
    r"\p{N}{1,3}",
    "|",
    r" ?[^\s\p{L}\p{N}]+[\r\n]*",
    "|",
    r"\s*[\r\n]+",
    "|",
    r"\s+(?!\S)",
    "|",
    r"\s+",
);

/// `num_reserved_special_tokens` plus the `+ 2` of the K2 file.
const SPECIAL_SLOTS: u32 = 256 + 2;
/// `TIKTOKEN_MAX_ENCODE_CHARS`: code points per chunk.
const MAX_ENCODE_CHARS: usize = 400_000;
/// `MAX_NO_WHITESPACES_CHARS`: the longest run of whitespace or of
/// non-whitespace code points kept in one piece.
const MAX_RUN_CHARS: usize = 25_000;

pub(super) struct Tiktoken {
    encoder: FxHashMap<Vec<u8>, u32>,
    specials: FxHashMap<String, u32>,
    /// Decoded byte length of each id, for offsets.
    token_len: Vec<u32>,
    regex: Regex,
    /// An alternation of all the specials, longest first.
    special_regex: Regex,
}

impl Tiktoken {
    /// `model` is the content of `tiktoken.model`; `named` is
    /// `added_tokens_decoder` as `(id, content)`; `pat_str` the config's.
    pub(super) fn from_model(
        model_path: &Path,
        model: &[u8],
        config_path: &Path,
        named: &[(u32, String)],
        pat_str: Option<&str>,
    ) -> Result<Self, TokenizeError> {
        let invalid = |path: &Path, message: String| TokenizeError::Invalid {
            path: path.to_path_buf(),
            message,
        };
        let encoder = parse_ranks(model).map_err(|m| invalid(model_path, m))?;
        // tiktoken indexes single bytes without a check; a model without all
        // of them would panic on text that needs one.
        if let Some(b) = (0..=255u8).find(|b| !encoder.contains_key(&[*b][..])) {
            return Err(invalid(
                model_path,
                format!("byte 0x{b:02x} has no rank: not a byte-level BPE"),
            ));
        }
        let mut max_rank = 0;
        let mut seen = FxHashMap::default();
        for (bytes, &rank) in &encoder {
            if let Some(other) = seen.insert(rank, bytes) {
                return Err(invalid(
                    model_path,
                    format!("rank {rank} is given to both {other:?} and {bytes:?}"),
                ));
            }
            max_rank = max_rank.max(rank);
        }

        let num_base = u32::try_from(encoder.len())
            .map_err(|_| invalid(model_path, "too many ranks".to_string()))?;
        let named: FxHashMap<u32, &str> = named.iter().map(|(i, s)| (*i, s.as_str())).collect();
        let mut specials = FxHashMap::default();
        for id in num_base..num_base + SPECIAL_SLOTS {
            let content = match named.get(&id) {
                Some(s) => (*s).to_string(),
                None => format!("<|reserved_token_{id}|>"),
            };
            // An empty special would match everywhere and never advance.
            if content.is_empty() {
                return Err(invalid(config_path, format!("special token {id} is empty")));
            }
            if seen.contains_key(&id) {
                return Err(invalid(
                    model_path,
                    format!("special token id {id} is also a rank (ranks are not 0..{num_base})"),
                ));
            }
            // As the dict comprehension in Kimi's code: on a repeated content,
            // the later id wins.
            specials.insert(content, id);
        }

        let vocab_size = max_rank.max(num_base + SPECIAL_SLOTS - 1) as usize + 1;
        let mut token_len = vec![0u32; vocab_size];
        for (bytes, &rank) in &encoder {
            token_len[rank as usize] = bytes.len() as u32;
        }
        for (content, &id) in &specials {
            token_len[id as usize] = content.len() as u32;
        }

        let pattern = pat_str.unwrap_or(KIMI_PAT_STR);
        let regex = Regex::new(pattern)
            .map_err(|e| invalid(config_path, format!("pat_str does not compile: {e}")))?;
        // tiktoken joins the specials in hash-map order, which only matters
        // when one special is a prefix of another; longest first makes that
        // case deterministic (and is what HF's added-token matcher does).
        let mut alternatives: Vec<&str> = specials.keys().map(String::as_str).collect();
        alternatives.sort_by(|a, b| b.len().cmp(&a.len()).then(a.cmp(b)));
        let alternatives: Vec<String> = alternatives
            .into_iter()
            .map(fancy_regex::escape)
            .map(Into::into)
            .collect();
        let special_regex = Regex::new(&alternatives.join("|"))
            .map_err(|e| invalid(config_path, format!("special tokens do not compile: {e}")))?;

        Ok(Self {
            encoder,
            specials,
            token_len,
            regex,
            special_regex,
        })
    }

    /// tiktoken's `encode(text, allowed_special="all")`, into `ids`.
    fn encode_piece(&self, text: &str, ids: &mut Vec<u32>) -> Result<(), TokenizeError> {
        let mut start = 0;
        loop {
            let special = self
                .special_regex
                .find_from_pos(text, start)
                .map_err(regex_error)?;
            let end = special.map_or(text.len(), |m| m.start());
            // The pattern runs on the text between two specials on its own,
            // as in tiktoken: a lookahead at its end sees the end of input.
            for m in self.regex.find_iter(&text[start..end]) {
                let piece = m.map_err(regex_error)?.as_str().as_bytes();
                match self.encoder.get(piece) {
                    Some(&id) => ids.push(id),
                    // Only a custom pat_str can match empty; there is nothing
                    // to encode then (tiktoken would underflow).
                    None if piece.is_empty() => {}
                    None => byte_pair_encode(piece, &self.encoder, ids),
                }
            }
            match special {
                Some(m) => {
                    // The special regex only matches keys of `specials`.
                    ids.push(self.specials[m.as_str()]);
                    start = m.end();
                }
                None => return Ok(()),
            }
        }
    }
}

impl Tokenizer for Tiktoken {
    fn encode(&self, text: &str, offsets: bool) -> Result<Encoded, TokenizeError> {
        let mut ids = Vec::with_capacity(text.len() / 3);
        // A text of at most MAX_RUN_CHARS bytes has at most that many code
        // points, so Kimi's chunking leaves it whole: skip the scan.
        if text.len() <= MAX_RUN_CHARS {
            self.encode_piece(text, &mut ids)?;
        } else {
            for range in kimi_pieces(text, MAX_ENCODE_CHARS, MAX_RUN_CHARS) {
                self.encode_piece(&text[range], &mut ids)?;
            }
        }
        let offsets = if offsets {
            let mut pos = 0;
            ids.iter()
                .map(|&id| {
                    let start = pos;
                    pos += self.token_len[id as usize] as usize;
                    (start, pos)
                })
                .collect()
        } else {
            Vec::new()
        };
        Ok(Encoded { ids, offsets })
    }

    fn vocab_size(&self) -> usize {
        // One slot per id up to the highest: tiktoken's `n_vocab`.
        self.token_len.len()
    }

    fn token_id(&self, token: &str) -> Option<u32> {
        self.specials
            .get(token)
            .or_else(|| self.encoder.get(token.as_bytes()))
            .copied()
    }

    fn kind(&self) -> &'static str {
        "tiktoken"
    }
}

fn regex_error(e: fancy_regex::Error) -> TokenizeError {
    TokenizeError::Encode(format!("regex: {e}"))
}

/// `load_tiktoken_bpe`: a `base64(token) rank` pair per line, blank lines
/// skipped.
fn parse_ranks(model: &[u8]) -> Result<FxHashMap<Vec<u8>, u32>, String> {
    let mut encoder = FxHashMap::default();
    for (n, line) in model.split(|&b| b == b'\n' || b == b'\r').enumerate() {
        let mut fields = line
            .split(|b| b.is_ascii_whitespace())
            .filter(|f| !f.is_empty());
        let (token, rank) = match (fields.next(), fields.next(), fields.next()) {
            (None, _, _) => continue,
            (Some(token), Some(rank), None) => (token, rank),
            _ => return Err(format!("line {}: expected `base64-token rank`", n + 1)),
        };
        let token = base64::engine::general_purpose::STANDARD
            .decode(token)
            .map_err(|e| format!("line {}: bad base64: {e}", n + 1))?;
        let rank = std::str::from_utf8(rank)
            .ok()
            .and_then(|r| r.parse::<u32>().ok())
            .ok_or_else(|| format!("line {}: bad rank", n + 1))?;
        if encoder.insert(token, rank).is_some() {
            return Err(format!("line {}: token listed twice", n + 1));
        }
    }
    Ok(encoder)
}

/// Python's `str.isspace()`: Unicode White_Space plus U+001C..U+001F (which
/// Python counts as whitespace by their bidirectional class, and Rust's
/// `char::is_whitespace` does not).
fn py_isspace(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// Byte ranges of the pieces Kimi's `encode` tokenizes one by one: chunks of
/// `max_chunk` code points at fixed positions, each cut further by
/// `_split_whitespaces_or_nonwhitespaces(chunk, max_run)`, which ends a piece
/// when a run of whitespace or of non-whitespace would exceed `max_run`.
/// Pieces keep mixed content otherwise: only over-long runs are cut.
fn kimi_pieces(text: &str, max_chunk: usize, max_run: usize) -> Vec<Range<usize>> {
    let mut pieces = Vec::new();
    let mut piece_start = 0;
    let mut in_chunk = 0;
    let mut run_len = 0;
    let mut run_is_space = false;
    for (i, c) in text.char_indices() {
        if in_chunk == max_chunk {
            pieces.push(piece_start..i);
            piece_start = i;
            in_chunk = 0;
        }
        let is_space = py_isspace(c);
        if in_chunk == 0 {
            // Each chunk starts its own count, as the Python is called anew.
            run_is_space = is_space;
            run_len = 0;
        }
        if is_space != run_is_space {
            run_is_space = is_space;
            run_len = 1;
        } else {
            run_len += 1;
            if run_len > max_run {
                pieces.push(piece_start..i);
                piece_start = i;
                run_len = 1;
            }
        }
        in_chunk += 1;
    }
    if piece_start < text.len() {
        pieces.push(piece_start..text.len());
    }
    pieces
}

/// tiktoken's `byte_pair_encode` for a piece that is not itself a token,
/// appended to `out`. Every part it ends with is a single byte or a merge
/// found in `ranks`, and every single byte has a rank (checked at load), so
/// the lookups cannot fail.
fn byte_pair_encode(piece: &[u8], ranks: &FxHashMap<Vec<u8>, u32>, out: &mut Vec<u32>) {
    if piece.len() < 100 {
        let parts = byte_pair_merge(ranks, piece);
        out.extend(parts.windows(2).map(|w| ranks[&piece[w[0].0..w[1].0]]));
    } else {
        byte_pair_merge_large(ranks, piece, out);
    }
}

/// tiktoken's `_byte_pair_merge`: repeatedly merge the adjacent pair of
/// lowest rank (leftmost on ties). Returns `(start, rank of the pair that
/// starts here)` per part, plus an end sentinel. O(n·m), fast for the short
/// pieces almost all text is made of.
fn byte_pair_merge(ranks: &FxHashMap<Vec<u8>, u32>, piece: &[u8]) -> Vec<(usize, u32)> {
    let rank_of = |bytes: &[u8]| ranks.get(bytes).copied().unwrap_or(u32::MAX);
    let mut parts = Vec::with_capacity(piece.len() + 1);
    let mut min_rank = (u32::MAX, usize::MAX);
    for i in 0..piece.len() - 1 {
        let rank = rank_of(&piece[i..i + 2]);
        if rank < min_rank.0 {
            min_rank = (rank, i);
        }
        parts.push((i, rank));
    }
    parts.push((piece.len() - 1, u32::MAX));
    parts.push((piece.len(), u32::MAX));

    // The rank of merging part i with part i+1, read before part i+1 is
    // removed (hence i + 3).
    let get_rank = |parts: &[(usize, u32)], i: usize| {
        if i + 3 < parts.len() {
            rank_of(&piece[parts[i].0..parts[i + 3].0])
        } else {
            u32::MAX
        }
    };
    while min_rank.0 != u32::MAX {
        let i = min_rank.1;
        if i > 0 {
            parts[i - 1].1 = get_rank(&parts, i - 1);
        }
        parts[i].1 = get_rank(&parts, i);
        parts.remove(i + 1);

        min_rank = (u32::MAX, usize::MAX);
        for (i, &(_, rank)) in parts[..parts.len() - 1].iter().enumerate() {
            if rank < min_rank.0 {
                min_rank = (rank, i);
            }
        }
    }
    parts
}

/// A candidate merge of the part at `start` with the next one.
#[derive(PartialEq, Eq)]
struct Merge {
    start: usize,
    rank: u32,
}

impl Ord for Merge {
    /// `BinaryHeap` pops the greatest: make that the lowest rank, then the
    /// leftmost, the order `byte_pair_merge` merges in.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other
            .rank
            .cmp(&self.rank)
            .then_with(|| other.start.cmp(&self.start))
    }
}

impl PartialOrd for Merge {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// One part of a piece being merged, indexed by its start byte.
struct Part {
    prev: usize,
    end: usize,
    /// End of the next part, i.e. of the candidate merge with it.
    next_end: usize,
    /// Rank of that candidate merge, `u32::MAX` if none or invalidated.
    next_rank: u32,
    /// Rank of this part as a token, `u32::MAX` while it is a single byte.
    cur_rank: u32,
}

/// The same merges as `byte_pair_merge` with a heap, O(m log n), for long
/// pieces (tiktoken's `_byte_pair_merge_large`, used from 100 bytes on).
fn byte_pair_merge_large(ranks: &FxHashMap<Vec<u8>, u32>, piece: &[u8], out: &mut Vec<u32>) {
    let mut parts = Vec::with_capacity(piece.len());
    parts.push(Part {
        prev: usize::MAX,
        end: 1,
        next_end: 2,
        next_rank: u32::MAX,
        cur_rank: u32::MAX,
    });
    let mut heap = BinaryHeap::with_capacity(piece.len());
    for i in 0..piece.len() - 1 {
        if let Some(&rank) = ranks.get(&piece[i..i + 2]) {
            heap.push(Merge { start: i, rank });
            parts[i].next_rank = rank;
        }
        parts.push(Part {
            prev: i,
            end: i + 2,
            next_end: i + 3,
            next_rank: u32::MAX,
            cur_rank: u32::MAX,
        });
    }

    // Set the candidate merge of the part at `start` to end at `next_end`
    // (invalidating the one it had), and queue it if it is a token.
    let potential_merge =
        |parts: &mut [Part], heap: &mut BinaryHeap<Merge>, start: usize, next_end: usize| {
            parts[start].next_end = next_end;
            parts[start].next_rank = u32::MAX;
            if next_end <= piece.len() {
                if let Some(&rank) = ranks.get(&piece[start..next_end]) {
                    heap.push(Merge { start, rank });
                    parts[start].next_rank = rank;
                }
            }
        };

    while let Some(left) = heap.pop() {
        if left.rank == u32::MAX {
            break;
        }
        // Stale: the part it was queued for has changed since.
        if left.rank != parts[left.start].next_rank {
            continue;
        }
        let left_start = left.start;
        let right_start = parts[left_start].end;
        let right_end = parts[left_start].next_end;
        let right_next_end = parts[right_start].next_end;

        parts[left_start].cur_rank = parts[left_start].next_rank;
        parts[left_start].end = right_end;
        potential_merge(&mut parts, &mut heap, left_start, right_next_end);
        if right_end < parts.len() {
            parts[right_end].prev = left_start;
        }
        if left_start > 0 {
            let prev_start = parts[left_start].prev;
            potential_merge(&mut parts, &mut heap, prev_start, right_end);
        }
        parts[right_start].next_rank = u32::MAX;
    }

    let mut i = 0;
    while i < parts.len() {
        out.push(if parts[i].cur_rank != u32::MAX {
            parts[i].cur_rank
        } else {
            ranks[&piece[i..parts[i].end]]
        });
        i = parts[i].end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every code point for which Python 3.11's `str.isspace()` is true.
    const PYTHON_ISSPACE: [u32; 29] = [
        0x9, 0xA, 0xB, 0xC, 0xD, 0x1C, 0x1D, 0x1E, 0x1F, 0x20, 0x85, 0xA0, 0x1680, 0x2000, 0x2001,
        0x2002, 0x2003, 0x2004, 0x2005, 0x2006, 0x2007, 0x2008, 0x2009, 0x200A, 0x2028, 0x2029,
        0x202F, 0x205F, 0x3000,
    ];

    #[test]
    fn isspace_is_pythons_over_all_code_points() {
        for c in (0..=0x10FFFFu32).filter_map(char::from_u32) {
            assert_eq!(
                py_isspace(c),
                PYTHON_ISSPACE.contains(&(c as u32)),
                "U+{:04X}",
                c as u32
            );
        }
    }

    /// The pieces as strings, for readable asserts.
    fn pieces(text: &str, max_chunk: usize, max_run: usize) -> Vec<&str> {
        kimi_pieces(text, max_chunk, max_run)
            .into_iter()
            .map(|r| &text[r])
            .collect()
    }

    #[test]
    fn runs_are_cut_when_they_exceed_the_limit() {
        assert_eq!(pieces("", 10, 3), Vec::<&str>::new());
        assert_eq!(pieces("aaa", 10, 3), ["aaa"]);
        assert_eq!(pieces("aaaa", 10, 3), ["aaa", "a"]);
        assert_eq!(pieces("aaaaaaa", 10, 3), ["aaa", "aaa", "a"]);
        // Runs alternate without a cut; a piece keeps both kinds.
        assert_eq!(pieces("aaa   bbb", 10, 3), ["aaa   bbb"]);
        assert_eq!(pieces("ab    c", 10, 3), ["ab   ", " c"]);
        // U+001F counts as whitespace (Python), U+200B does not.
        assert_eq!(
            pieces("x\u{1f}\u{1f}\u{1f}\u{1f}", 10, 3),
            ["x\u{1f}\u{1f}\u{1f}", "\u{1f}"]
        );
        assert_eq!(
            pieces("\u{200b}\u{200b}\u{200b}\u{200b}", 10, 3),
            ["\u{200b}\u{200b}\u{200b}", "\u{200b}"]
        );
    }

    #[test]
    fn chunks_are_code_points_at_fixed_positions() {
        // 5-code-point chunks of multi-byte characters.
        assert_eq!(pieces("éééééééééééé", 5, 100), ["ééééé", "ééééé", "éé"]);
        assert_eq!(pieces("ab cd", 5, 100), ["ab cd"]);
        assert_eq!(pieces("ab cdE", 5, 100), ["ab cd", "E"]);
        // The run count restarts with each chunk: 4 + 4 a's would be a run of
        // 8 > 6, but the chunk boundary resets it.
        assert_eq!(pieces("aaaaaaaa", 4, 6), ["aaaa", "aaaa"]);
        // Within a chunk the run is cut; the cut piece ends at the chunk.
        assert_eq!(pieces("aaaaaaaaaa", 8, 3), ["aaa", "aaa", "aa", "aa"]);
    }

    #[test]
    fn large_merge_agrees_with_small_merge() {
        let mut ranks: FxHashMap<Vec<u8>, u32> =
            (0..=255u8).map(|b| (vec![b], u32::from(b))).collect();
        for (i, t) in ["ab", "aa", "aaaa", "ba", "abab", "aab", "bb", "aabb"]
            .iter()
            .enumerate()
        {
            ranks.insert(t.as_bytes().to_vec(), 256 + i as u32);
        }
        let piece: Vec<u8> = "aabababbbaaaabbaab".bytes().cycle().take(400).collect();
        let small: Vec<u32> = byte_pair_merge(&ranks, &piece)
            .windows(2)
            .map(|w| ranks[&piece[w[0].0..w[1].0]])
            .collect();
        let mut large = Vec::new();
        byte_pair_merge_large(&ranks, &piece, &mut large);
        assert_eq!(small, large);
    }

    #[test]
    fn bad_model_files_are_errors_not_panics() {
        let p = Path::new("m");
        let b64 = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
        let full: String = (0..=255u8)
            .map(|b| format!("{} {b}\n", b64(&[b])))
            .collect();
        assert!(Tiktoken::from_model(p, full.as_bytes(), p, &[], None).is_ok());
        let missing: String = (0..=254u8)
            .map(|b| format!("{} {b}\n", b64(&[b])))
            .collect();
        assert!(Tiktoken::from_model(p, missing.as_bytes(), p, &[], None).is_err());
        let dup_rank = format!("{full}{} 3\n", b64(b"ab"));
        assert!(Tiktoken::from_model(p, dup_rank.as_bytes(), p, &[], None).is_err());
        assert!(Tiktoken::from_model(p, b"QQ== 1 2\n", p, &[], None).is_err());
        let empty_special = [(256, String::new())];
        assert!(Tiktoken::from_model(p, full.as_bytes(), p, &empty_special, None).is_err());
        // A rank where the specials start.
        let collide = format!("{full}{} 256\n{} 258\n", b64(b"ab"), b64(b"cd"));
        assert!(Tiktoken::from_model(p, collide.as_bytes(), p, &[], None).is_err());
    }
}
