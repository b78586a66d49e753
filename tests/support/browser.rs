//! A real browser for the status page's tests: Debian's Chromium, headless,
//! driven through ChromeDriver's W3C WebDriver HTTP API (plain JSON over
//! HTTP, with reqwest). `.ci/run` installs both packages; on a machine
//! without them the test installs them itself where it may (as root, or
//! with password-less sudo), as the real-server test builds its server, and
//! otherwise fails with the command that installs them: never a silent skip
//! (`TODOD_SKIP_BROWSER=1` skips it, saying so).
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{json, Value};

pub struct Browser {
    driver: Child,
    base: String,
    session: String,
    http: reqwest::Client,
}

const INSTALL: &str = "apt-get install -y chromium chromium-driver";

fn find(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|dir| PathBuf::from(dir).join(name))
        .find(|p| p.is_file())
}

/// Installs Debian's Chromium and ChromeDriver when this process may (root,
/// or sudo without a password); otherwise leaves it to the caller's panic.
fn install() {
    let root = Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
    let sudo = !root
        && Command::new("sudo")
            .args(["-n", "true"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if !root && !sudo {
        return;
    }
    eprintln!("chromium or chromedriver is missing: {INSTALL}");
    let apt = |args: &[&str]| {
        let mut command = if sudo {
            let mut c = Command::new("sudo");
            c.args(["-n", "apt-get"]);
            c
        } else {
            Command::new("apt-get")
        };
        command
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !(apt(&["update", "-qq"]) && apt(&["install", "-y", "-qq", "chromium", "chromium-driver"])) {
        eprintln!("{INSTALL} failed");
    }
}

impl Browser {
    /// A headless Chromium at `width`×`height`, or `None` when the
    /// environment asks to skip browser tests.
    pub async fn start(width: u32, height: u32) -> Option<Browser> {
        if std::env::var_os("TODOD_SKIP_BROWSER").is_some() {
            eprintln!("TODOD_SKIP_BROWSER is set: the browser test is skipped");
            return None;
        }
        if find("chromedriver").is_none() || find("chromium").is_none() {
            install();
        }
        let driver_path = find("chromedriver")
            .unwrap_or_else(|| panic!("chromedriver is not installed: {INSTALL}"));
        let chromium = find("chromium")
            .or_else(|| find("chromium-browser"))
            .unwrap_or_else(|| panic!("chromium is not installed: {INSTALL}"));
        let mut driver = Command::new(driver_path)
            .arg("--port=0")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        // "ChromeDriver was started successfully on port 40675."
        let mut lines = BufReader::new(driver.stdout.take().expect("stdout")).lines();
        let port = loop {
            let line = lines
                .next()
                .expect("chromedriver said nothing of its port")
                .expect("read chromedriver");
            if let Some(rest) = line
                .split("on port ")
                .nth(1)
                .filter(|_| line.contains("success"))
            {
                break rest
                    .trim_end_matches('.')
                    .trim()
                    .parse::<u16>()
                    .expect("port");
            }
        };
        // Keep draining its output so it never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": chromium,
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--no-first-run",
                         format!("--window-size={width},{height}")],
            },
        }}});
        let answer: Value = http
            .post(format!("{base}/session"))
            .json(&caps)
            .send()
            .await
            .expect("new session")
            .json()
            .await
            .expect("session answer");
        let session = answer["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no browser session: {answer}"))
            .to_string();
        Some(Browser {
            driver,
            base,
            session,
            http,
        })
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/session/{}{path}", self.base, self.session);
        let mut request = self.http.request(method, url);
        if let Some(body) = body {
            request = request.json(&body);
        }
        let answer: Value = request
            .send()
            .await
            .expect("webdriver call")
            .json()
            .await
            .expect("webdriver answer");
        if answer["value"]["error"].is_string() {
            panic!("webdriver {path}: {}", answer["value"]);
        }
        answer["value"].clone()
    }

    pub async fn goto(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({"url": url})))
            .await;
    }

    /// Runs `script` (a function body: `return ...`) in the page.
    pub async fn eval(&self, script: &str) -> Value {
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
        .await
    }

    /// Evaluates `script` until it returns something truthy; panics with
    /// `what` after `limit`.
    pub async fn until(&self, what: &str, limit: Duration, script: &str) -> Value {
        let started = Instant::now();
        loop {
            let value = self.eval(script).await;
            let truthy = match &value {
                Value::Null | Value::Bool(false) => false,
                Value::String(s) => !s.is_empty(),
                _ => true,
            };
            if truthy {
                return value;
            }
            assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    pub async fn resize(&self, width: u32, height: u32) {
        self.call(
            reqwest::Method::POST,
            "/window/rect",
            Some(json!({"width": width, "height": height})),
        )
        .await;
    }

    /// A PNG of the viewport.
    pub async fn screenshot(&self) -> Vec<u8> {
        let b64 = self.call(reqwest::Method::GET, "/screenshot", None).await;
        base64::engine::general_purpose::STANDARD
            .decode(b64.as_str().expect("base64"))
            .expect("a PNG")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // Ending the driver ends its browser.
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Where a test keeps what a person may want to look at after CI:
/// `$TODOD_TEST_ARTIFACTS`, else `target/test-artifacts`.
pub fn artifacts_dir() -> PathBuf {
    let dir = std::env::var_os("TODOD_TEST_ARTIFACTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            // The test binary is target/<profile>/deps/<name>.
            let exe = std::env::current_exe().expect("test binary");
            let target = exe.ancestors().nth(3).expect("target dir").to_path_buf();
            target.join("test-artifacts")
        });
    std::fs::create_dir_all(&dir).expect("artifacts dir");
    dir
}
