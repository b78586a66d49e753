//! Where a plan file's phases put their files, beside what the operator
//! allows (`spec::Boundaries`): the output directory made as `mkdir -p`
//! would (only where phase files may go), and taken back unless the apply
//! goes through; every path made canonical, so that one step's output is
//! the next one's input exactly and the kinds' checks see plain paths.
use std::path::{Path, PathBuf};

use super::spec::{plain_io, Boundaries};
use todod_domain::Error;

/// Directories an apply made for `output_dir`, removed again (if still
/// empty) unless the apply went through.
#[derive(Default)]
pub struct MadeDirs(Vec<PathBuf>);

impl MadeDirs {
    /// The apply went through: the directories stay.
    pub fn keep(mut self) {
        self.0.clear();
    }
}

impl Drop for MadeDirs {
    fn drop(&mut self) {
        for dir in self.0.iter().rev() {
            let _ = std::fs::remove_dir(dir);
        }
    }
}

/// `path` made canonical; a refusal names `field`.
pub fn canonical(path: &Path, field: &str) -> Result<PathBuf, Error> {
    std::fs::canonicalize(path).map_err(|e| {
        Error::invalid(
            field,
            format!("{} cannot be used: {}", path.display(), plain_io(&e)),
        )
    })
}

/// The output directory, canonical, made if missing (where `bounds` allow
/// phase files), with the directories it made.
pub fn make_output_dir(out: &Path, bounds: &Boundaries) -> Result<(PathBuf, MadeDirs), Error> {
    let mut made = MadeDirs::default();
    if !out.exists() {
        let mut existing = out;
        let mut rest = Vec::new();
        while !existing.exists() {
            rest.push(existing.file_name().unwrap_or_default());
            existing = existing.parent().unwrap_or(Path::new("/"));
        }
        let mut target = canonical(existing, "output_dir")?;
        for part in rest.iter().rev() {
            if part.is_empty() || *part == ".." || *part == "." {
                return Err(Error::invalid(
                    "output_dir",
                    format!("{} has . or .. in it; give it plainly", out.display()),
                ));
            }
            target.push(part);
        }
        bounds.check_place("output_dir", &target)?;
        let mut at = target.clone();
        let mut missing = Vec::new();
        while !at.exists() {
            missing.push(at.clone());
            if !at.pop() {
                break;
            }
        }
        for dir in missing.into_iter().rev() {
            std::fs::create_dir(&dir).map_err(|e| {
                Error::invalid(
                    "output_dir",
                    format!("{} cannot be made: {}", dir.display(), plain_io(&e)),
                )
            })?;
            made.0.push(dir);
        }
    }
    let out = canonical(out, "output_dir")?;
    if !out.is_dir() {
        return Err(Error::invalid(
            "output_dir",
            format!("{} is not a directory", out.display()),
        ));
    }
    Ok((out, made))
}
