//! The file half of exactly-once output: files a phase creates itself and
//! appends to, made durable before their committed lengths are recorded, and
//! cut back on resume only when they are provably the files it created.
//!
//! A phase never truncates or writes into a file it did not create. A new
//! output is created with `O_EXCL | O_NOFOLLOW` (with `overwrite`, an existing
//! regular file is first removed, never written into), and its identity
//! (device, inode) is committed before a byte is appended. A resume opens the
//! path without following symlinks and cuts it back only when the device and
//! inode match and the first committed bytes hash to what was recorded.
//!
//! All file access goes through [`Fs`], so that tests can run the pipeline on
//! a file layer that forgets what was not fsynced when it "crashes".
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// How many leading bytes of a file its head hash covers.
pub const HEAD_BYTES: u64 = 4096;
/// Appends are buffered up to this much before they are written out.
const BUFFER_BYTES: usize = 1 << 20;

/// What identifies a file on disk, whatever its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    pub dev: u64,
    pub ino: u64,
}

/// What `stat` says about a path, without following a final symlink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Entry {
    Missing,
    Regular {
        identity: Identity,
        len: u64,
    },
    Symlink,
    /// A directory, FIFO, socket or device.
    Other,
}

/// An open file the phase appends to.
#[allow(clippy::len_without_is_empty)] // a length, read from the file; not a collection
pub trait OutFile: Send {
    fn identity(&self) -> io::Result<Identity>;
    fn len(&self) -> io::Result<u64>;
    /// Hard links left: 0 once the file was deleted under us.
    fn links(&self) -> io::Result<u64>;
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize>;
    /// Writes `bytes` at the end the caller tracks (`offset`).
    fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()>;
    fn set_len(&mut self, len: u64) -> io::Result<()>;
    fn sync(&mut self) -> io::Result<()>;
    /// An exclusive advisory lock for the run, so that no second writer (another
    /// daemon, another task) appends to the same file. False if held elsewhere.
    fn try_lock(&self) -> io::Result<bool>;
}

/// The file system as phases use it.
pub trait Fs: Send + Sync {
    fn stat(&self, path: &Path) -> io::Result<Entry>;
    /// Creates a new, empty file; fails if anything exists at `path`. The new
    /// directory entry is durable when this returns.
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn OutFile>>;
    /// Opens an existing regular file for appending, never following a symlink.
    fn open_existing(&self, path: &Path) -> io::Result<Box<dyn OutFile>>;
    /// Removes a file; the removal is durable when this returns.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Renames without replacing: fails if `to` exists. Durable on return.
    fn rename_new(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Replaces `to` with `from` (an atomic rename). Durable on return.
    fn replace(&self, from: &Path, to: &Path) -> io::Result<()>;
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

struct RealFile(File);

impl OutFile for RealFile {
    fn identity(&self) -> io::Result<Identity> {
        let meta = self.0.metadata()?;
        Ok(Identity {
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn links(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.nlink())
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        std::os::unix::fs::FileExt::read_at(&self.0, buf, offset)
    }

    fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(&self.0, bytes, offset)
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn sync(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn try_lock(&self) -> io::Result<bool> {
        // SAFETY: flock on a file descriptor we own; no memory is shared.
        let rc = unsafe { libc::flock(self.0.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(true);
        }
        let error = io::Error::last_os_error();
        if error.kind() == io::ErrorKind::WouldBlock {
            Ok(false)
        } else {
            Err(error)
        }
    }
}

/// Makes a directory entry change durable.
pub fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => File::open(parent)?.sync_all(),
        None => File::open(".")?.sync_all(),
    }
}

impl Fs for RealFs {
    fn stat(&self, path: &Path) -> io::Result<Entry> {
        match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Entry::Missing),
            Err(e) => Err(e),
            Ok(meta) if meta.file_type().is_symlink() => Ok(Entry::Symlink),
            Ok(meta) if meta.file_type().is_file() => Ok(Entry::Regular {
                identity: Identity {
                    dev: meta.dev(),
                    ino: meta.ino(),
                },
                len: meta.len(),
            }),
            Ok(_) => Ok(Entry::Other),
        }
    }

    fn create_new(&self, path: &Path) -> io::Result<Box<dyn OutFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .mode(0o644)
            .open(path)?;
        sync_parent(path)?;
        Ok(Box::new(RealFile(file)))
    }

    fn open_existing(&self, path: &Path) -> io::Result<Box<dyn OutFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC | libc::O_NONBLOCK)
            .open(path)?;
        if !file.metadata()?.file_type().is_file() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file",
            ));
        }
        Ok(Box::new(RealFile(file)))
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)?;
        sync_parent(path)
    }

    fn rename_new(&self, from: &Path, to: &Path) -> io::Result<()> {
        // link(2) fails when `to` exists, unlike rename(2), which would replace it.
        std::fs::hard_link(from, to)?;
        std::fs::remove_file(from)?;
        sync_parent(to)?;
        sync_parent(from)
    }

    fn replace(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)?;
        sync_parent(to)
    }
}

