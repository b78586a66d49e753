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
