//! A run whose endpoints name servers the daemon runs (`server:NAME`):
//! the servers attached and ready before the first request, each request
//! sent again when its server restarted under it, and the run broken off,
//! its committed records kept, when a server gives up. A feasibility's sweep
//! stands on the same.
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use crate::phase::servers::{self, Attached};
use crate::phase::RunContext;

use super::spec::GenerationSpec;

/// Restarts of its server one request may meet and still be sent again.
const MAX_RESTARTS_MET: u32 = 4;

/// The longest a request on a server the daemon runs waits before the
/// client tries it again (its backoff's cap).
pub const RETRY_CAP: std::time::Duration = std::time::Duration::from_secs(1);

/// The spec with its endpoints as URLs, and the servers attached, once they
/// are ready; `None` when the run was told to stop meanwhile.
pub async fn attach(
    run: &RunContext,
    spec: &GenerationSpec,
) -> Result<Option<(GenerationSpec, Arc<Attached>)>, String> {
    if spec.servers.is_empty() {
        return Ok(Some((spec.clone(), Arc::new(Attached::none()))));
    }
    let mut stop = run.stop.clone();
    tokio::select! {
        attached = servers::attach(&run.servers, run.task, &spec.endpoints, &spec.servers) => {
            let (endpoints, attached) = attached?;
            let spec = GenerationSpec { endpoints, ..spec.clone() };
            Ok(Some((spec, Arc::new(attached))))
        }
        _ = crate::phase::stopped(&mut stop) => Ok(None),
    }
}

/// A run's context whose stop also turns true when one of its servers gives
/// up; [`Watched::gave_up`] then says why.
pub struct Watched {
    pub run: RunContext,
    why: Arc<Mutex<Option<String>>>,
    forward: tokio::task::JoinHandle<()>,
}

impl Watched {
    pub fn new(run: &RunContext, attached: &Arc<Attached>) -> Watched {
        let (stop_tx, stop_rx) = watch::channel(false);
        let why = Arc::new(Mutex::new(None));
        let (mut stop, attached, slot) = (run.stop.clone(), attached.clone(), why.clone());
        let forward = tokio::spawn(async move {
            tokio::select! {
                _ = crate::phase::stopped(&mut stop) => {}
                gave_up = attached.given_up() => {
                    *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(gave_up);
                }
            }
            stop_tx.send_replace(true);
            // Held until the run is over: a dropped sender reads as a stop.
            std::future::pending::<()>().await;
        });
        Watched {
            run: RunContext {
                stop: stop_rx,
                ..run.clone()
            },
            why,
            forward,
        }
    }

    /// Why a server gave up, if one did.
    pub fn gave_up(&self) -> Option<String> {
        self.why.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl Drop for Watched {
    fn drop(&mut self) {
        self.forward.abort();
    }
}

/// Sends one request through `send` until it is answered by a server that
/// did not restart meanwhile: a request a restart cut (or that failed while
/// its server was down) is sent again once the server is ready. Waits for
/// ever once a server has given up: the run is then stopping.
pub async fn send_through<T, E, F, Fut>(attached: &Attached, mut send: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let mut restarts_met = 0;
    loop {
        let Ok(generations) = attached.ready().await else {
            return std::future::pending().await;
        };
        let answer = send().await;
        // A failure is the record's only if its server is well: asked at
        // once, a server whose process died, or whose engine fails
        // everything while its /health says 200, is restarted, and the
        // request goes again once it is back.
        // A request that met this many restarts may be what kills the
        // server: its failure is its own then.
        if answer.is_err()
            && !attached.is_empty()
            && restarts_met < MAX_RESTARTS_MET
            && !attached.still_well(&generations).await
        {
            restarts_met += 1;
            continue;
        }
        return answer;
    }
}
