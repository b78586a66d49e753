//! A server a phase spec asks the daemon to run (`servers.NAME` in a
//! generation's or feasibility's spec, `[servers.NAME]` in a plan file):
//! its program, arguments and environment, and how it is watched. Checked
//! once, with refusals that name the field; plain logic but for finding
//! the program on disk.
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use todod_domain::Error;

use crate::phase::spec::{field, find_program, Boundaries};

/// The placeholder the daemon fills with the port it chose.
pub const PORT: &str = "{port}";

/// How an endpoint names a server of the spec instead of a URL.
pub const ENDPOINT_PREFIX: &str = "server:";

/// The server's name, when `endpoint` names one (`server:local`).
pub fn named(endpoint: &str) -> Option<&str> {
    endpoint.trim().strip_prefix(ENDPOINT_PREFIX)
}

/// The spec as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    command: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
    #[serde(default)]
    devices: Option<i64>,
    #[serde(default)]
    ready_timeout_seconds: Option<i64>,
    #[serde(default)]
    max_restarts: Option<i64>,
    #[serde(default)]
    restart_window_seconds: Option<i64>,
    #[serde(default)]
    restart_backoff_seconds: Option<i64>,
    #[serde(default)]
    stop_grace_seconds: Option<i64>,
    #[serde(default)]
    probe_every_seconds: Option<i64>,
    #[serde(default)]
    probe_timeout_seconds: Option<i64>,
    #[serde(default)]
    keep_idle_seconds: Option<i64>,
}

/// A checked server spec.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerSpec {
    /// The program (made canonical at the check) and its arguments, `{port}`
    /// among them or in `env`.
    pub command: Vec<String>,
    pub env: BTreeMap<String, String>,
    /// Accelerators it uses: what its hours count as device-hours.
    pub devices: u32,
    /// From its start until `/v1/models` and a one-token completion answer.
    pub ready_timeout_seconds: u64,
    /// Restarts allowed within `restart_window_seconds`; one more gives up.
    pub max_restarts: u32,
    pub restart_window_seconds: u64,
    /// The first wait before a restart; each next one doubles, up to 5 min.
    pub restart_backoff_seconds: u64,
    /// From SIGTERM to its process group until SIGKILL.
    pub stop_grace_seconds: u64,
    /// How often a ready server is probed (a one-token completion).
    pub probe_every_seconds: u64,
    /// A probe not answered within this restarts the server: a wedged
    /// engine or a frozen process answers nothing, or only `/health`.
    pub probe_timeout_seconds: u64,
    /// How long a server no task uses is kept before it is stopped (the next
    /// step of a plan usually comes within seconds).
    pub keep_idle_seconds: u64,
}

impl ServerSpec {
    /// Checks `servers.NAME` of a spec against what the operator allows.
    pub fn check(
        name: &str,
        value: &serde_json::Value,
        bounds: &Boundaries,
    ) -> Result<ServerSpec, Error> {
        ServerSpec::parse(name, value)?.allowed(name, bounds)
    }

    /// This parsed spec, its program found on disk (made canonical) and
    /// allowed by the operator, or the refusal that names the field.
    pub fn allowed(self, name: &str, bounds: &Boundaries) -> Result<ServerSpec, Error> {
        let spec = self;
        let at = |key: &str| field(&format!("servers.{name}.{key}"));
        let program = Path::new(&spec.command[0]);
        let found = find_program(program).ok_or_else(|| {
            Error::invalid(
                at("command[0]"),
                format!(
                    "{}: no such program (a bare name is looked up in the daemon's PATH)",
                    program.display()
                ),
            )
        })?;
        if !bounds.server_commands.contains(&found) {
            return Err(Error::NotAllowed {
                field: at("command[0]"),
                reason: format!(
                    "{} is not a program this daemon may start: its operator allows each one \
                     with --allow-server-command",
                    found.display()
                ),
            });
        }
        let mut spec = spec;
        spec.command[0] = found.display().to_string();
        Ok(spec)
    }

