//! Which input lines a pass has committed, in memory that does not grow with
//! the input: a watermark (every line before it is done, and the byte offset
//! where its line starts) plus the ranges committed beyond it. Records finish
//! out of order (a slow request holds the watermark while others complete), so
//! the ranges are bounded by the number of gaps, not by the number of lines.
//! Plain data, no I/O.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Where one input line sits in its file; `number` is 1-based.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Line {
    pub number: u64,
    pub start: u64,
    /// Offset of the byte after the line's newline: where the next line starts.
    pub end: u64,
}

/// A run of committed lines `first..=last`; `end` is where the line after
/// `last` starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Span {
    pub first: u64,
    pub last: u64,
    pub end: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Cursor {
    /// The first line not committed yet (1-based).
    pub next: u64,
    /// Byte offset where line `next` starts.
    pub offset: u64,
    /// Committed lines after `next`, sorted, disjoint, not adjacent to each
    /// other or to the watermark.
    #[serde(default)]
    pub ahead: Vec<Span>,
}

impl Default for Cursor {
    fn default() -> Self {
        Cursor {
            next: 1,
            offset: 0,
            ahead: Vec::new(),
        }
    }
}

impl Cursor {
    /// Lines committed in all.
    pub fn committed(&self) -> u64 {
        self.next - 1 + self.ahead.iter().map(|s| s.last - s.first + 1).sum::<u64>()
    }

    pub fn contains(&self, number: u64) -> bool {
        number < self.next
            || self
                .ahead
                .binary_search_by(|s| {
                    if s.last < number {
                        std::cmp::Ordering::Less
                    } else if s.first > number {
                        std::cmp::Ordering::Greater
                    } else {
                        std::cmp::Ordering::Equal
                    }
                })
                .is_ok()
    }
}

/// A cursor being moved forward by a run, with the spans in a map so that
/// marking a line is logarithmic.
#[derive(Debug, Clone, Default)]
pub struct Progress {
    next: u64,
    offset: u64,
    ahead: BTreeMap<u64, (u64, u64)>,
}

impl Progress {
    pub fn new(cursor: &Cursor) -> Progress {
        Progress {
            next: cursor.next,
            offset: cursor.offset,
            ahead: cursor
                .ahead
                .iter()
                .map(|s| (s.first, (s.last, s.end)))
                .collect(),
        }
    }

    /// Marks `line` committed. Marking a line twice is a bug of the caller.
    pub fn mark(&mut self, line: Line) {
        debug_assert!(!self.snapshot().contains(line.number), "{line:?} twice");
        if line.number == self.next {
            self.next = line.number + 1;
            self.offset = line.end;
            // Swallow the span that now touches the watermark.
            if let Some((last, end)) = self.ahead.remove(&self.next) {
                self.next = last + 1;
                self.offset = end;
            }
            return;
        }
        let mut first = line.number;
        let (mut last, mut end) = (line.number, line.end);
        // Join the span just before, if it ends at line - 1.
        if let Some((&start, &(prev_last, _))) = self.ahead.range(..line.number).next_back() {
            if prev_last + 1 == line.number {
                self.ahead.remove(&start);
                first = start;
            }
        }
        // And the span just after, if it starts at line + 1.
        if let Some((next_last, next_end)) = self.ahead.remove(&(line.number + 1)) {
            last = next_last;
            end = next_end;
        }
        self.ahead.insert(first, (last, end));
    }

    pub fn snapshot(&self) -> Cursor {
        Cursor {
            next: self.next,
            offset: self.offset,
            ahead: self
                .ahead
                .iter()
                .map(|(&first, &(last, end))| Span { first, last, end })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(n: u64) -> Line {
        Line {
            number: n,
            start: (n - 1) * 10,
            end: n * 10,
        }
    }

    #[test]
    fn lines_in_order_move_the_watermark() {
        let mut p = Progress::new(&Cursor::default());
        for n in 1..=5 {
            p.mark(line(n));
        }
        let c = p.snapshot();
        assert_eq!((c.next, c.offset, c.ahead.len()), (6, 50, 0));
        assert_eq!(c.committed(), 5);
    }

    #[test]
    fn out_of_order_lines_make_spans_that_merge() {
        let mut p = Progress::new(&Cursor::default());
        for n in [3, 5, 4, 7] {
            p.mark(line(n));
        }
        let c = p.snapshot();
        assert_eq!(c.next, 1);
        assert_eq!(
            c.ahead,
            vec![
                Span {
                    first: 3,
                    last: 5,
                    end: 50
                },
                Span {
                    first: 7,
                    last: 7,
                    end: 70
                }
            ]
        );
        assert!(c.contains(4) && !c.contains(6) && !c.contains(1));
        p.mark(line(2));
        p.mark(line(1));
        let c = p.snapshot();
        assert_eq!((c.next, c.offset), (6, 50));
        p.mark(line(6));
        let c = p.snapshot();
        assert_eq!((c.next, c.offset, c.ahead.len()), (8, 70, 0));
        assert_eq!(c.committed(), 7);
    }

    #[test]
    fn a_random_order_ends_with_everything_below_the_watermark() {
        // A fixed permutation: 37 is coprime with 101. After each line the
        // cursor is held against a model of its own: the set of lines marked.
        let mut p = Progress::new(&Cursor::default());
        let mut marked = std::collections::BTreeSet::new();
        let mut max_spans = 0;
        for i in 0..101u64 {
            let n = (i * 37) % 101 + 1;
            p.mark(line(n));
            marked.insert(n);
            let c = p.snapshot();
            assert_eq!(c.committed(), i + 1);
            // The watermark is the first line not marked, at its start...
            let next = (1u64..).find(|k| !marked.contains(k)).unwrap();
            assert_eq!((c.next, c.offset), (next, (next - 1) * 10), "after {n}");
            // ...and the spans are exactly the runs of marked lines past it.
            let mut runs: Vec<Span> = Vec::new();
            for &m in marked.range(next + 1..) {
                match runs.last_mut() {
                    Some(s) if s.last + 1 == m => {
                        s.last = m;
                        s.end = m * 10;
                    }
                    _ => runs.push(Span {
                        first: m,
                        last: m,
                        end: m * 10,
                    }),
                }
            }
            assert_eq!(c.ahead, runs, "after {n}");
            for k in 1..=101 {
                assert_eq!(c.contains(k), marked.contains(&k), "line {k} after {n}");
            }
            max_spans = max_spans.max(runs.len());
        }
        let c = p.snapshot();
        assert_eq!((c.next, c.offset, c.ahead.len()), (102, 1010, 0));
        // This order leaves up to 30 gaps open at once: the spans are
        // bounded by the gaps, not by the lines.
        assert_eq!(max_spans, 30);
    }
}
