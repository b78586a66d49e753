//! Checking phase specs on arrival: every refusal names the spec field
//! (`spec.concurrency: must be between 1 and 65536`), so that nothing knowable
//! when a task is created is found only when its run starts.
//!
//! [`Boundaries`] is what the operator allows: where phase files may live
//! (never inside the daemon's state directory, and only under `--data-root`
//! directories when any are given) and which environment variables may be
//! sent to servers as API keys.
use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::{Component, Path, PathBuf};

use serde::de::DeserializeOwned;

use super::files::{Entry, Fs, RealFs};
use todod_domain::Claim;
use todod_domain::Error;

/// The most requests a phase may keep in flight: 256 on each of 256
/// serving replicas. Each one holds a connection (a file descriptor) and a
/// few kB; the daemon lifts its open-files limit to the hard limit at start.
pub const MAX_CONCURRENCY: i64 = 65_536;

/// API keys may come from variables with this prefix without being named
/// with `--secret-env`.
pub const SECRET_PREFIX: &str = "TODOD_SECRET_";

/// What the operator lets phase tasks touch.
#[derive(Debug, Clone, Default)]
pub struct Boundaries {
    /// The daemon's state directory (canonical): no phase file may be in it.
    pub state_dir: Option<PathBuf>,
    /// When non-empty, every phase path must be inside one of these (canonical).
    pub data_roots: Vec<PathBuf>,
    /// Environment variables that specs may name as `api_key_env`.
    pub secret_env: BTreeSet<String>,
    /// Files an upstream task of the same pipeline will write: accepted as
    /// inputs before they exist (a pipeline is created before it runs).
    pub promised: BTreeSet<PathBuf>,
    /// Programs a spec's `servers` may start (canonical paths), each one
    /// allowed by the operator (`--allow-server-command`); none by default.
    pub server_commands: BTreeSet<PathBuf>,
}

impl Boundaries {
    /// Canonicalises the directories; they must exist.
    pub fn new(
        state_dir: Option<&Path>,
        data_roots: &[PathBuf],
        secret_env: impl IntoIterator<Item = String>,
    ) -> std::io::Result<Boundaries> {
        Ok(Boundaries {
            state_dir: state_dir.map(std::fs::canonicalize).transpose()?,
            data_roots: data_roots
                .iter()
                .map(std::fs::canonicalize)
                .collect::<Result<_, _>>()?,
            secret_env: secret_env.into_iter().collect(),
            promised: BTreeSet::new(),
            server_commands: BTreeSet::new(),
        })
    }

    /// These boundaries, also allowing specs to start `programs` (each found
    /// as a spec's would be: a bare name in PATH; made canonical).
    pub fn allowing_server_commands(mut self, programs: &[PathBuf]) -> Result<Boundaries, String> {
        for program in programs {
            let found = find_program(program)
                .ok_or_else(|| format!("{}: no such executable program", program.display()))?;
            self.server_commands.insert(found);
        }
        Ok(self)
    }

    /// These boundaries, also accepting `paths` (outputs of upstream tasks)
    /// as inputs that do not exist yet.
    pub fn with_promised(&self, paths: impl IntoIterator<Item = PathBuf>) -> Boundaries {
        let mut bounds = self.clone();
        bounds.promised.extend(paths);
        bounds
    }

    pub fn exposes(&self, name: &str) -> bool {
        self.secret_env.contains(name)
            || (name.starts_with(SECRET_PREFIX) && name.len() > SECRET_PREFIX.len())
    }

    /// Refuses a canonical path that is inside the state directory or outside
    /// every data root.
    pub fn check_place(&self, field: &str, canonical: &Path) -> Result<(), Error> {
        if let Some(state) = &self.state_dir {
            if canonical.starts_with(state) {
                return Err(Error::invalid(
                    field,
                    format!(
                        "{} is inside the daemon's state directory; phase files may not live there",
                        canonical.display()
                    ),
                ));
            }
        }
        if !self.data_roots.is_empty() && !self.data_roots.iter().any(|r| canonical.starts_with(r))
        {
            let roots: Vec<String> = self
                .data_roots
                .iter()
                .map(|r| r.display().to_string())
                .collect();
            return Err(Error::invalid(
                field,
                format!(
                    "{} is outside the data roots this daemon may use ({})",
                    canonical.display(),
                    roots.join(", ")
                ),
            ));
        }
        Ok(())
    }
}