    /// Reads `servers.NAME` of a spec (a stored one: already checked).
    pub fn parse(name: &str, value: &serde_json::Value) -> Result<ServerSpec, Error> {
        check_name(name)?;
        let at = |key: &str| field(&format!("servers.{name}.{key}"));
        let raw: Raw = crate::phase::spec::parse(&value.to_string()).map_err(|e| {
            e.with_field(|f| f.replacen("spec", &field(&format!("servers.{name}")), 1))
        })?;
        if raw.command.first().is_none_or(|p| p.trim().is_empty()) {
            return Err(Error::invalid(
                at("command"),
                "must list the program and its arguments (an argv list, not a shell line)",
            ));
        }
        let with_port = raw
            .command
            .iter()
            .chain(raw.env.values())
            .any(|a| a.contains(PORT));
        if !with_port {
            return Err(Error::invalid(
                at("command"),
                "must say where the port goes, with {port} in an argument (or in env): the \
                 daemon picks a free port",
            ));
        }
        for key in raw.env.keys() {
            let good = !key.is_empty()
                && !key.starts_with(|c: char| c.is_ascii_digit())
                && key.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !good {
                return Err(Error::invalid(
                    at("env"),
                    format!("{key:?} is not a variable name"),
                ));
            }
        }
        let int =
            |key: &str, value: Option<i64>, default: i64, range: std::ops::RangeInclusive<i64>| {
                let value = value.unwrap_or(default);
                if range.contains(&value) {
                    Ok(value)
                } else {
                    Err(Error::invalid(
                        at(key),
                        format!(
                            "must be between {} and {} (got {value})",
                            range.start(),
                            range.end()
                        ),
                    ))
                }
            };
        let day = 86_400;
        Ok(ServerSpec {
            command: raw.command,
            env: raw.env,
            devices: int("devices", raw.devices, 1, 0..=4096)? as u32,
            ready_timeout_seconds: int(
                "ready_timeout_seconds",
                raw.ready_timeout_seconds,
                1800,
                1..=day,
            )? as u64,
            max_restarts: int("max_restarts", raw.max_restarts, 5, 0..=1000)? as u32,
            restart_window_seconds: int(
                "restart_window_seconds",
                raw.restart_window_seconds,
                3600,
                1..=30 * day,
            )? as u64,
            restart_backoff_seconds: int(
                "restart_backoff_seconds",
                raw.restart_backoff_seconds,
                5,
                0..=3600,
            )? as u64,
            stop_grace_seconds: int("stop_grace_seconds", raw.stop_grace_seconds, 30, 0..=3600)?
                as u64,
            probe_every_seconds: int("probe_every_seconds", raw.probe_every_seconds, 30, 1..=day)?
                as u64,
            probe_timeout_seconds: int(
                "probe_timeout_seconds",
                raw.probe_timeout_seconds,
                120,
                1..=day,
            )? as u64,
            keep_idle_seconds: int("keep_idle_seconds", raw.keep_idle_seconds, 30, 0..=day)? as u64,
        })
    }

    /// What tells two servers apart: the same name and spec is one server,
    /// whichever tasks use it.
    pub fn key(&self, name: &str) -> String {
        let json = serde_json::to_string(self).unwrap_or_default();
        let digest = Sha256::digest(format!("{name}\n{json}").as_bytes());
        let hex: String = digest.iter().take(6).map(|b| format!("{b:02x}")).collect();
        format!("{name}-{hex}")
    }

    /// The command and environment with `{port}` filled in.
    pub fn with_port(&self, port: u16) -> (Vec<String>, BTreeMap<String, String>) {
        let fill = |s: &String| s.replace(PORT, &port.to_string());
        (
            self.command.iter().map(fill).collect(),
            self.env.iter().map(|(k, v)| (k.clone(), fill(v))).collect(),
        )
    }

    pub fn stop_grace(&self) -> Duration {
        Duration::from_secs(self.stop_grace_seconds)
    }
}

/// A server's name: it names files in the state directory too.
fn check_name(name: &str) -> Result<(), Error> {
    let good = !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if good {
        Ok(())
    } else {
        Err(Error::invalid(
            field(&format!("servers.{name}")),
            "a server's name is 1 to 64 letters, digits, '-' or '_'",
        ))
    }
}

/// Each endpoint of a spec checked: a base URL (made plain), or a server of
/// the spec by name (`server:NAME`, checked by [`check_all`]).
pub fn check_endpoints(endpoints: &mut [String]) -> Result<(), Error> {
    for (i, url) in endpoints.iter_mut().enumerate() {
        if named(url).is_none() {
            *url = crate::phase::spec::endpoint(&format!("endpoints[{i}]"), url)?;
        }
    }
    Ok(())
}

/// A parsed spec's endpoints and servers checked against what the operator
/// allows, at creation: each URL made plain, each server's program found
/// and allowed (what a generation's and a feasibility's check share).
pub fn check_allowed(
    endpoints: &mut [String],
    servers: &mut BTreeMap<String, ServerSpec>,
    bounds: &Boundaries,
) -> Result<(), Error> {
    check_endpoints(endpoints)?;
    for (name, spec) in servers.iter_mut() {
        *spec = spec.clone().allowed(name, bounds)?;
    }
    Ok(())
}

