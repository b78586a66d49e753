//! Where the daemon keeps its state, and the guard that keeps two daemons off
//! one database.
use std::fs::{self, File, OpenOptions};
use std::io;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::Path;

pub use todod_proto::local::{default_state_dir, DEFAULT_LISTEN, SOCKET_FILE, TOKEN_FILE};

pub const DATABASE_FILE: &str = "todod.db";
pub const LOCK_FILE: &str = "todod.lock";

/// Creates the state directory (mode 0700: the database is private).
pub fn ensure_state_dir(dir: &Path) -> io::Result<()> {
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// An exclusive lock on the state directory, held for the daemon's life. The
/// kernel drops it when the process dies, even by SIGKILL.
#[derive(Debug)]
pub struct StateLock {
    _file: File,
}

pub fn lock_state_dir(dir: &Path) -> io::Result<StateLock> {
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(LOCK_FILE))?;
    // SAFETY: flock on a file descriptor we own; no memory is shared.
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let err = io::Error::last_os_error();
        if err.kind() == io::ErrorKind::WouldBlock {
            return Err(io::Error::new(
                io::ErrorKind::AddrInUse,
                format!("another todod already uses {}", dir.display()),
            ));
        }
        return Err(err);
    }
    Ok(StateLock { _file: file })
}

/// Binds a Unix socket readable and writable by this user only. A socket file
/// left by a dead daemon is replaced; the state lock proves it is dead.
pub fn bind_private_socket(path: &Path) -> io::Result<tokio::net::UnixListener> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let listener = tokio::net::UnixListener::bind(path)?;
    fs::set_permissions(path, fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// The token in `dir`'s token file, creating the file (mode 0600, 32 random
/// bytes as hex) on first start. Call with the state lock held.
pub fn load_or_create_token(dir: &Path) -> io::Result<String> {
    let path = dir.join(TOKEN_FILE);
    match fs::read_to_string(&path) {
        Ok(text) => return Ok(text.trim().to_string()),
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        Err(_) => {}
    }
    let mut bytes = [0u8; 32];
    File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    let tmp = dir.join(format!("{TOKEN_FILE}.tmp"));
    let _ = fs::remove_file(&tmp);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)?;
    file.write_all(format!("{token}\n").as_bytes())?;
    file.sync_all()?;
    fs::rename(&tmp, &path)?;
    File::open(dir)?.sync_all()?;
    Ok(token)
}