/// The program's canonical path: as given when it has a '/', else the
/// first executable of that name in PATH.
pub fn find_program(program: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let executable = |path: &Path| {
        std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    let candidate = if program.components().count() > 1 || program.is_absolute() {
        Some(program.to_path_buf())
    } else {
        let path = std::env::var_os("PATH")?;
        std::env::split_paths(&path)
            .map(|dir| dir.join(program))
            .find(|p| executable(p))
    }?;
    let canonical = std::fs::canonicalize(candidate).ok()?;
    executable(&canonical).then_some(canonical)
}

/// `spec.<path>`: the name a refusal gives a spec field.
pub fn field(path: &str) -> String {
    if path.is_empty() || path == "." {
        "spec".to_string()
    } else {
        format!("spec.{path}")
    }
}

/// Parses a spec into `T`; a refusal names the field (`spec.endpoints[1]`).
pub fn parse<T: DeserializeOwned>(json: &str) -> Result<T, Error> {
    let mut de = serde_json::Deserializer::from_str(json);
    let parsed: Result<T, _> = serde_path_to_error::deserialize(&mut de);
    match parsed {
        Ok(value) => {
            de.end()
                .map_err(|e| Error::invalid("spec", format!("trailing characters: {e}")))?;
            Ok(value)
        }
        Err(error) => {
            let path = error.path().to_string();
            let inner = error.into_inner();
            let message = strip_location(&inner.to_string());
            // serde names an unknown field in its message and not in the path.
            if let Some(rest) = message.strip_prefix("unknown field `") {
                if let Some((name, expected)) = rest.split_once('`') {
                    // The path already ends with the unknown field's name.
                    let full = if path == "." || path.is_empty() {
                        name.to_string()
                    } else {
                        path.clone()
                    };
                    return Err(Error::invalid(
                        field(&full),
                        format!(
                            "unknown field{}",
                            expected.replacen(", expected", "; expected", 1)
                        ),
                    ));
                }
            }
            if let Some(rest) = message.strip_prefix("missing field `") {
                if let Some((name, _)) = rest.split_once('`') {
                    let full = if path == "." || path.is_empty() {
                        name.to_string()
                    } else {
                        format!("{path}.{name}")
                    };
                    return Err(Error::invalid(field(&full), "is required"));
                }
            }
            Err(Error::invalid(field(&path), message))
        }
    }
}

/// serde_json ends its messages with " at line 1 column 207", which says
/// nothing to someone who sent a JSON object over gRPC.
fn strip_location(message: &str) -> String {
    match message.rfind(" at line ") {
        Some(at) if message[at..].contains(" column ") => message[..at].to_string(),
        _ => message.to_string(),
    }
}

/// An integer within `range`, or a refusal that names the field and the range.
/// A spec's `shards`: how many shards the task is split into (1, the
/// default: not split).
pub fn shards(value: Option<i64>) -> Result<u32, Error> {
    let most = i64::from(todod_domain::shards::MAX_SHARDS);
    Ok(int_in("shards", value.unwrap_or(1), 1..=most)? as u32)
}

pub fn int_in(name: &str, value: i64, range: std::ops::RangeInclusive<i64>) -> Result<i64, Error> {
    if range.contains(&value) {
        Ok(value)
    } else {
        Err(Error::invalid(
            field(name),
            format!(
                "must be between {} and {} (got {value})",
                range.start(),
                range.end()
            ),
        ))
    }
}

/// A fraction in [0, 1].
pub fn share(name: &str, value: f64) -> Result<f64, Error> {
    if (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(Error::invalid(
            field(name),
            format!("must be a fraction between 0 and 1 (got {value})"),
        ))
    }
}

fn absolute(name: &str, path: &Path) -> Result<(), Error> {
    if !path.is_absolute() {
        return Err(Error::invalid(
            field(name),
            format!(
                "{:?} is relative; the daemon needs an absolute path",
                path.display().to_string()
            ),
        ));
    }
    if path
        .components()
        .any(|c| matches!(c, Component::ParentDir | Component::CurDir))
    {
        return Err(Error::invalid(
            field(name),
            format!(
                "{:?} has . or .. in it; give the path plainly",
                path.display().to_string()
            ),
        ));
    }
    Ok(())
}

/// An input file: absolute, there, a regular file, readable, and where the
/// operator allows. Returns its canonical path.
pub fn input_file(name: &str, path: &Path, bounds: &Boundaries) -> Result<PathBuf, Error> {
    absolute(name, path)?;
    if bounds.promised.contains(path) && !path.exists() {
        // Written by an upstream task; its own check placed it already.
        return Ok(path.to_path_buf());
    }
    let canonical = std::fs::canonicalize(path).map_err(|e| {
        Error::invalid(
            field(name),
            format!("{} cannot be read: {}", path.display(), plain_io(&e)),
        )
    })?;
    bounds.check_place(&field(name), &canonical)?;
    match RealFs.stat(&canonical) {
        Ok(Entry::Regular { .. }) => {}
        _ => {
            return Err(Error::invalid(
                field(name),
                format!("{} is not a regular file", path.display()),
            ))
        }
    }
    super::files::open_input(&canonical).map_err(|e| {
        Error::invalid(
            field(name),
            format!("{} cannot be read: {}", path.display(), plain_io(&e)),
        )
    })?;
    Ok(canonical)
}

/// An input directory (a model's tokenizer files): absolute, there, a
/// directory, and where the operator allows. Returns its canonical path.
pub fn input_dir(name: &str, path: &Path, bounds: &Boundaries) -> Result<PathBuf, Error> {
    absolute(name, path)?;
    let canonical = std::fs::canonicalize(path).map_err(|e| {
        Error::invalid(
            field(name),
            format!("{} cannot be read: {}", path.display(), plain_io(&e)),
        )
    })?;
    bounds.check_place(&field(name), &canonical)?;
    if !canonical.is_dir() {
        return Err(Error::invalid(
            field(name),
            format!("{} is not a directory", path.display()),
        ));
    }
    Ok(canonical)
}

/// An output file the task will create: absolute, in an existing directory,
/// where the operator allows, and free: nothing there unless `overwrite`,
/// and even then only a regular file. Returns the claim on its path.
pub fn output_file(
    name: &str,
    path: &Path,
    overwrite: bool,
    bounds: &Boundaries,
) -> Result<Claim, Error> {
    absolute(name, path)?;
    let (Some(parent), Some(file_name)) = (path.parent(), path.file_name()) else {
        return Err(Error::invalid(field(name), "must name a file"));
    };
    let dir = std::fs::canonicalize(parent).map_err(|e| {
        Error::invalid(
            field(name),
            format!(
                "directory {} cannot be used: {}",
                parent.display(),
                plain_io(&e)
            ),
        )
    })?;
    if !dir.is_dir() {
        return Err(Error::invalid(
            field(name),
            format!("{} is not a directory", parent.display()),
        ));
    }
    let canonical = dir.join(file_name);
    bounds.check_place(&field(name), &canonical)?;
    let taken = |why: &str| Error::PathTaken {
        field: field(name),
        path: canonical.display().to_string(),
        why: why.to_string(),
    };
    match RealFs.stat(&canonical) {
        Ok(Entry::Missing) => {}
        Ok(Entry::Regular { .. }) if overwrite => {}
        Ok(Entry::Regular { .. }) => {
            return Err(taken(
                "already exists; a phase never writes into a file it did not create \
                 (set \"overwrite\": true to replace it)",
            ))
        }
        Ok(Entry::Symlink) => {
            return Err(Error::invalid(
                field(name),
                format!("{} is a symbolic link; refused", canonical.display()),
            ))
        }
        Ok(Entry::Other) => {
            return Err(Error::invalid(
                field(name),
                format!(
                    "{} exists and is not a regular file; refused",
                    canonical.display()
                ),
            ))
        }
        Err(e) => {
            return Err(Error::invalid(
                field(name),
                format!("{} cannot be used: {}", canonical.display(), plain_io(&e)),
            ))
        }
    }
    Ok(Claim {
        field: field(name),
        path: canonical.display().to_string(),
    })
}

/// Claims each of `outputs` (spec field, path) as [`output_file`] does, and
/// makes each path its canonical one. A path the task already claims
/// (`own`, on an update) is its own file and may exist; so may any with
/// `overwrite`.
pub fn claim_outputs(
    outputs: &mut [(&str, &mut PathBuf)],
    overwrite: bool,
    own: &[String],
    bounds: &Boundaries,
) -> Result<Vec<Claim>, Error> {
    let mut claims = Vec::with_capacity(outputs.len());
    for (name, path) in outputs.iter_mut() {
        let overwrite = overwrite || own.contains(&path.display().to_string());
        let claim = output_file(name, path, overwrite, bounds)?;
        **path = PathBuf::from(&claim.path);
        claims.push(claim);
    }
    Ok(claims)
}

/// Refuses a set of outputs and inputs in which one path appears twice.
pub fn distinct(claims: &[Claim], inputs: &[(String, PathBuf)]) -> Result<(), Error> {
    for (i, claim) in claims.iter().enumerate() {
        if let Some(other) = claims[..i].iter().find(|c| c.path == claim.path) {
            return Err(Error::invalid(
                &claim.field,
                format!("{} is also {}", claim.path, other.field),
            ));
        }
        if let Some((input, _)) = inputs
            .iter()
            .find(|(_, p)| p.display().to_string() == claim.path)
        {
            return Err(Error::invalid(
                &claim.field,
                format!("{} is also the input {input}", claim.path),
            ));
        }
    }
    Ok(())
}

/// An error of the file system in plain words, without the OS error number.
pub fn plain_io(error: &std::io::Error) -> String {
    let text = error.to_string();
    match text.find(" (os error") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// A base URL of an OpenAI-compatible server: http or https, with a host.
pub fn endpoint(name: &str, url: &str) -> Result<String, Error> {
    let url = url.trim().trim_end_matches('/');
    let parsed = reqwest::Url::parse(url)
        .map_err(|e| Error::invalid(field(name), format!("{url:?} is not a URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(Error::invalid(
            field(name),
            format!(
                "{url:?}: the scheme must be http or https, not {}",
                parsed.scheme()
            ),
        ));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(Error::invalid(field(name), format!("{url:?} has no host")));
    }
    if parsed.query().is_some() || parsed.fragment().is_some() {
        return Err(Error::invalid(
            field(name),
            format!("{url:?}: a base URL takes no query or fragment"),
        ));
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(Error::invalid(
            field(name),
            format!("{url:?}: put credentials in api_key_env, not in the URL"),
        ));
    }
    Ok(url.to_string())
}

/// Whether a base URL's host is this machine (so that a key sent over plain
/// http stays on it).
pub fn is_loopback(url: &str) -> bool {
    let Ok(parsed) = reqwest::Url::parse(url) else {
        return false;
    };
    match parsed.host() {
        Some(url::Host::Domain(host)) => host.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip).is_loopback(),
        Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip).is_loopback(),
        None => false,
    }
}