/// The committed state of one output file, as the checkpoint keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileState {
    pub path: PathBuf,
    /// `None` until the file is created (the intent to create it is committed first).
    pub identity: Option<Identity>,
    /// Bytes committed: the file is cut back to this on resume.
    pub committed: u64,
    /// sha256 (hex) of the first `head_len` bytes.
    #[serde(default)]
    pub head: String,
    #[serde(default)]
    pub head_len: u64,
}

impl FileState {
    pub fn planned(path: PathBuf) -> FileState {
        FileState {
            path,
            identity: None,
            committed: 0,
            head: String::new(),
            head_len: 0,
        }
    }
}

/// Why an output file cannot be used; the run stops with this message.
fn refusal(path: &Path, why: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}: {why}", path.display()),
    )
}

/// Where a run that takes an output file over from a writer still holding
/// it copies the committed bytes, until the copy's identity is committed and
/// it replaces the file: `PATH.todod-fork`.
pub fn fork_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".todod-fork");
    PathBuf::from(name)
}

/// Puts a fork whose identity is committed ([`Output::fork`]) in place of
/// the file it copied; durable on return.
pub fn publish_fork(fs: &dyn Fs, path: &Path) -> io::Result<()> {
    fs.replace(&fork_path(path), path)
}

/// Another open file description holds the file's lock: another process
/// writes it (on a database several daemons share, possibly a daemon whose
/// run lost its lease while paused and has not noticed yet). The kind is
/// `WouldBlock`, so that a caller may wait for it instead of failing.
fn locked(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::WouldBlock,
        format!("{}: is locked by another writer", path.display()),
    )
}

fn hash_head(file: &dyn OutFile, len: u64) -> io::Result<String> {
    let mut buf = vec![0u8; len as usize];
    let mut read = 0;
    while read < buf.len() {
        let n = file.read_at(read as u64, &mut buf[read..])?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "shorter than its committed head",
            ));
        }
        read += n;
    }
    Ok(hex(&Sha256::digest(&buf)))
}

pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(out, "{b:02x}");
    }
    out
}

/// One output file of a run: open, locked, positioned at its committed end.
pub struct Output {
    state: FileState,
    file: Box<dyn OutFile>,
    /// Bytes appended (written or buffered) beyond `state.committed`.
    pending: u64,
    buffer: Vec<u8>,
    /// Where the next write goes.
    written: u64,
}

/// How a run may treat an output path it has not created yet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// Anything at the path is refused.
    Refuse,
    /// An existing regular file (not a symlink) is removed first.
    Replace,
}

impl Existing {
    /// What a spec's `overwrite` asks for.
    pub fn when(overwrite: bool) -> Existing {
        if overwrite {
            Existing::Replace
        } else {
            Existing::Refuse
        }
    }
}