/// The servers of a spec (`servers`), each checked, and the endpoints that
/// name them: every `server:NAME` must name one, and every server must be
/// named by an endpoint.
pub fn check_all(
    raw: &BTreeMap<String, serde_json::Value>,
    endpoints: &[String],
) -> Result<BTreeMap<String, ServerSpec>, Error> {
    let mut servers = BTreeMap::new();
    for (name, value) in raw {
        servers.insert(name.clone(), ServerSpec::parse(name, value)?);
    }
    for (i, endpoint) in endpoints.iter().enumerate() {
        if let Some(name) = named(endpoint) {
            if !servers.contains_key(name) {
                return Err(Error::invalid(
                    field(&format!("endpoints[{i}]")),
                    format!("names server {name:?}, which spec.servers does not define"),
                ));
            }
        }
    }
    for name in servers.keys() {
        if !endpoints.iter().any(|e| named(e) == Some(name.as_str())) {
            return Err(Error::invalid(
                field(&format!("servers.{name}")),
                format!("no endpoint names it (\"{ENDPOINT_PREFIX}{name}\")"),
            ));
        }
    }
    Ok(servers)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bounds_allowing(program: &Path) -> Boundaries {
        let mut bounds = Boundaries::default();
        bounds
            .server_commands
            .insert(std::fs::canonicalize(program).unwrap());
        bounds
    }

    #[test]
    fn a_program_the_operator_did_not_allow_is_refused_naming_the_flag() {
        let value = json!({"command": ["/bin/sh", "-c", "sleep 1", "{port}"]});
        let error = ServerSpec::check("local", &value, &Boundaries::default()).unwrap_err();
        match error {
            Error::NotAllowed { field, reason } => {
                assert_eq!(field, "spec.servers.local.command[0]");
                assert!(reason.contains("--allow-server-command"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        let bounds = bounds_allowing(Path::new("/bin/sh"));
        let spec = ServerSpec::check("local", &value, &bounds).unwrap();
        assert!(spec.command[0].ends_with("sh"));
        assert_eq!(spec.max_restarts, 5);
    }

    #[test]
    fn refusals_name_the_field() {
        let bounds = bounds_allowing(Path::new("/bin/sh"));
        let cases = [
            (json!({"command": []}), "spec.servers.local.command"),
            (
                json!({"command": ["/bin/sh"]}),
                "spec.servers.local.command",
            ),
            (
                json!({"command": ["/bin/sh", "{port}"], "devices": -1}),
                "spec.servers.local.devices",
            ),
            (
                json!({"command": ["/bin/sh", "{port}"], "env": {"A=B": "1"}}),
                "spec.servers.local.env",
            ),
            (
                json!({"command": ["/bin/sh", "{port}"], "colour": 1}),
                "spec.servers.local.colour",
            ),
            (
                json!({"command": ["/no/such/program", "{port}"]}),
                "spec.servers.local.command[0]",
            ),
        ];
        for (value, want) in cases {
            match ServerSpec::check("local", &value, &bounds) {
                Err(Error::Invalid { field, .. }) => assert_eq!(field, want, "{value}"),
                other => panic!("{value}: {other:?}"),
            }
        }
        let bad_name =
            ServerSpec::check("a/b", &json!({"command": ["/bin/sh", "{port}"]}), &bounds);
        assert!(matches!(bad_name, Err(Error::Invalid { .. })));
    }

    #[test]
    fn endpoints_and_servers_name_each_other() {
        let raw: BTreeMap<String, serde_json::Value> = [(
            "local".to_string(),
            json!({"command": ["/bin/sh", "{port}"]}),
        )]
        .into();
        assert!(check_all(&raw, &["server:local".into()]).is_ok());
        let missing = check_all(&raw, &["server:other".into()]).unwrap_err();
        assert!(
            missing.to_string().starts_with("spec.endpoints[0]"),
            "{missing}"
        );
        let unused = check_all(&raw, &["http://127.0.0.1:1/v1".into()]).unwrap_err();
        assert!(
            unused.to_string().starts_with("spec.servers.local"),
            "{unused}"
        );
    }

    #[test]
    fn the_port_fills_every_placeholder_and_the_key_follows_the_spec() {
        let spec = ServerSpec::parse(
            "local",
            &json!({"command": ["/bin/sh", "--port", "{port}"], "env": {"P": "x{port}"}}),
        )
        .unwrap();
        let (command, env) = spec.with_port(8123);
        assert_eq!(command[2], "8123");
        assert_eq!(env["P"], "x8123");
        let other = ServerSpec {
            devices: 8,
            ..spec.clone()
        };
        assert_ne!(spec.key("local"), other.key("local"));
        assert_eq!(spec.key("local"), spec.clone().key("local"));
    }
}
