//! Several base URLs serving the same model. Each request goes to the endpoint
//! with the fewest requests outstanding; one that keeps failing is set aside
//! for a while (doubling each time, up to a cap) and then probed with a single
//! request before it gets traffic again.
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::retry::Failure;

/// Consecutive failures that set an endpoint aside.
const SET_ASIDE_AFTER: u32 = 3;
const FIRST_SET_ASIDE: Duration = Duration::from_secs(2);
const LONGEST_SET_ASIDE: Duration = Duration::from_secs(60);

#[derive(Debug, Default)]
struct Health {
    consecutive_failures: u32,
    set_aside_until: Option<Instant>,
    set_aside_for: Duration,
}

#[derive(Debug)]
struct Endpoint {
    url: String,
    /// The URLs of its two APIs, parsed once.
    chat: reqwest::Url,
    completions: reqwest::Url,
    outstanding: AtomicUsize,
    health: Mutex<Health>,
    /// Set while `health` is not the default (failures counted, or set
    /// aside): healthy endpoints are chosen without taking any lock.
    troubled: AtomicBool,
}

#[derive(Debug)]
pub struct Endpoints {
    all: Vec<Endpoint>,
}

/// An endpoint chosen for one attempt; counts as outstanding until dropped.
pub struct Lease<'a> {
    endpoint: &'a Endpoint,
}

impl Endpoints {
    /// Base URLs such as `http://10.0.0.5:30000` (with or without `/v1`).
    pub fn new(urls: &[String]) -> Result<Endpoints, String> {
        if urls.is_empty() {
            return Err("at least one endpoint is needed".into());
        }
        let mut all = Vec::with_capacity(urls.len());
        for url in urls {
            let url = url.trim().trim_end_matches('/');
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(format!("{url:?} is not an http:// or https:// URL"));
            }
            // A base may or may not end in /v1.
            let v1 = if url.ends_with("/v1") {
                url.to_string()
            } else {
                format!("{url}/v1")
            };
            let parse = |path: &str| {
                reqwest::Url::parse(&format!("{v1}/{path}"))
                    .map_err(|e| format!("{url:?} is not a URL: {e}"))
            };
            all.push(Endpoint {
                chat: parse("chat/completions")?,
                completions: parse("completions")?,
                url: url.to_string(),
                outstanding: AtomicUsize::new(0),
                health: Mutex::new(Health::default()),
                troubled: AtomicBool::new(false),
            });
        }
        Ok(Endpoints { all })
    }

    /// The base URLs, as given.
    pub fn urls(&self) -> impl Iterator<Item = &str> {
        self.all.iter().map(|e| e.url.as_str())
    }

    pub fn acquire(&self) -> Lease<'_> {
        self.acquire_at(Instant::now())
    }

    /// An endpoint whose time aside is over gets the next request, alone, as a
    /// probe; otherwise the least loaded endpoint that is not set aside (on a
    /// tie, the one failing least, so that a retry moves away from an endpoint
    /// that just failed); if all are aside, the one whose time ends first.
    fn acquire_at(&self, now: Instant) -> Lease<'_> {
        if !self.all.iter().any(|e| e.troubled.load(Ordering::Acquire)) {
            // The usual case: every endpoint healthy, least outstanding wins.
            let endpoint = self
                .all
                .iter()
                .min_by_key(|e| e.outstanding.load(Ordering::Relaxed))
                .expect("there is at least one endpoint");
            endpoint.outstanding.fetch_add(1, Ordering::Relaxed);
            return Lease { endpoint };
        }
        let health = |e: &Endpoint| {
            let h = e.health.lock().unwrap_or_else(|p| p.into_inner());
            (h.set_aside_until, h.consecutive_failures)
        };
        let probe = self.all.iter().find(|e| {
            let mut h = e.health.lock().unwrap_or_else(|p| p.into_inner());
            match h.set_aside_until {
                Some(until) if until <= now => {
                    // Back in play; a failure now sets it aside again at once.
                    h.set_aside_until = None;
                    h.consecutive_failures = SET_ASIDE_AFTER - 1;
                    true
                }
                _ => false,
            }
        });
        let available = || {
            self.all
                .iter()
                .filter(|e| health(e).0.is_none())
                .min_by_key(|e| (e.outstanding.load(Ordering::Relaxed), health(e).1))
        };
        let endpoint = probe.or_else(available).unwrap_or_else(|| {
            self.all
                .iter()
                .min_by_key(|e| health(e).0)
                .expect("there is at least one endpoint")
        });
        endpoint.outstanding.fetch_add(1, Ordering::Relaxed);
        Lease { endpoint }
    }
}