impl Output {
    /// Creates the file of a state with no identity yet. An empty regular file
    /// already at the path is adopted when `adopt_empty` (it is ours, created
    /// just before a crash that lost the commit of its identity: cutting an
    /// empty file loses nothing).
    pub fn create(
        fs: &dyn Fs,
        mut state: FileState,
        existing: Existing,
        adopt_empty: bool,
    ) -> io::Result<Output> {
        debug_assert!(state.identity.is_none());
        let path = state.path.clone();
        let file = match fs.stat(&path)? {
            Entry::Missing => fs.create_new(&path)?,
            Entry::Regular { len: 0, .. } if adopt_empty => fs.open_existing(&path)?,
            Entry::Regular { .. } if existing == Existing::Replace => {
                fs.remove(&path)?;
                fs.create_new(&path)?
            }
            Entry::Regular { .. } => {
                return Err(refusal(
                    &path,
                    "already exists and todod did not create it; set \"overwrite\": true \
                     in the spec to replace it",
                ))
            }
            Entry::Symlink => return Err(refusal(&path, "is a symbolic link; refused")),
            Entry::Other => return Err(refusal(&path, "is not a regular file; refused")),
        };
        if !file.try_lock()? {
            return Err(locked(&path));
        }
        state.identity = Some(file.identity()?);
        state.committed = 0;
        state.head.clear();
        state.head_len = 0;
        Ok(Output::at_commit(state, file))
    }

    /// Reopens a file this phase created and cuts it back to its committed
    /// length, after checking it is still that file.
    pub fn resume(fs: &dyn Fs, state: FileState) -> io::Result<Output> {
        let path = state.path.clone();
        let Some(identity) = state.identity else {
            return Err(refusal(&path, "was never created"));
        };
        // A fork whose identity was committed but which had not replaced
        // the file yet (the run died between the two) is the file now.
        // A fork whose identity was never committed is a copy only: removed.
        let fork = fork_path(&path);
        match fs.stat(&fork)? {
            Entry::Regular { identity: at, .. } if at == identity => publish_fork(fs, &path)?,
            Entry::Regular { .. } => fs.remove(&fork)?,
            _ => {}
        }
        let file = open_committed(fs, &state, identity)?;
        if !file.try_lock()? {
            return Err(locked(&path));
        }
        let len = file.len()?;
        let mut output = Output::at_commit(state, file);
        if len > output.state.committed {
            output.file.set_len(output.state.committed)?;
            output.file.sync()?;
        }
        Ok(output)
    }

    /// Takes the file of `state` over from a writer that still holds its
    /// lock (on a database several daemons share, a daemon paused past its
    /// lease that has not noticed yet). Its committed bytes are copied into
    /// a new file beside it ([`fork_path`]), locked and fsynced, which stands
    /// for it from now on: the caller commits the returned output's state
    /// (the fork's identity), then [`publish_fork`]s it over the path. The
    /// old writer keeps the old file, by then at no path: what it writes
    /// when it wakes lands where no reader looks, and its commits are
    /// refused (its lease is gone).
    pub fn fork(fs: &dyn Fs, state: FileState) -> io::Result<Output> {
        let path = state.path.clone();
        let Some(identity) = state.identity else {
            return Err(refusal(&path, "was never created"));
        };
        let source = open_committed(fs, &state, identity)?;
        // A copy an earlier run left before its commit is never the file.
        let mut copy = stage_at(fs, &fork_path(&path))?;
        let copied = io::copy(&mut SeqReader::new(source, state.committed), &mut copy)?;
        if copied != state.committed {
            return Err(refusal(&path, "was cut while it was copied"));
        }
        let copy = copy.into_file()?;
        if !copy.try_lock()? {
            return Err(locked(&fork_path(&path)));
        }
        let state = FileState {
            identity: Some(copy.identity()?),
            ..state
        };
        Ok(Output::at_commit(state, copy))
    }

    /// The output of `file`, to be written on from `state`'s committed length.
    fn at_commit(state: FileState, file: Box<dyn OutFile>) -> Output {
        Output {
            written: state.committed,
            state,
            file,
            pending: 0,
            buffer: Vec::new(),
        }
    }
}

