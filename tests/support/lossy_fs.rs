//! A file layer for tests that behaves like a disk at a power cut: what was
//! written but not fsynced is lost when it "crashes". Running the record
//! pipeline on it shows that every committed byte was made durable first: a
//! missing fsync makes a resumed run find its files shorter than committed.
//! It can also run out of space on purpose.
//!
//! Not used by the daemon itself; it lives here so that the daemon's and the
//! end-to-end tests can both run phases on it.
use std::collections::HashMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use todod_engine::phase::files::{Entry, Fs, Identity, OutFile};

#[derive(Debug, Default)]
struct Data {
    ino: u64,
    /// What a reader sees now.
    now: Vec<u8>,
    /// What survives a crash: the content as of the last fsync.
    durable: Vec<u8>,
    links: u64,
    locked: bool,
}

#[derive(Debug, Default)]
struct Disk {
    /// Directory entries; all changes to them are durable at once (the real
    /// layer fsyncs the directory after each).
    entries: HashMap<PathBuf, Arc<Mutex<Data>>>,
    next_ino: u64,
    /// Bytes that may still be written before writes fail with ENOSPC.
    space: Option<u64>,
}

/// An in-memory disk that forgets unsynced writes when it crashes.
#[derive(Debug, Default, Clone)]
pub struct LossyFs {
    disk: Arc<Mutex<Disk>>,
}

impl LossyFs {
    pub fn new() -> LossyFs {
        LossyFs::default()
    }

    /// A power cut: every file goes back to what was last fsynced.
    pub fn crash(&self) {
        let disk = self.disk.lock().unwrap();
        for data in disk.entries.values() {
            let mut data = data.lock().unwrap();
            data.now = data.durable.clone();
            data.locked = false;
        }
    }

    /// Limits further writes to `bytes` in all (`None`: no limit).
    pub fn set_space(&self, bytes: Option<u64>) {
        self.disk.lock().unwrap().space = bytes;
    }

    /// What a file holds now (as a reader would see it), if it exists.
    pub fn read(&self, path: &Path) -> Option<Vec<u8>> {
        let disk = self.disk.lock().unwrap();
        disk.entries
            .get(path)
            .map(|d| d.lock().unwrap().now.clone())
    }

    /// Creates a file with `content`, already durable, as if someone else
    /// had put it there.
    pub fn put(&self, path: &Path, content: &[u8]) {
        let mut disk = self.disk.lock().unwrap();
        disk.next_ino += 1;
        let data = Data {
            ino: disk.next_ino,
            now: content.to_vec(),
            durable: content.to_vec(),
            links: 1,
            locked: false,
        };
        disk.entries
            .insert(path.to_path_buf(), Arc::new(Mutex::new(data)));
    }

    pub fn paths(&self) -> Vec<PathBuf> {
        let disk = self.disk.lock().unwrap();
        let mut paths: Vec<PathBuf> = disk.entries.keys().cloned().collect();
        paths.sort();
        paths
    }
}

struct Handle {
    data: Arc<Mutex<Data>>,
    disk: Arc<Mutex<Disk>>,
    locks: bool,
}

impl Drop for Handle {
    fn drop(&mut self) {
        if self.locks {
            self.data.lock().unwrap().locked = false;
        }
    }
}

fn no_space() -> io::Error {
    io::Error::from_raw_os_error(libc::ENOSPC)
}

impl OutFile for Handle {
    fn identity(&self) -> io::Result<Identity> {
        Ok(Identity {
            dev: 0,
            ino: self.data.lock().unwrap().ino,
        })
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.data.lock().unwrap().now.len() as u64)
    }

    fn links(&self) -> io::Result<u64> {
        Ok(self.data.lock().unwrap().links)
    }

    fn read_at(&self, offset: u64, buf: &mut [u8]) -> io::Result<usize> {
        let data = self.data.lock().unwrap();
        let start = (offset as usize).min(data.now.len());
        let n = buf.len().min(data.now.len() - start);
        buf[..n].copy_from_slice(&data.now[start..start + n]);
        Ok(n)
    }

    fn write_at(&mut self, offset: u64, bytes: &[u8]) -> io::Result<()> {
        {
            let mut disk = self.disk.lock().unwrap();
            if let Some(space) = disk.space {
                if (bytes.len() as u64) > space {
                    return Err(no_space());
                }
                disk.space = Some(space - bytes.len() as u64);
            }
        }
        let mut data = self.data.lock().unwrap();
        let end = offset as usize + bytes.len();
        if data.now.len() < end {
            data.now.resize(end, 0);
        }
        data.now[offset as usize..end].copy_from_slice(bytes);
        Ok(())
    }

    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.data.lock().unwrap().now.resize(len as usize, 0);
        Ok(())
    }

    fn sync(&mut self) -> io::Result<()> {
        let mut data = self.data.lock().unwrap();
        data.durable = data.now.clone();
        Ok(())
    }

    fn try_lock(&self) -> io::Result<bool> {
        let mut data = self.data.lock().unwrap();
        if data.locked {
            return Ok(false);
        }
        data.locked = true;
        Ok(true)
    }
}

impl LossyFs {
    fn handle(&self, data: Arc<Mutex<Data>>) -> Box<dyn OutFile> {
        Box::new(Handle {
            data,
            disk: self.disk.clone(),
            locks: true,
        })
    }
}

impl Fs for LossyFs {
    fn stat(&self, path: &Path) -> io::Result<Entry> {
        let disk = self.disk.lock().unwrap();
        Ok(match disk.entries.get(path) {
            None => Entry::Missing,
            Some(data) => {
                let data = data.lock().unwrap();
                Entry::Regular {
                    identity: Identity {
                        dev: 0,
                        ino: data.ino,
                    },
                    len: data.now.len() as u64,
                }
            }
        })
    }

    fn create_new(&self, path: &Path) -> io::Result<Box<dyn OutFile>> {
        let data = {
            let mut disk = self.disk.lock().unwrap();
            if disk.entries.contains_key(path) {
                return Err(io::Error::from(io::ErrorKind::AlreadyExists));
            }
            disk.next_ino += 1;
            let data = Arc::new(Mutex::new(Data {
                ino: disk.next_ino,
                links: 1,
                ..Data::default()
            }));
            disk.entries.insert(path.to_path_buf(), data.clone());
            data
        };
        Ok(self.handle(data))
    }

    fn open_existing(&self, path: &Path) -> io::Result<Box<dyn OutFile>> {
        let data = {
            let disk = self.disk.lock().unwrap();
            disk.entries
                .get(path)
                .cloned()
                .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?
        };
        Ok(self.handle(data))
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        let mut disk = self.disk.lock().unwrap();
        let data = disk
            .entries
            .remove(path)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        data.lock().unwrap().links = 0;
        Ok(())
    }

    fn rename_new(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut disk = self.disk.lock().unwrap();
        if disk.entries.contains_key(to) {
            return Err(io::Error::from(io::ErrorKind::AlreadyExists));
        }
        let data = disk
            .entries
            .remove(from)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        disk.entries.insert(to.to_path_buf(), data);
        Ok(())
    }

    fn replace(&self, from: &Path, to: &Path) -> io::Result<()> {
        let mut disk = self.disk.lock().unwrap();
        let data = disk
            .entries
            .remove(from)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        if let Some(old) = disk.entries.insert(to.to_path_buf(), data) {
            old.lock().unwrap().links = 0;
        }
        Ok(())
    }
}
