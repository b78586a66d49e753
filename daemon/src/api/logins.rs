//! One-time logins to the status page and the sessions they open: minted
//! by the API (`OpenPage`), spent and checked by the page (`http::status_page`).
//!
//! Whoever may call the API may open the page: `todoctl open` asks the
//! daemon (over the API, so with its token or on its private socket) for a
//! code, and the browser that brings it to `/login` gets a session cookie.
//! A code works once and for a few minutes, so a URL left in a shell's
//! history or a browser's is worth nothing later; sessions live in the
//! daemon's memory and end with it (a new `todoctl open` after a restart).
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a login code may wait for its browser.
pub const CODE_TTL: Duration = Duration::from_secs(300);
/// How long a session lasts.
pub const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);
/// Codes or sessions held at most; the oldest go first (a client that asks
/// for codes in a loop fills no memory).
const MAX_HELD: usize = 1024;

/// `text` safe in a URL's path segment or query string.
pub fn percent_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The name of the session cookie.
pub const COOKIE: &str = "todod_session";

#[derive(Default)]
pub struct Logins {
    held: Mutex<Held>,
}

#[derive(Default)]
struct Held {
    /// Code → when it expires.
    codes: HashMap<String, Instant>,
    /// Session → when it expires.
    sessions: HashMap<String, Instant>,
}

impl std::fmt::Debug for Logins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Logins { .. }")
    }
}

/// A random token of 32 bytes, in hex, from the operating system's CSPRNG.
fn token() -> String {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).expect("the operating system's random source is available");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn prune(map: &mut HashMap<String, Instant>, now: Instant) {
    map.retain(|_, expires| *expires > now);
    while map.len() >= MAX_HELD {
        let oldest = map
            .iter()
            .min_by_key(|(_, expires)| **expires)
            .map(|(k, _)| k.clone());
        match oldest {
            Some(key) => map.remove(&key),
            None => break,
        };
    }
}

impl Logins {
    /// A fresh one-time code, valid for [`CODE_TTL`].
    pub fn mint(&self) -> String {
        let code = token();
        let now = Instant::now();
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        prune(&mut held.codes, now);
        held.codes.insert(code.clone(), now + CODE_TTL);
        code
    }

    /// Spends `code`: a new session if it was live, else `None`.
    pub fn redeem(&self, code: &str) -> Option<String> {
        let now = Instant::now();
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let expires = held.codes.remove(code)?;
        if expires <= now {
            return None;
        }
        let session = token();
        prune(&mut held.sessions, now);
        held.sessions.insert(session.clone(), now + SESSION_TTL);
        Some(session)
    }

    /// Whether `session` is a live session.
    pub fn admits(&self, session: &str) -> bool {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.sessions
            .get(session)
            .is_some_and(|expires| *expires > Instant::now())
    }
}

/// The session cookie's value in a `Cookie` header, if there is one.
pub fn session_cookie(header: &str) -> Option<&str> {
    header
        .split(';')
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim_matches('"'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_code_opens_one_session_once() {
        let logins = Logins::default();
        let code = logins.mint();
        assert_eq!(code.len(), 64);
        let session = logins.redeem(&code).expect("a fresh code works");
        assert!(logins.admits(&session));
        assert!(logins.redeem(&code).is_none(), "a code works once");
        assert!(!logins.admits(&code), "a code is not a session");
        assert!(!logins.admits("guess"));
        assert!(logins.redeem("").is_none());
    }

    #[test]
    fn codes_asked_for_in_a_loop_hold_bounded_memory() {
        let logins = Logins::default();
        let first = logins.mint();
        for _ in 0..MAX_HELD + 10 {
            logins.mint();
        }
        assert!(logins.held.lock().unwrap().codes.len() <= MAX_HELD);
        assert!(logins.redeem(&first).is_none(), "the oldest went first");
    }

    #[test]
    fn the_session_cookie_is_found_among_others() {
        assert_eq!(session_cookie("a=1; todod_session=abc; b=2"), Some("abc"));
        assert_eq!(session_cookie("todod_sessionx=1"), None);
        assert_eq!(session_cookie(""), None);
    }
}