/// Opens the file a checkpoint committed, checking that it is that file
/// (its identity, at least its committed length, its first bytes).
fn open_committed(
    fs: &dyn Fs,
    state: &FileState,
    identity: Identity,
) -> io::Result<Box<dyn OutFile>> {
    let path = &state.path;
    let file = match fs.open_existing(path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Err(refusal(
                path,
                format!(
                    "is gone, with {} committed bytes; restore it, or start a new task",
                    state.committed
                ),
            ))
        }
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(refusal(
                path,
                "was replaced by a symbolic link; not touched",
            ))
        }
        Err(e) => return Err(refusal(path, e)),
    };
    if file.identity()? != identity {
        return Err(refusal(
            path,
            "was replaced by another file since todod created it; not touched",
        ));
    }
    let len = file.len()?;
    if len < state.committed {
        return Err(refusal(
            path,
            format!(
                "is {len} bytes but {} were committed; it was cut outside todod",
                state.committed
            ),
        ));
    }
    if state.head_len > 0 && hash_head(&*file, state.head_len)? != state.head {
        return Err(refusal(
            path,
            "was replaced by another file (its first bytes differ from what todod \
             wrote); not touched",
        ));
    }
    Ok(file)
}

impl Output {
    pub fn state(&self) -> &FileState {
        &self.state
    }

    pub fn path(&self) -> &Path {
        &self.state.path
    }

    /// Bytes committed plus bytes appended since.
    pub fn len(&self) -> u64 {
        self.state.committed + self.pending
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends bytes; not durable until [`Output::sync`].
    pub fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.buffer.extend_from_slice(bytes);
        self.pending += bytes.len() as u64;
        if self.buffer.len() >= BUFFER_BYTES {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.buffer.is_empty() {
            self.file.write_at(self.written, &self.buffer)?;
            self.written += self.buffer.len() as u64;
            self.buffer.clear();
        }
        Ok(())
    }

    /// Makes everything appended durable, checking first that the file is
    /// still there and still as long as we made it. Returns the new state to
    /// commit; call [`Output::committed`] once it is.
    pub fn sync(&mut self) -> io::Result<FileState> {
        let mut next = self.state.clone();
        if self.pending == 0 {
            return Ok(next);
        }
        self.flush()?;
        if self.file.links()? == 0 {
            return Err(refusal(
                &self.state.path,
                "was deleted while todod was writing it",
            ));
        }
        let len = self.file.len()?;
        if len < self.written {
            return Err(refusal(
                &self.state.path,
                format!(
                    "is {len} bytes but todod wrote {}; it was cut while being written",
                    self.written
                ),
            ));
        }
        self.file.sync()?;
        next.committed = self.written;
        if next.head_len < HEAD_BYTES.min(next.committed) {
            next.head_len = HEAD_BYTES.min(next.committed);
            next.head = hash_head(&*self.file, next.head_len)?;
        }
        Ok(next)
    }

    /// Records that `state` (from [`Output::sync`]) is committed.
    pub fn committed(&mut self, state: FileState) {
        self.pending = self.written + self.buffer.len() as u64 - state.committed;
        self.state = state;
    }
}

/// Reads a file this phase did not create (its input), by path.
pub fn open_input(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.file_type().is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} is not a regular file", path.display()),
        ));
    }
    Ok(file)
}

/// What identifies an input file's content for a resume: if any of these
/// changed, the committed line numbers may no longer mean the same lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputIdentity {
    pub dev: u64,
    pub ino: u64,
    pub len: u64,
    pub mtime_ns: i64,
}

impl InputIdentity {
    pub fn of(file: &File) -> io::Result<InputIdentity> {
        let meta = file.metadata()?;
        Ok(InputIdentity {
            dev: meta.dev(),
            ino: meta.ino(),
            len: meta.len(),
            mtime_ns: meta.mtime() * 1_000_000_000 + meta.mtime_nsec(),
        })
    }
}

/// Writes a new file front to back through an [`OutFile`], buffered.
pub struct SeqWriter {
    file: Box<dyn OutFile>,
    offset: u64,
    buffer: Vec<u8>,
}

impl SeqWriter {
    pub fn new(file: Box<dyn OutFile>) -> SeqWriter {
        SeqWriter {
            file,
            offset: 0,
            buffer: Vec::with_capacity(BUFFER_BYTES),
        }
    }

