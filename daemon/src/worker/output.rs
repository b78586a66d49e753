//! The file half of exactly-once output for phase workers.
//!
//! A worker appends a batch of records to its output files, fsyncs them, and
//! only then commits, in one SQLite transaction, the files' new lengths and the
//! ids of the records in the batch (`Store::commit_checkpoint`). A crash before
//! that commit leaves bytes past the committed lengths; on resume `open` cuts
//! every file back to its committed length, and the records in the lost tail,
//! not being committed, are produced again. So each record ends up in the files
//! exactly once, whatever moment the process dies at (power loss aside: the
//! disk must honour fsync).
use std::fs::{File, OpenOptions};
use std::io::{self, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// A phase's output files, positioned at their ends.
#[derive(Debug)]
pub struct OutputFiles {
    files: Vec<(PathBuf, File)>,
    lengths: Vec<u64>,
    dirty: Vec<bool>,
}

impl OutputFiles {
    /// Opens (creating) each file and cuts it back to its committed length
    /// (`committed` may be shorter than `paths`: missing lengths are 0). A file
    /// shorter than its committed length was changed by someone else: refused.
    pub fn open(paths: &[PathBuf], committed: &[u64]) -> io::Result<OutputFiles> {
        let mut files = Vec::with_capacity(paths.len());
        let mut lengths = Vec::with_capacity(paths.len());
        for (i, path) in paths.iter().enumerate() {
            let keep = committed.get(i).copied().unwrap_or(0);
            let existed = path.exists();
            let mut file = OpenOptions::new()
                .create(true)
                .truncate(false)
                .read(true)
                .write(true)
                .open(path)?;
            let length = file.metadata()?.len();
            if length < keep {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{} is {length} bytes but {keep} were committed; it was changed \
                         outside todod",
                        path.display()
                    ),
                ));
            }
            if length > keep {
                file.set_len(keep)?;
                file.sync_all()?;
            }
            file.seek(SeekFrom::Start(keep))?;
            if !existed {
                sync_parent(path)?;
            }
            files.push((path.clone(), file));
            lengths.push(keep);
        }
        let dirty = vec![false; files.len()];
        Ok(OutputFiles {
            files,
            lengths,
            dirty,
        })
    }

    /// Appends one record (a line, newline added) to file `index`. Not durable
    /// until `sync`.
    pub fn append(&mut self, index: usize, line: &[u8]) -> io::Result<()> {
        let (_, file) = &mut self.files[index];
        file.write_all(line)?;
        file.write_all(b"\n")?;
        self.lengths[index] += line.len() as u64 + 1;
        self.dirty[index] = true;
        Ok(())
    }

    /// Makes everything appended durable; returns the lengths to commit.
    pub fn sync(&mut self) -> io::Result<Vec<u64>> {
        for ((_, file), dirty) in self.files.iter_mut().zip(self.dirty.iter_mut()) {
            if *dirty {
                file.sync_data()?;
                *dirty = false;
            }
        }
        Ok(self.lengths.clone())
    }

    pub fn lengths(&self) -> &[u64] {
        &self.lengths
    }
}

/// A new file's directory entry must be durable too, or a crash could lose the
/// file while its committed length says it holds records.
fn sync_parent(path: &Path) -> io::Result<()> {
    match path.parent().filter(|p| !p.as_os_str().is_empty()) {
        Some(parent) => File::open(parent)?.sync_all(),
        None => File::open(".")?.sync_all(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(path: &Path) -> Vec<String> {
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn an_uncommitted_tail_is_cut_on_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let paths = vec![
            dir.path().join("out.jsonl"),
            dir.path().join("failures.jsonl"),
        ];
        let mut files = OutputFiles::open(&paths, &[]).unwrap();
        files.append(0, b"{\"id\":\"a\"}").unwrap();
        files.append(1, b"{\"id\":\"b\"}").unwrap();
        let committed = files.sync().unwrap();
        // Appended and even synced, but the process dies before committing.
        files.append(0, b"{\"id\":\"c\"}").unwrap();
        files.sync().unwrap();
        drop(files);

        let mut files = OutputFiles::open(&paths, &committed).unwrap();
        assert_eq!(lines(&paths[0]), ["{\"id\":\"a\"}"]);
        files.append(0, b"{\"id\":\"c\"}").unwrap();
        files.sync().unwrap();
        assert_eq!(lines(&paths[0]), ["{\"id\":\"a\"}", "{\"id\":\"c\"}"]);
        assert_eq!(lines(&paths[1]), ["{\"id\":\"b\"}"]);
    }

    #[test]
    fn a_file_shorter_than_committed_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        std::fs::write(&path, b"x\n").unwrap();
        let err = OutputFiles::open(&[path], &[100]).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    }
}
