//! The status page in a real browser (headless Chromium through
//! WebDriver), during a mock-backed generation held to its feasibility
//! projection: the progress on screen changes through server-sent events
//! (no reload), the throughput chart carries the projection band, failures
//! are shown by class, a hostile task title is shown as text and runs
//! nothing, and the page fits a phone. Screenshots are kept as test
//! artifacts. Also: the page's access rules (401 without the token or a
//! session, a login code that works once).
use std::path::Path;
use std::time::Duration;

use serde_json::{json, Value};
use todod_e2e::browser::{artifacts_dir, Browser};
use todod_e2e::gen::write_prompts;
use todod_e2e::mock_openai::{Fault, MockOpenAi, Settings};
use todod_e2e::scrape::get;
use todod_e2e::{connect, create_phase, item, proto, wait_task, write_request, Target, TestDaemon};

const TOKEN: &str = "page-token-0123456789abcdef";
/// A task title that would run script if the page spliced it as markup.
const HOSTILE: &str =
    "<img src=x onerror=\"window.__pwned=1\"><script>window.__pwned=2</script> & \"quoted\"";

fn generation_spec(dir: &Path, url: &str) -> Value {
    json!({
        "prompts": dir.join("prompts.jsonl"),
        "output": dir.join("out.jsonl"),
        "failures": dir.join("failures.jsonl"),
        "endpoints": [url],
        "model": "mock-model",
        "max_tokens": 64,
        "stream": true,
        "concurrency": "auto",
    })
}

fn sweep_spec(dir: &Path) -> Value {
    json!({
        "concurrency": [2],
        "window": {"min_requests": 48, "min_seconds": 1.5, "max_seconds": 30},
        "warmup": {"requests": 2, "max_tokens": 8, "timeout_seconds": 5},
        "seed": 7,
        "sample_size": 200,
        "report": dir.join("feasibility.html"),
    })
}