impl Lease<'_> {
    pub fn url(&self) -> &str {
        &self.endpoint.url
    }

    /// Where a request of `api` goes.
    pub fn target(&self, api: super::Api) -> &reqwest::Url {
        match api {
            super::Api::Chat => &self.endpoint.chat,
            super::Api::Completions => &self.endpoint.completions,
        }
    }

    pub fn succeeded(&self) {
        if !self.endpoint.troubled.load(Ordering::Acquire) {
            return;
        }
        let mut health = self.health();
        *health = Health::default();
        self.endpoint.troubled.store(false, Ordering::Release);
    }

    pub fn failed(&self, failure: &Failure) {
        self.failed_at(failure, Instant::now());
    }

    fn failed_at(&self, failure: &Failure, now: Instant) {
        if !failure.blames_endpoint() {
            return;
        }
        let mut health = self.health();
        self.endpoint.troubled.store(true, Ordering::Release);
        health.consecutive_failures += 1;
        if health.consecutive_failures >= SET_ASIDE_AFTER {
            let next = if health.set_aside_for.is_zero() {
                FIRST_SET_ASIDE
            } else {
                (health.set_aside_for * 2).min(LONGEST_SET_ASIDE)
            };
            health.set_aside_for = next;
            health.set_aside_until = Some(now + next);
            tracing::warn!(endpoint = %self.endpoint.url, seconds = next.as_secs(), "endpoint set aside after repeated failures");
        }
    }

    fn health(&self) -> std::sync::MutexGuard<'_, Health> {
        self.endpoint
            .health
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for Lease<'_> {
    fn drop(&mut self) {
        self.endpoint.outstanding.fetch_sub(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether each endpoint is set aside now.
    fn aside(e: &Endpoints) -> Vec<bool> {
        let now = Instant::now();
        e.all
            .iter()
            .map(|e| {
                e.health
                    .lock()
                    .unwrap()
                    .set_aside_until
                    .is_some_and(|t| t > now)
            })
            .collect()
    }

    fn endpoints() -> Endpoints {
        Endpoints::new(&["http://a:1".into(), "http://b:2/".into()]).unwrap()
    }

    #[test]
    fn requests_go_to_the_least_loaded_endpoint() {
        let e = endpoints();
        let first = e.acquire();
        let second = e.acquire();
        assert_ne!(first.url(), second.url());
        drop(first);
        let third = e.acquire();
        assert_ne!(third.url(), second.url());
        assert_eq!(second.url(), "http://b:2");
    }

    #[test]
    fn a_failing_endpoint_is_set_aside_then_probed() {
        let e = endpoints();
        let now = Instant::now();
        let boom = Failure::Connect("refused".into());
        let lease_on_a = || {
            e.all[0].outstanding.fetch_add(1, Ordering::Relaxed);
            Lease {
                endpoint: &e.all[0],
            }
        };
        for _ in 0..SET_ASIDE_AFTER {
            lease_on_a().failed_at(&boom, now);
        }
        // a is set aside: everything goes to b, even when b is busier.
        let busy = e.acquire_at(now);
        let next = e.acquire_at(now);
        assert_eq!((busy.url(), next.url()), ("http://b:2", "http://b:2"));
        drop((busy, next));
        // Once its time is up, a is tried again; a success restores it.
        let later = now + FIRST_SET_ASIDE + Duration::from_millis(1);
        let probe = e.acquire_at(later);
        assert_eq!(probe.url(), "http://a:1");
        probe.succeeded();
        assert!(aside(&e).iter().all(|a| !a));
    }

    #[test]
    fn rate_limits_do_not_count_against_an_endpoint() {
        let e = endpoints();
        let limited = Failure::Status {
            code: 429,
            message: String::new(),
            retry_after: None,
        };
        for _ in 0..10 {
            e.acquire().failed(&limited);
        }
        assert!(aside(&e).iter().all(|a| !a));
    }

    #[test]
    fn api_urls_take_a_base_with_or_without_v1() {
        let e = Endpoints::new(&["http://h:1".into(), "http://g:2/v1/".into()]).unwrap();
        let first = e.acquire();
        let second = e.acquire();
        let mut urls = vec![
            first.target(super::super::Api::Chat).to_string(),
            second.target(super::super::Api::Completions).to_string(),
        ];
        urls.sort();
        assert!(
            urls == [
                "http://g:2/v1/completions",
                "http://h:1/v1/chat/completions"
            ] || urls
                == [
                    "http://g:2/v1/chat/completions",
                    "http://h:1/v1/completions"
                ],
            "{urls:?}"
        );
    }

    #[test]
    fn urls_are_checked() {
        assert!(Endpoints::new(&[]).is_err());
        assert!(Endpoints::new(&["localhost:8000".into()]).is_err());
    }
}