    /// Flushes and fsyncs; the file is then complete on disk.
    pub fn finish(self) -> io::Result<()> {
        self.into_file().map(drop)
    }

    /// [`finish`](Self::finish), and the file to go on with.
    pub fn into_file(mut self) -> io::Result<Box<dyn OutFile>> {
        self.flush()?;
        self.file.sync()?;
        Ok(self.file)
    }
}

impl Write for SeqWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.buffer.extend_from_slice(buf);
        if self.buffer.len() >= BUFFER_BYTES {
            self.flush()?;
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.buffer.is_empty() {
            self.file.write_at(self.offset, &self.buffer)?;
            self.offset += self.buffer.len() as u64;
            self.buffer.clear();
        }
        Ok(())
    }
}

/// Reads a file front to back through an [`OutFile`].
pub struct SeqReader {
    file: Box<dyn OutFile>,
    offset: u64,
    end: u64,
}

impl SeqReader {
    /// Reads `file` up to byte `end` (a committed length).
    pub fn new(file: Box<dyn OutFile>, end: u64) -> SeqReader {
        SeqReader {
            file,
            offset: 0,
            end,
        }
    }
}

impl Read for SeqReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = (self.end - self.offset).min(buf.len() as u64) as usize;
        if left == 0 {
            return Ok(0);
        }
        let n = self.file.read_at(self.offset, &mut buf[..left])?;
        self.offset += n as u64;
        Ok(n)
    }
}

/// Where a phase writes a file it produces whole when it finishes: a new
/// file beside the final path, to be published once complete.
pub fn staging_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".todod-tmp");
    PathBuf::from(name)
}

/// Starts writing the staging file of `path` (removing one a dead run left).
pub fn stage(fs: &dyn Fs, path: &Path) -> io::Result<SeqWriter> {
    stage_at(fs, &staging_path(path))
}

/// The staging file of `path` for one attempt (`tag`): where several
/// daemons may write the same file at once (one paused past its lease, the
/// other that took over), each stages its own, and whichever publishes
/// last publishes the same complete bytes.
pub fn staging_path_of(path: &Path, tag: &str) -> PathBuf {
    let tag: String = tag
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut name = staging_path(path).into_os_string();
    name.push(format!("-{tag}"));
    PathBuf::from(name)
}

/// Starts writing the staging file `tmp` (removing one a dead run left).
pub fn stage_at(fs: &dyn Fs, tmp: &Path) -> io::Result<SeqWriter> {
    let tmp = tmp.to_path_buf();
    match fs.stat(&tmp)? {
        Entry::Missing => {}
        Entry::Regular { .. } => fs.remove(&tmp)?,
        _ => {
            return Err(refusal(
                &tmp,
                "is in the way and is not a regular file; refused",
            ))
        }
    }
    Ok(SeqWriter::new(fs.create_new(&tmp)?))
}

/// Whether two files hold the same bytes.
fn same_content(fs: &dyn Fs, a: &Path, b: &Path) -> io::Result<bool> {
    let (fa, fb) = (fs.open_existing(a)?, fs.open_existing(b)?);
    let len = fa.len()?;
    if len != fb.len()? {
        return Ok(false);
    }
    let (mut ra, mut rb) = (SeqReader::new(fa, len), SeqReader::new(fb, len));
    let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let n = ra.read(&mut ba)?;
        if n == 0 {
            return Ok(true);
        }
        rb.read_exact(&mut bb[..n])?;
        if ba[..n] != bb[..n] {
            return Ok(false);
        }
    }
}

/// Puts the staged file of `path` in place. Without `replace`, a file already
/// at `path` is left alone unless it holds exactly these bytes (what an
/// earlier, interrupted finish of the same phase published: phases that
/// publish are deterministic), and the staged file is dropped.
pub fn publish(fs: &dyn Fs, path: &Path, replace: bool) -> io::Result<()> {
    publish_from(fs, &staging_path(path), path, replace)
}

