//! The daemon process's own figures, read from `/proc/self` (Linux); on
//! another system, or when `/proc` cannot be read, they are left out.

/// What the process uses now.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Usage {
    pub resident_bytes: Option<u64>,
    pub open_fds: Option<u64>,
    pub max_fds: Option<u64>,
    pub cpu_seconds: Option<f64>,
}

pub fn usage() -> Usage {
    Usage {
        resident_bytes: std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| resident_bytes(&s)),
        open_fds: std::fs::read_dir("/proc/self/fd")
            .ok()
            .map(|dir| dir.count() as u64),
        max_fds: std::fs::read_to_string("/proc/self/limits")
            .ok()
            .and_then(|s| max_fds(&s)),
        cpu_seconds: std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|s| cpu_seconds(&s, clock_ticks())),
    }
}

fn clock_ticks() -> f64 {
    // SAFETY: sysconf only reads a configuration value.
    let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if ticks > 0 {
        ticks as f64
    } else {
        100.0
    }
}

/// `VmRSS:    123456 kB` in `/proc/self/status`.
fn resident_bytes(status: &str) -> Option<u64> {
    status_bytes(status, "VmRSS")
}

/// A `NAME:    123456 kB` line of a `/proc/PID/status`, in bytes.
fn status_bytes(status: &str, name: &str) -> Option<u64> {
    let line = status.lines().find(|l| {
        l.strip_prefix(name)
            .is_some_and(|rest| rest.starts_with(':'))
    })?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Another process's figures, for benchmarks and tests that watch a
/// daemon or a mock from outside: a `status` line in bytes (`VmRSS`, the
/// peak `VmHWM`), and its CPU time so far.
pub mod of {
    pub fn status_bytes(pid: u32, name: &str) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        super::status_bytes(&status, name)
    }

    pub fn cpu_seconds(pid: u32) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        super::cpu_seconds(&stat, super::clock_ticks())
    }
}

/// The soft limit of `Max open files` in `/proc/self/limits`.
fn max_fds(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// utime + stime (fields 14 and 15) of `/proc/self/stat`, in seconds. The
/// command name (field 2) may hold spaces and parentheses: fields are
/// counted after its last `)`.
fn cpu_seconds(stat: &str, ticks: f64) -> Option<f64> {
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace().skip(11);
    let user: f64 = fields.next()?.parse().ok()?;
    let system: f64 = fields.next()?.parse().ok()?;
    Some((user + system) / ticks)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_proc_formats() {
        assert_eq!(
            resident_bytes("Name:\ttodod\nVmRSS:\t  2048 kB\n"),
            Some(2048 * 1024)
        );
        assert_eq!(resident_bytes("Name: x\n"), None);
        let status = "VmHWM:\t  4096 kB\nVmRSS:\t  2048 kB\n";
        assert_eq!(status_bytes(status, "VmHWM"), Some(4096 * 1024));
        assert_eq!(status_bytes(status, "VmRS"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(max_fds(limits), Some(1024));
        // A command name with a space and a parenthesis.
        let stat = "42 (to d) d) S 1 42 42 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 1 0";
        assert_eq!(cpu_seconds(stat, 100.0), Some(3.0));
    }

    #[test]
    fn reads_this_process() {
        if cfg!(target_os = "linux") {
            let usage = usage();
            assert!(usage.resident_bytes.unwrap() > 0);
            assert!(usage.open_fds.unwrap() > 0);
            assert!(usage.cpu_seconds.is_some());
        }
    }
}
