//! The fast mock as a process of its own, for the cluster benchmark (a
//! test fixture, not part of the product): many OpenAI-compatible endpoints
//! on loopback, one port each.
//!
//!     fast-mock [--endpoints 64] [--latency-ms 0] [--tokens 16] [--chunk 1] [--tps 0]
//!
//! Prints `listening on URL` once per endpoint, then `ready`, and serves
//! until killed. It raises its own open-files limit to the hard limit: an
//! endpoint per port with hundreds of connections each needs thousands.
use std::time::Duration;

use todod_e2e::fast_mock::{FastMock, FastSettings};

fn arg(args: &[String], name: &str, default: f64) -> f64 {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name}: not a number: {v}"))
        })
        .unwrap_or(default)
}

fn raise_open_files() {
    // SAFETY: plain getrlimit/setrlimit on this process.
    unsafe {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &limit);
        }
    }
}

#[tokio::main]
async fn main() {
    raise_open_files();
    let args: Vec<String> = std::env::args().collect();
    let settings = FastSettings {
        latency: Duration::from_secs_f64(arg(&args, "--latency-ms", 0.0) / 1000.0),
        tokens: arg(&args, "--tokens", 16.0) as usize,
        chunk: arg(&args, "--chunk", 1.0) as usize,
        tokens_per_second: arg(&args, "--tps", 0.0),
    };
    let endpoints = arg(&args, "--endpoints", 64.0) as usize;
    let mock = FastMock::start(endpoints, settings).await;
    for url in &mock.urls {
        println!("listening on {url}");
    }
    println!("ready");
    std::future::pending::<()>().await;
}
