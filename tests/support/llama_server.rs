//! llama.cpp's `llama-server` serving SmolLM2-135M on this machine's CPU,
//! built by `scripts/local-backend` (which `.ci/run` runs first), for the
//! tests that need a real server.
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use serde_json::Value;

/// `scripts/local-backend start --foreground` on a free port; stopped on drop.
pub struct LlamaServer {
    child: Child,
    pub url: String,
}

impl LlamaServer {
    pub fn start() -> LlamaServer {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/local-backend");
        let paths = Command::new(&script)
            .arg("paths")
            .output()
            .expect("run scripts/local-backend paths (needs python3)");
        let paths: Value = serde_json::from_slice(&paths.stdout).expect("paths JSON");
        let server = paths["server"].as_str().unwrap_or_default();
        if !Path::new(server).exists() {
            // `start` builds it first: several minutes, once per machine
            // (.ci/run builds it before the tests).
            eprintln!(
                "real_server: {server} is not built yet; scripts/local-backend builds it now"
            );
        }
        let mut child = Command::new(&script)
            .args(["start", "--foreground", "--parallel", "8"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start llama-server");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .expect("read the server's URL");
        assert!(
            line.starts_with("http://"),
            "REAL SERVER MISSING: scripts/local-backend could not build or start llama-server \
             (its messages are above; it needs python3, a C++ compiler and PyPI); it said {line:?}"
        );
        LlamaServer {
            child,
            url: line.trim().to_string(),
        }
    }
}

impl Drop for LlamaServer {
    fn drop(&mut self) {
        // SIGTERM: the script stops llama-server before it exits.
        unsafe {
            libc::kill(self.child.id() as i32, libc::SIGTERM);
        }
        let _ = self.child.wait();
    }
}
