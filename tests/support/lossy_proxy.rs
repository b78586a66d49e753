//! A gRPC proxy in front of a daemon that can lose an answer: every call is
//! forwarded as it is, and the next call of an armed method is forwarded
//! too — the daemon runs it and answers — but its answer is thrown away and
//! the client told UNAVAILABLE, as a proxy says when the connection behind
//! it broke. What the client then holds is a call that may or may not have
//! landed.
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tonic::body::Body;
use tonic::codegen::http::{Request, Response};
use tonic::codegen::{BoxFuture, Service};
use tonic::server::NamedService;
use tonic::transport::Channel;

#[derive(Clone)]
struct Forward {
    upstream: Channel,
    armed: Arc<Mutex<Vec<String>>>,
    lost: Arc<Mutex<Vec<String>>>,
}

impl NamedService for Forward {
    const NAME: &'static str = "todod.v1.Todos";
}

impl Service<Request<Body>> for Forward {
    type Response = Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let mut upstream = self.upstream.clone();
        let (armed, lost) = (self.armed.clone(), self.lost.clone());
        Box::pin(async move {
            let method = request
                .uri()
                .path()
                .rsplit('/')
                .next()
                .unwrap_or("")
                .to_string();
            let lose = {
                let mut armed = armed.lock().unwrap();
                match armed.iter().position(|m| *m == method) {
                    Some(i) => {
                        armed.remove(i);
                        true
                    }
                    None => false,
                }
            };
            if let Err(e) = std::future::poll_fn(|cx| upstream.poll_ready(cx)).await {
                return Ok(tonic::Status::unavailable(e.to_string()).into_http());
            }
            let response = match upstream.call(request).await {
                Ok(response) => response,
                Err(e) => return Ok(tonic::Status::unavailable(e.to_string()).into_http()),
            };
            if !lose {
                return Ok(response);
            }
            // The daemon committed before it sent these headers; wait for
            // the whole answer, then drop it.
            let (_, body) = response.into_parts();
            let _ = http_body_util_collect(body).await;
            lost.lock().unwrap().push(method.clone());
            // What a proxy says when the connection behind it broke.
            Ok(tonic::Status::unavailable(format!(
                "lossy proxy: the connection broke; the answer to {method} was lost"
            ))
            .into_http())
        })
    }
}

async fn http_body_util_collect(mut body: Body) -> Result<(), tonic::Status> {
    use tonic::codegen::Body as _;
    let mut body = std::pin::Pin::new(&mut body);
    while let Some(frame) = std::future::poll_fn(|cx| body.as_mut().poll_frame(cx)).await {
        frame?;
    }
    Ok(())
}

/// A running proxy: `url` is where clients connect.
pub struct LossyProxy {
    pub url: String,
    armed: Arc<Mutex<Vec<String>>>,
    lost: Arc<Mutex<Vec<String>>>,
    _server: tokio::task::JoinHandle<()>,
}

impl LossyProxy {
    /// A proxy on 127.0.0.1:0 in front of the daemon at `upstream` (a URL).
    pub async fn start(upstream: &str) -> LossyProxy {
        let channel = Channel::from_shared(upstream.to_string())
            .unwrap()
            .connect()
            .await
            .expect("the proxy reaches the daemon");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let (armed, lost) = (Arc::default(), Arc::default());
        let forward = Forward {
            upstream: channel,
            armed: Arc::clone(&armed),
            lost: Arc::clone(&lost),
        };
        let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
        let server = tokio::spawn(async move {
            tonic::transport::Server::builder()
                .add_service(forward)
                .serve_with_incoming(incoming)
                .await
                .expect("proxy serves");
        });
        LossyProxy {
            url: format!("http://{addr}"),
            armed,
            lost,
            _server: server,
        }
    }

    /// The next call of `method` (e.g. `CreateTask`) loses its answer.
    pub fn lose_next(&self, method: &str) {
        self.armed.lock().unwrap().push(method.to_string());
    }

    /// The methods whose answers were lost so far.
    pub fn lost(&self) -> Vec<String> {
        self.lost.lock().unwrap().clone()
    }
}