/// [`publish`] from the staging file `tmp`.
pub fn publish_from(fs: &dyn Fs, tmp: &Path, path: &Path, replace: bool) -> io::Result<()> {
    let tmp = tmp.to_path_buf();
    if replace {
        return match fs.stat(path)? {
            Entry::Missing | Entry::Regular { .. } => fs.replace(&tmp, path),
            Entry::Symlink => Err(refusal(path, "is a symbolic link; refused")),
            Entry::Other => Err(refusal(path, "is not a regular file; refused")),
        };
    }
    match fs.rename_new(&tmp, path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            if matches!(fs.stat(path)?, Entry::Regular { .. }) && same_content(fs, &tmp, path)? {
                fs.remove(&tmp)
            } else {
                Err(refusal(
                    path,
                    "appeared while the phase was finishing and is not what it writes; not \
                     touched (remove it, or set \"overwrite\": true, and retry)",
                ))
            }
        }
        Err(e) => Err(e),
    }
}

/// sha256 (hex) of a whole file.
pub fn sha256_of(fs: &dyn Fs, path: &Path) -> io::Result<String> {
    let file = fs.open_existing(path)?;
    let len = file.len()?;
    let mut reader = SeqReader::new(file, len);
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    loop {
        let n = reader.read(&mut buf)?;
        if n == 0 {
            return Ok(hex(&hasher.finalize()));
        }
        hasher.update(&buf[..n]);
    }
}