fn lines(path: &Path) -> usize {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_browser_follows_a_generation_live_with_its_projection_band() {
    let Some(browser) = Browser::start(1000, 1400).await else {
        return;
    };
    // About 50 records/s: the run lasts long enough to be watched.
    let mock = MockOpenAi::start(Settings {
        latency: Duration::from_millis(40),
        capacity: 2,
        keep_bodies: false,
        output_tokens: Some((10, 30)),
        ..Settings::default()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    write_prompts(&dir.path().join("prompts.jsonl"), 1500, false);
    let daemon = TestDaemon::start_with(todod::server::Options {
        token: Some(TOKEN.into()),
        ..Default::default()
    })
    .await;
    let mut c = connect(Target {
        url: daemon.url(),
        token: Some(TOKEN.into()),
    })
    .await;
    let feasibility = create_phase(
        &mut c,
        "page",
        "feasibility",
        &sweep_spec(dir.path()).to_string(),
        &[],
    )
    .await
    .unwrap();
    let generation = create_phase(
        &mut c,
        "page",
        "generation",
        &generation_spec(dir.path(), &mock.url).to_string(),
        &[&feasibility],
    )
    .await
    .unwrap();
    c.write_todos(write_request(
        "page",
        vec![item("", HOSTILE, "pending", "high")],
    ))
    .await
    .unwrap();

    // Without the token or a session: 401, page and stream alike.
    for path in ["/", "/plans/page", "/events?plan=page"] {
        let (status, body) = get(daemon.addr, path, None).await;
        assert_eq!(status, 401, "{path}: {body}");
        assert!(body.contains("todoctl open"), "{path}: {body}");
    }
    let (status, body) = get(daemon.addr, "/plans/page", Some(TOKEN)).await;
    assert_eq!(status, 200, "{body}");
    assert!(
        !body.contains("<script>window.__pwned"),
        "escaped on the server"
    );

    // Once the generation writes, two prompts fail for good (400s).
    wait_task(&mut c, "page", &generation, |t| {
        t.progress.as_ref().is_some_and(|p| p.done > 20)
    })
    .await;
    let bad = Fault::Status {
        code: 400,
        retry_after: None,
    };
    mock.push([bad.clone(), bad]);

    let login = c
        .open_page(proto::OpenPageRequest {
            plan: "page".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(login.url.starts_with(&daemon.url()), "{}", login.url);
    browser.goto(&login.url).await;
    let section = format!("document.getElementById('{generation}')");
    let text = |what: &str| {
        format!("const s = {section}; const e = s && s.querySelector('{what}'); return e ? e.textContent : null;")
    };
    let first = browser
        .until(
            "the generation's progress on the page",
            Duration::from_secs(30),
            &text(".progress-text"),
        )
        .await;
    assert!(
        first.as_str().unwrap().contains("of 1500 records"),
        "{first}"
    );
    browser
        .eval("window.__kept = 'this page was not reloaded'; return 1;")
        .await;

    // An update arrives by the event stream and the figure on screen moves.
    let script = format!(
        "const live = document.getElementById('live'); {} \
         return Number(live.getAttribute('data-updates') || 0) > 0 && t !== {first} ? t : null;",
        text(".progress-text").replace(
            "return e ? e.textContent : null;",
            "const t = e ? e.textContent : null;"
        )
    );
    let moved = browser
        .until(
            "the progress to change through an event",
            Duration::from_secs(30),
            &script,
        )
        .await;
    assert_ne!(moved, first);
    assert_eq!(
        browser.eval("return window.__kept || null;").await,
        "this page was not reloaded"
    );
    let conn = browser
        .eval("return document.getElementById('conn').textContent;")
        .await;
    assert_eq!(conn, "live");

    // The chart: the measured rate over the projection's band.
    browser
        .until(
            "the throughput chart with its projection band",
            Duration::from_secs(30),
            &format!(
                "const s = {section}; return !!(s && s.querySelector('svg.throughput rect.band') \
                 && s.querySelector('svg.throughput polyline.rate'));"
            ),
        )
        .await;
    let label = browser
        .eval(&format!(
            "return {section}.querySelector('svg.throughput').getAttribute('aria-label');"
        ))
        .await;
    assert!(label.as_str().unwrap().contains("projected"), "{label}");

    // The failures, by class.
    browser
        .until(
            "the failures by class",
            Duration::from_secs(30),
            &format!("const s = {section}; const f = s && s.querySelector('.failures'); return f && f.textContent.includes('client error') ? f.textContent : null;"),
        )
        .await;

    // The hostile title is text on screen, and ran nothing.
    let shown = browser
        .eval(
            "return [...document.querySelectorAll('td.content')].map(td => td.textContent).join('|');",
        )
        .await;
    assert!(shown.as_str().unwrap().contains(HOSTILE), "{shown}");
    assert_eq!(
        browser.eval("return window.__pwned === undefined;").await,
        true
    );
    assert_eq!(
        browser
            .eval("return document.querySelectorAll('main img, main script').length;")
            .await,
        0
    );

    // Far enough into the run for a chart worth keeping.
    browser
        .until(
            "600 records on the page",
            Duration::from_secs(60),
            &text(".progress-text").replace(
                "return e ? e.textContent : null;",
                "return e && parseInt(e.textContent.replace(/,/g, ''), 10) >= 600;",
            ),
        )
        .await;
    let artifacts = artifacts_dir();
    std::fs::write(
        artifacts.join("status-page.png"),
        browser.screenshot().await,
    )
    .unwrap();
    // On a phone's width, nothing runs off the side of the page.
    browser.resize(390, 844).await;
    let overflow = browser
        .until(
            "the page laid out at a phone's width",
            Duration::from_secs(10),
            "return window.innerWidth < 500 ? [document.documentElement.scrollWidth, window.innerWidth] : null;",
        )
        .await;
    let (scroll, width) = (overflow[0].as_f64().unwrap(), overflow[1].as_f64().unwrap());
    assert!(
        scroll <= width + 1.0,
        "the page is {scroll} px wide on a {width} px screen"
    );
    std::fs::write(
        artifacts.join("status-page-phone.png"),
        browser.screenshot().await,
    )
    .unwrap();
    println!("screenshots in {}", artifacts.display());

    // The end of the run reaches the open page, and its counts are the files'.
    let done = wait_task(&mut c, "page", &generation, |t| t.status == "completed").await;
    browser
        .until(
            "the completed generation on the page",
            Duration::from_secs(30),
            &text(".status").replace(
                "return e ? e.textContent : null;",
                "return e && e.textContent.includes('completed');",
            ),
        )
        .await;
    let result: Value = serde_json::from_str(&done.result_json).unwrap();
    let failed = lines(&dir.path().join("failures.jsonl"));
    assert_eq!(failed, 2);
    assert_eq!(result["failed"], failed);
    assert_eq!(result["failures_by_class"], json!({"client_error": failed}));
    assert_eq!(result["records"], lines(&dir.path().join("out.jsonl")));

    // The run against its band: on the page, and in the feasibility report
    // (the file written again, and the page's rendering of it, alike).
    let took = browser
        .until(
            "the run's time against the projected band",
            Duration::from_secs(30),
            &text(".actual"),
        )
        .await;
    assert!(took.as_str().unwrap().contains("the band"), "{took}");
    // Said once: the summary above it leaves the band to it.
    let said = browser
        .eval(&format!(
            "return {section}.textContent.split('the band').length - 1;"
        ))
        .await;
    assert_eq!(said, 1, "the run against its band, said once");
    let report = std::fs::read_to_string(dir.path().join("feasibility.html")).unwrap();
    assert!(
        report.contains(&format!("Generation {generation} took <b>")),
        "{report}"
    );
    let (status, served) = get(
        daemon.addr,
        &format!("/tasks/{feasibility}/report"),
        Some(TOKEN),
    )
    .await;
    assert_eq!(status, 200);
    assert_eq!(served, report);
    // It links back to its plan's page, which serves.
    assert!(
        report.contains(&format!(
            "Task {feasibility} of plan <a href=\"/plans/page\">page</a>"
        )),
        "{report}"
    );
    assert!(
        report.contains(&format!("at {}; prompts", mock.url)),
        "endpoints in words: {report}"
    );
    let (status, _) = get(
        daemon.addr,
        &format!("/tasks/{generation}/report"),
        Some(TOKEN),
    )
    .await;
    assert_eq!(status, 404);

    // A login code works once.
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let again = client.get(&login.url).send().await.unwrap();
    assert_eq!(again.status(), 401);
    let fresh = c
        .open_page(proto::OpenPageRequest::default())
        .await
        .unwrap()
        .into_inner();
    let first_use = client.get(&fresh.url).send().await.unwrap();
    assert_eq!(first_use.status(), 303);
    let cookie = first_use.headers()["set-cookie"]
        .to_str()
        .unwrap()
        .to_string();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    // A login goes on to a path of this site only, never elsewhere.
    for next in [
        "//evil.example/x",
        "https://evil.example/",
        "/\\evil.example",
    ] {
        let code = c
            .open_page(proto::OpenPageRequest::default())
            .await
            .unwrap()
            .into_inner();
        let url = format!("{}&next={}", code.url.split("&next=").next().unwrap(), next);
        let answer = client.get(&url).send().await.unwrap();
        assert_eq!(answer.status(), 303, "{url}");
        assert_eq!(answer.headers()["location"], "/", "{url}");
    }
    let unknown = c
        .open_page(proto::OpenPageRequest {
            plan: "no-such-plan".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(unknown.code(), tonic::Code::NotFound);
}
