//! Where a daemon on this machine keeps what its clients need: the state
//! directory, the Unix socket and the TCP listener's token, and the largest
//! message either side accepts.
use std::path::PathBuf;

/// Loopback address served when none is given.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:50710";
pub const SOCKET_FILE: &str = "todod.sock";
/// The bearer token of the TCP listener, readable by the daemon's user only.
pub const TOKEN_FILE: &str = "token";
/// Metadata key a client names itself with; recorded as the actor of its events.
pub const CLIENT_HEADER: &str = "x-todod-client";
/// The largest response either side encodes or decodes: a whole plan's list
/// with its history fits.
pub const MAX_RESPONSE_BYTES: usize = 256 * 1024 * 1024;

/// `$XDG_STATE_HOME/todod`, else `~/.local/state/todod`.
pub fn default_state_dir() -> Option<PathBuf> {
    let xdg = std::env::var_os("XDG_STATE_HOME").filter(|v| !v.is_empty());
    if let Some(dir) = xdg.map(PathBuf::from).filter(|p| p.is_absolute()) {
        return Some(dir.join("todod"));
    }
    let home = std::env::var_os("HOME").filter(|v| !v.is_empty())?;
    Some(PathBuf::from(home).join(".local/state/todod"))
}

/// A fresh request id for a mutating call (`request_id`): a random UUID
/// (version 4), from the system's random source. Where that cannot be read
/// the id is made from the time, the process and a counter, which is unique
/// enough for one client's retries.
pub fn new_request_id() -> String {
    use std::io::Read as _;
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut bytes = [0u8; 16];
    let random = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_ok();
    if !random {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        bytes[..8].copy_from_slice(&(now as u64).to_le_bytes());
        bytes[8..12].copy_from_slice(&std::process::id().to_le_bytes());
        bytes[12..].copy_from_slice(&(n as u32).to_le_bytes());
    }
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

/// Whether a failed call may have reached the daemon and lost its answer on
/// the way back (the connection broke), so that sending it again with the
/// same request id is how to learn what happened.
pub fn answer_lost(status: &tonic::Status) -> bool {
    use tonic::Code;
    match status.code() {
        Code::Unavailable => true,
        Code::Unknown | Code::Internal => {
            let m = status.message().to_ascii_lowercase();
            [
                "transport",
                "connection",
                "broken pipe",
                "reset",
                "h2 protocol",
                "stream",
            ]
            .iter()
            .any(|w| m.contains(w))
        }
        _ => false,
    }
}