/// Shared handle to a file layer.
pub type SharedFs = Arc<dyn Fs>;

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn state(path: &Path) -> FileState {
        FileState::planned(path.to_path_buf())
    }

    /// A file created at `path` with `bytes` written and committed, its
    /// writer still open (and holding the lock), and the committed state.
    pub(crate) fn committed_output(path: &Path, bytes: &[u8]) -> (Output, FileState) {
        let mut out = Output::create(&RealFs, state(path), Existing::Refuse, false).unwrap();
        out.append(bytes).unwrap();
        let committed = out.sync().unwrap();
        out.committed(committed.clone());
        (out, committed)
    }

    #[test]
    fn an_uncommitted_tail_is_cut_on_resume() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        let (mut out, committed) = committed_output(&path, b"a\n");
        out.append(b"b\n").unwrap();
        out.sync().unwrap(); // synced, but the commit never happens
        drop(out);
        let mut out = Output::resume(&RealFs, committed).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"a\n");
        out.append(b"c\n").unwrap();
        let next = out.sync().unwrap();
        assert_eq!(next.committed, 4);
        assert_eq!(std::fs::read(&path).unwrap(), b"a\nc\n");
    }

    #[test]
    fn existing_files_symlinks_and_fifos_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let existing = dir.path().join("existing");
        std::fs::write(&existing, b"keep me").unwrap();
        assert!(Output::create(&RealFs, state(&existing), Existing::Refuse, false).is_err());
        assert_eq!(std::fs::read(&existing).unwrap(), b"keep me");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&existing, &link).unwrap();
        assert!(Output::create(&RealFs, state(&link), Existing::Replace, false).is_err());
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo on a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        assert!(Output::create(&RealFs, state(&fifo), Existing::Replace, false).is_err());
        assert_eq!(std::fs::read(&existing).unwrap(), b"keep me");
        // Replace removes the old file and creates a new one: never writes into it.
        let out = Output::create(&RealFs, state(&existing), Existing::Replace, false).unwrap();
        assert_eq!(out.len(), 0);
        assert_eq!(std::fs::read(&existing).unwrap(), b"");
    }

    #[test]
    fn a_replaced_file_is_not_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let mut out = Output::create(&RealFs, state(&path), Existing::Refuse, false).unwrap();
        out.append(&vec![b'x'; 5000]).unwrap();
        let committed = out.sync().unwrap();
        drop(out);
        // Someone puts another file with the same content length in its place.
        std::fs::remove_file(&path).unwrap();
        std::fs::write(&path, vec![b'y'; 6000]).unwrap();
        let err = Output::resume(&RealFs, committed.clone()).err().unwrap();
        assert!(err.to_string().contains("replaced"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap().len(), 6000);
        std::fs::remove_file(&path).unwrap();
        let err = Output::resume(&RealFs, committed).err().unwrap();
        assert!(err.to_string().contains("gone"), "{err}");
    }

    #[test]
    fn a_file_cut_or_deleted_while_written_stops_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let mut out = Output::create(&RealFs, state(&path), Existing::Refuse, false).unwrap();
        out.append(b"abc\n").unwrap();
        let s = out.sync().unwrap();
        out.committed(s);
        std::fs::remove_file(&path).unwrap();
        out.append(b"def\n").unwrap();
        let err = out.sync().unwrap_err();
        assert!(err.to_string().contains("deleted"), "{err}");
    }

    #[test]
    fn a_second_writer_is_locked_out() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let out = Output::create(&RealFs, state(&path), Existing::Refuse, false).unwrap();
        let again = Output::resume(&RealFs, out.state().clone()).err().unwrap();
        assert!(again.to_string().contains("locked"), "{again}");
    }

    /// A writer that still holds the file (a daemon paused past its lease)
    /// is forked away from: the committed bytes go on in a copy that takes
    /// the path, and what the old writer writes afterwards lands at no path.
    #[test]
    fn a_held_file_is_forked_and_the_old_writers_late_writes_land_nowhere() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let (mut old, committed) = committed_output(&path, b"one\n");
        old.append(b"uncommitted\n").unwrap();
        old.sync().unwrap();

        let locked_out = Output::resume(&RealFs, committed.clone()).err().unwrap();
        assert_eq!(locked_out.kind(), io::ErrorKind::WouldBlock);
        let mut new = Output::fork(&RealFs, committed.clone()).unwrap();
        let forked = new.state().clone();
        assert_ne!(forked.identity, committed.identity);
        assert_eq!(forked.committed, 4);
        // Until its identity is committed the fork is a copy beside the file.
        assert_eq!(std::fs::read(fork_path(&path)).unwrap(), b"one\n");
        assert_eq!(std::fs::read(&path).unwrap(), b"one\nuncommitted\n");
        publish_fork(&RealFs, &path).unwrap();
        assert!(!fork_path(&path).exists());

        new.append(b"two\n").unwrap();
        let next = new.sync().unwrap();
        new.committed(next);
        // The old writer wakes and writes on: into a file at no path, and
        // its sync finds the file gone and stops it.
        old.append(b"late\n").unwrap();
        let gone = old.sync().err().unwrap();
        assert!(gone.to_string().contains("deleted"), "{gone}");
        assert_eq!(std::fs::read(&path).unwrap(), b"one\ntwo\n");
        // A third run is locked out of the fork as the second was of the file.
        let again = Output::resume(&RealFs, new.state().clone()).err().unwrap();
        assert_eq!(again.kind(), io::ErrorKind::WouldBlock);
    }

    /// A run that died after committing the fork's identity but before
    /// putting it in place is rolled forward by the next resume; a fork
    /// never committed is removed.
    #[test]
    fn a_committed_fork_is_rolled_forward_and_an_uncommitted_one_removed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out");
        let (old, committed) = committed_output(&path, b"one\n");

        // Forked, never committed: the next resume (the old writer gone)
        // takes the file and removes the copy.
        let uncommitted = Output::fork(&RealFs, committed.clone()).unwrap();
        drop(uncommitted);
        drop(old);
        let resumed = Output::resume(&RealFs, committed.clone()).unwrap();
        assert!(!fork_path(&path).exists());
        assert_eq!(resumed.state().identity, committed.identity);
        drop(resumed);

        // Forked and committed, not yet in place: the resume puts it there.
        let fork = Output::fork(&RealFs, committed.clone()).unwrap();
        let forked = fork.state().clone();
        drop(fork);
        let resumed = Output::resume(&RealFs, forked.clone()).unwrap();
        assert!(!fork_path(&path).exists());
        assert_eq!(resumed.state().identity, forked.identity);
        assert_eq!(std::fs::read(&path).unwrap(), b"one\n");
    }
}