/// The API key variable of a spec: one the operator exposed, set, valid as an
/// HTTP header, and sent only over https or to this machine unless the spec
/// says `send_key_over_http`.
pub fn api_key(
    name: &str,
    variable: &str,
    endpoints: &[String],
    over_http: bool,
    bounds: &Boundaries,
) -> Result<(), Error> {
    if !bounds.exposes(variable) {
        return Err(Error::invalid(
            field(name),
            format!(
                "{variable:?} is not a variable this daemon exposes to tasks; start todod with \
                 --secret-env {variable} (or name the variable {SECRET_PREFIX}...)"
            ),
        ));
    }
    let value = std::env::var(variable).map_err(|_| {
        Error::invalid(
            field(name),
            format!("{variable} is not set in the daemon's environment"),
        )
    })?;
    todod_inference::check_key_value(variable, &value)
        .map_err(|why| Error::invalid(field(name), why))?;
    if !over_http {
        if let Some(plain) = endpoints
            .iter()
            .find(|e| e.starts_with("http://") && !is_loopback(e))
        {
            return Err(Error::invalid(
                field(name),
                format!(
                    "the key would go in clear text to {plain}; use https, or set \
                     \"send_key_over_http\": true if that network is trusted"
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Sample {
        prompts: String,
        #[serde(default)]
        concurrency: Option<i64>,
        #[serde(default)]
        endpoints: Vec<String>,
    }

    #[test]
    fn parse_errors_name_the_spec_field() {
        let err = parse::<Sample>(r#"{"prompts": "a", "concurrency": "x"}"#).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("spec.concurrency: invalid type"),
            "{err}"
        );
        assert!(!err.to_string().contains("line 1"), "{err}");
        let err = parse::<Sample>(r#"{"prompts": "a", "bogus": 1}"#).unwrap_err();
        assert!(
            err.to_string().starts_with("spec.bogus: unknown field"),
            "{err}"
        );
        let err = parse::<Sample>(r#"{"concurrency": 1}"#).unwrap_err();
        assert_eq!(err.to_string(), "spec.prompts: is required");
        let err = parse::<Sample>(r#"{"prompts": "a", "endpoints": ["x", 5]}"#).unwrap_err();
        assert!(err.to_string().starts_with("spec.endpoints[1]:"), "{err}");
        let err = int_in("concurrency", -1, 1..=MAX_CONCURRENCY).unwrap_err();
        assert_eq!(
            err.to_string(),
            "spec.concurrency: must be between 1 and 65536 (got -1)"
        );
    }

    #[test]
    fn endpoints_must_be_http_urls() {
        assert_eq!(
            endpoint("endpoints[0]", "http://h:1/v1/").unwrap(),
            "http://h:1/v1"
        );
        for bad in [
            "file:///etc/passwd",
            "ftp://h/",
            "localhost:8000",
            "http://",
            "http://u:p@h/",
        ] {
            assert!(endpoint("endpoints[0]", bad).is_err(), "{bad}");
        }
        assert!(is_loopback("http://127.0.0.1:9") && is_loopback("http://[::1]:9"));
        assert!(is_loopback("http://localhost:9") && !is_loopback("http://10.0.0.1:9"));
    }

    #[test]
    fn outputs_are_refused_inside_the_state_dir_or_when_taken() {
        let state = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        let bounds = Boundaries::new(Some(state.path()), &[], Vec::new()).unwrap();
        let db = state.path().join("todod.db");
        std::fs::write(&db, b"db").unwrap();
        assert!(output_file("output", &db, true, &bounds).is_err());
        assert!(output_file("output", &state.path().join("new.jsonl"), false, &bounds).is_err());
        let existing = data.path().join("old.jsonl");
        std::fs::write(&existing, b"x").unwrap();
        let err = output_file("output", &existing, false, &bounds).unwrap_err();
        assert!(matches!(err, Error::PathTaken { .. }), "{err}");
        assert!(output_file("output", &existing, true, &bounds).is_ok());
        assert!(output_file("output", &data.path().join("dir/../x"), false, &bounds).is_err());
        assert!(output_file("output", Path::new("rel.jsonl"), false, &bounds).is_err());
        let confined = Boundaries::new(None, &[data.path().to_path_buf()], Vec::new()).unwrap();
        assert!(output_file("output", &data.path().join("ok"), false, &confined).is_ok());
        assert!(output_file("output", &state.path().join("no"), false, &confined).is_err());
    }
}
