//! A task's kind: `todo`, a plain task, or the name of a phase kind the
//! daemon runs itself. The phase kinds are listed in one table,
//! `phase::kinds`; the domain knows only that they are not `todo`, so a
//! kind is a short name, not an enum that would have to learn each one.
//!
//! The name is kept inline (a few bytes, `Copy`), so a kind read back from
//! the store needs no allocation and no registry: the API admits only the
//! table's kinds, and the store's `kinds` table (filled from the same
//! table) admits nothing else.
use std::fmt;
use std::str::FromStr;

/// The longest kind name.
pub const MAX_KIND_BYTES: usize = 24;

#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Kind {
    len: u8,
    bytes: [u8; MAX_KIND_BYTES],
}

/// Whether `name` may name a kind: a lowercase identifier (`[a-z][a-z0-9_]*`)
/// of at most [`MAX_KIND_BYTES`].
pub const fn is_kind_name(name: &str) -> bool {
    let b = name.as_bytes();
    if b.is_empty() || b.len() > MAX_KIND_BYTES || !b[0].is_ascii_lowercase() {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if !(b[i].is_ascii_lowercase() || b[i].is_ascii_digit() || b[i] == b'_') {
            return false;
        }
        i += 1;
    }
    true
}

impl Kind {
    /// A plain task: the only kind the daemon does not run.
    pub const TODO: Kind = Kind::named("todo");

    /// The kind called `name`; for the table of phase kinds, at compile
    /// time (a name that is not a kind name does not compile).
    pub const fn named(name: &str) -> Kind {
        assert!(is_kind_name(name), "not a kind name");
        let mut bytes = [0u8; MAX_KIND_BYTES];
        let b = name.as_bytes();
        let mut i = 0;
        while i < b.len() {
            bytes[i] = b[i];
            i += 1;
        }
        Kind {
            len: b.len() as u8,
            bytes,
        }
    }

    /// The kind called `name`, if it is a kind name at all (whether the
    /// daemon knows it is the table's to say).
    pub fn from_name(name: &str) -> Option<Kind> {
        is_kind_name(name).then(|| Kind::named(name))
    }

    pub fn as_str(&self) -> &str {
        // Only ASCII bytes are ever stored.
        std::str::from_utf8(&self.bytes[..self.len as usize]).unwrap_or("")
    }

    pub fn is_phase(self) -> bool {
        self != Kind::TODO
    }
}

impl PartialOrd for Kind {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Kind {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl FromStr for Kind {
    type Err = ();
    fn from_str(s: &str) -> Result<Kind, ()> {
        Kind::from_name(s).ok_or(())
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl fmt::Debug for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Kind({})", self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_is_its_name() {
        let g = Kind::named("generation");
        assert_eq!(g.as_str(), "generation");
        assert_eq!(g.to_string(), "generation");
        assert_eq!("generation".parse::<Kind>(), Ok(g));
        assert!(g.is_phase() && !Kind::TODO.is_phase());
        assert!(
            Kind::named("feasibility") < g && g < Kind::TODO,
            "ordered by name"
        );
        for bad in [
            "",
            "Generation",
            "gen-eration",
            "9x",
            "a".repeat(25).as_str(),
            "é",
        ] {
            assert!(Kind::from_name(bad).is_none(), "{bad}");
        }
        assert!(Kind::from_name(&"a".repeat(24)).is_some());
    }
}
