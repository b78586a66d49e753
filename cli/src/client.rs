//! Connecting to todod over TCP (http/https) or a Unix socket, with the
//! metadata every call carries (`x-todod-client`, optional bearer token).
use std::path::PathBuf;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use todod_proto::todos_client::TodosClient;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::{Channel, Endpoint, Uri};
use tonic::{Request, Status};

use crate::error::{root_cause, unreachable_message, CliError, Exit};

/// The gRPC client every command uses.
pub type Client = TodosClient<InterceptedService<Channel, Metadata>>;

/// Adds the caller's metadata to every request.
#[derive(Clone)]
pub struct Metadata {
    client: MetadataValue<Ascii>,
    auth: Option<MetadataValue<Ascii>>,
}

impl std::fmt::Debug for Metadata {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metadata")
            .field("client", &self.client)
            .field("auth", &self.auth.as_ref().map(|_| "Bearer <redacted>"))
            .finish()
    }
}

impl tonic::service::Interceptor for Metadata {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        let md = req.metadata_mut();
        md.insert("x-todod-client", self.client.clone());
        if let Some(auth) = &self.auth {
            md.insert("authorization", auth.clone());
        }
        Ok(req)
    }
}

/// Where the daemon listens.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    Http(String),
    Unix(PathBuf),
}

/// Parses `--addr`: `unix:/path` (or `unix:///path`), `http://host:port`, or a
/// bare `host:port` taken as http.
pub fn parse_addr(addr: &str) -> Result<Target, CliError> {
    let addr = addr.trim();
    if let Some(rest) = addr.strip_prefix("unix:") {
        let path = rest.strip_prefix("//").unwrap_or(rest);
        if path.is_empty() {
            return Err(CliError::usage(format!(
                "--addr {addr:?}: missing socket path after `unix:`"
            )));
        }
        return Ok(Target::Unix(PathBuf::from(path)));
    }
    if addr.is_empty() {
        return Err(CliError::usage("--addr is empty"));
    }
    let url = if addr.contains("://") {
        addr.to_string()
    } else {
        format!("http://{addr}")
    };
    if url.starts_with("https://") {
        return Err(CliError::usage(format!(
            "--addr {addr:?}: https is not supported by this build; use http://HOST:PORT or unix:/path/to/todod.sock"
        )));
    }
    if !url.starts_with("http://") {
        return Err(CliError::usage(format!(
            "--addr {addr:?}: expected http://HOST:PORT or unix:/path/to/todod.sock"
        )));
    }
    Ok(Target::Http(url))
}

/// The token in the daemon's state directory, for a TCP address; `None` for
/// a Unix socket (private to the user, no token needed) or when there is no
/// readable token file.
pub fn token_from_state_dir(addr: &str, state_dir: Option<&std::path::Path>) -> Option<String> {
    if !matches!(parse_addr(addr), Ok(Target::Http(_))) {
        return None;
    }
    let dir = match state_dir {
        Some(dir) => dir.to_path_buf(),
        None => todod_proto::local::default_state_dir()?,
    };
    let text = std::fs::read_to_string(dir.join(todod_proto::local::TOKEN_FILE)).ok()?;
    Some(text.trim().to_string()).filter(|t| !t.is_empty())
}

/// How to reach the daemon; `connect` can be called again to reconnect.
#[derive(Clone)]
pub struct Connector {
    addr: String,
    target: Target,
    metadata: Metadata,
}

impl Connector {
    /// Validates the address and the metadata values; nothing is dialled yet.
    pub fn new(addr: &str, token: Option<&str>, client_name: &str) -> Result<Self, CliError> {
        let target = parse_addr(addr)?;
        let printable = |s: &str| s.chars().all(|c| c == ' ' || c.is_ascii_graphic());
        let client = Some(client_name)
            .filter(|n| !n.trim().is_empty() && printable(n))
            .and_then(|n| MetadataValue::try_from(n).ok())
            .ok_or_else(|| {
                CliError::usage(
                    "--client-name must be non-empty printable ASCII (sent as request metadata)",
                )
            })?;
        let auth = match token.map(str::trim).filter(|t| !t.is_empty()) {
            Some(token) => {
                let mut value = Some(token)
                    .filter(|t| t.chars().all(|c| c.is_ascii_graphic()))
                    .and_then(|t| MetadataValue::try_from(format!("Bearer {t}")).ok())
                    .ok_or_else(|| {
                        CliError::usage("--token must be printable ASCII without spaces (sent as request metadata)")
                    })?;
                value.set_sensitive(true);
                Some(value)
            }
            None => None,
        };
        Ok(Connector {
            addr: addr.to_string(),
            target,
            metadata: Metadata { client, auth },
        })
    }

    /// The address as it was given.
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The same address and token, another client name.
    pub fn with_client_name(&self, name: &str) -> Result<Connector, CliError> {
        Connector::new(&self.addr, self.token(), name)
    }

    /// The same address and client name, another token.
    pub fn with_token(&self, token: Option<&str>) -> Result<Connector, CliError> {
        let name = self.metadata.client.to_str().unwrap_or("todoctl");
        Connector::new(&self.addr, token, name)
    }

    /// The token it sends, if any.
    pub fn token(&self) -> Option<&str> {
        self.metadata
            .auth
            .as_ref()
            .and_then(|a| a.to_str().ok())
            .and_then(|a| a.strip_prefix("Bearer "))
    }

    /// Dials the daemon. A failure is reported as "cannot reach todod" (exit 5).
    pub async fn connect(&self) -> Result<Client, CliError> {
        let unreachable = |e: tonic::transport::Error| {
            CliError::new(
                Exit::Unreachable,
                unreachable_message(&self.addr, &root_cause(&e)),
            )
        };
        let channel = match &self.target {
            Target::Http(url) => {
                let endpoint = Endpoint::from_shared(url.clone()).map_err(|e| {
                    CliError::usage(format!("--addr {:?}: {}", self.addr, root_cause(&e)))
                })?;
                tune(endpoint)
                    .connect_with_connector(tower::service_fn(|uri: Uri| async move {
                        dial_tcp(&uri).await.map(TokioIo::new)
                    }))
                    .await
                    .map_err(unreachable)?
            }
            Target::Unix(path) => {
                let path = path.clone();
                // The URI is required by the API but unused: the connector dials the socket.
                let endpoint = Endpoint::from_static("http://todod.sock");
                tune(endpoint)
                    .connect_with_connector(tower::service_fn(move |_: Uri| {
                        let path = path.clone();
                        async move {
                            let stream = tokio::net::UnixStream::connect(path).await?;
                            Ok::<_, std::io::Error>(TokioIo::new(stream))
                        }
                    }))
                    .await
                    .map_err(unreachable)?
            }
        };
        // Answers for big plans (ReadTodos, full listings) can be large; the
        // daemon bounds them, so the client need not.
        Ok(
            TodosClient::with_interceptor(channel, self.metadata.clone())
                .max_decoding_message_size(todod_proto::local::MAX_RESPONSE_BYTES),
        )
    }
}

/// Dials `uri`'s host and port over TCP, each address the name resolves to
/// in turn, from a source port other than the one dialled.
///
/// Why: a port in the kernel's ephemeral range (todod's default 50710 is one,
/// in Linux's 32768-60999) with nothing listening on it can be "connected"
/// by the kernel choosing that same port as the source: TCP's simultaneous
/// open joins the socket to itself. `todoctl ping --wait`, asking once a
/// second while the daemon starts, then heard its own HTTP/2 preface back
/// and failed with "h2 protocol error" (CI saw it), and while it held the
/// port the daemon could not bind it ("Address already in use", CI saw that
/// too, after such a connection was dropped). So the source port is chosen
/// before the dial ([`source_socket`]) and is never the daemon's.
async fn dial_tcp(uri: &Uri) -> std::io::Result<tokio::net::TcpStream> {
    use std::io::{Error, ErrorKind};
    let host = uri
        .host()
        .ok_or_else(|| Error::new(ErrorKind::InvalidInput, "the address has no host"))?;
    // `[::1]` in a URI is `::1` to the resolver.
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = uri.port_u16().unwrap_or(80);
    let mut last = Error::new(
        ErrorKind::NotFound,
        format!("{host} resolves to no address"),
    );
    for addr in tokio::net::lookup_host((host, port)).await? {
        let connected = match source_socket(addr) {
            Ok(socket) => socket.connect(addr).await,
            Err(e) => Err(e),
        };
        match connected {
            Ok(stream) => {
                stream.set_nodelay(true)?;
                return Ok(stream);
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// A socket to dial `peer` from, bound to a port the kernel picks, never
/// `peer`'s own (see [`dial_tcp`]).
fn source_socket(peer: std::net::SocketAddr) -> std::io::Result<tokio::net::TcpSocket> {
    source_socket_from(peer, || {
        let (socket, any) = if peer.is_ipv4() {
            (
                tokio::net::TcpSocket::new_v4()?,
                std::net::IpAddr::from(std::net::Ipv4Addr::UNSPECIFIED),
            )
        } else {
            (
                tokio::net::TcpSocket::new_v6()?,
                std::net::Ipv6Addr::UNSPECIFIED.into(),
            )
        };
        socket.bind((any, 0).into())?;
        Ok(socket)
    })
}

/// The first socket `bind` gives whose port is not `peer`'s (a few tries).
fn source_socket_from(
    peer: std::net::SocketAddr,
    mut bind: impl FnMut() -> std::io::Result<tokio::net::TcpSocket>,
) -> std::io::Result<tokio::net::TcpSocket> {
    for _ in 0..8 {
        let socket = bind()?;
        if socket.local_addr()?.port() != peer.port() {
            return Ok(socket);
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        format!("no source port other than {} to dial it from", peer.port()),
    ))
}

/// Settings of both targets; TCP_NODELAY is `dial_tcp`'s (the endpoint's
/// own setting applies only to tonic's connector, which is not used).
fn tune(endpoint: Endpoint) -> Endpoint {
    endpoint.connect_timeout(Duration::from_secs(5))
}

/// Sends a mutating call, `req` given a fresh request id by `set_id`; when
/// its answer is lost on the way back (the connection broke), the same
/// request, with the same id, goes once more over `reconnect`'s client. The
/// daemon answers a retry of an id it has seen with the first answer and
/// changes nothing, so the retry is safe whether or not the first call
/// landed.
pub async fn send_once<Req, Resp, E, Fut, Dial>(
    first: Client,
    reconnect: impl FnOnce() -> Dial,
    mut req: Req,
    set_id: impl FnOnce(&mut Req, String),
    call: impl Fn(Client, Req) -> Fut,
) -> Result<Resp, E>
where
    Req: Clone,
    E: From<tonic::Status>,
    Fut: std::future::Future<Output = Result<tonic::Response<Resp>, tonic::Status>>,
    Dial: std::future::Future<Output = Result<Client, E>>,
{
    set_id(&mut req, todod_proto::local::new_request_id());
    match call(first, req.clone()).await {
        Ok(answer) => Ok(answer.into_inner()),
        Err(status) if todod_proto::local::answer_lost(&status) => {
            Ok(call(reconnect().await?, req).await?.into_inner())
        }
        Err(status) => Err(status.into()),
    }
}

/// The phase kinds the daemon runs, by name, as its `ListKinds` gives
/// them: clients list phases by these, never by names of their own.
pub async fn phase_kinds(client: &mut Client) -> Result<Vec<String>, tonic::Status> {
    let kinds = client
        .list_kinds(todod_proto::ListKindsRequest {})
        .await?
        .into_inner()
        .kinds;
    Ok(kinds
        .into_iter()
        .filter(|k| k.phase)
        .map(|k| k.name)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A socket bound to a port and connected to that same port joins
    /// itself (TCP simultaneous open): what the kernel can do to a dial of a
    /// free port in its ephemeral range. `dial_tcp` never dials from the
    /// port it dials: a source socket on that port is passed over.
    #[tokio::test]
    async fn a_dial_never_comes_from_the_port_it_dials() {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let own = socket.local_addr().unwrap();
        let stream = socket.connect(own).await.unwrap();
        assert_eq!(
            stream.peer_addr().unwrap(),
            own,
            "the kernel joined it to itself"
        );
        drop(stream);

        // The first source socket offered is on the dialled port.
        let target = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let mut offered = Vec::new();
        let socket = source_socket_from(target, || {
            let socket = tokio::net::TcpSocket::new_v4()?;
            let port = if offered.is_empty() { target.port() } else { 0 };
            socket.bind(std::net::SocketAddr::new(target.ip(), port))?;
            offered.push(socket.local_addr()?.port());
            Ok(socket)
        })
        .unwrap();
        assert_eq!(offered.len(), 2, "{offered:?}");
        assert_eq!(offered[0], target.port());
        assert_ne!(socket.local_addr().unwrap().port(), target.port());
        assert_ne!(
            source_socket(target).unwrap().local_addr().unwrap().port(),
            target.port()
        );
    }

    #[tokio::test]
    async fn dialling_reaches_a_listener_and_names_a_refusal() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let uri: Uri = format!("http://{addr}").parse().unwrap();
        let stream = dial_tcp(&uri).await.unwrap();
        assert_eq!(stream.peer_addr().unwrap(), addr);
        assert!(stream.nodelay().unwrap());
        // A port held by a socket that does not listen: refused, and no
        // other test can take the port meanwhile.
        let held = tokio::net::TcpSocket::new_v4().unwrap();
        held.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let uri: Uri = format!("http://{}", held.local_addr().unwrap())
            .parse()
            .unwrap();
        let e = dial_tcp(&uri).await.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}");
    }

    #[test]
    fn parses_addresses() {
        assert_eq!(
            parse_addr("unix:/run/todod.sock").ok(),
            Some(Target::Unix("/run/todod.sock".into()))
        );
        assert_eq!(
            parse_addr("unix:///run/todod.sock").ok(),
            Some(Target::Unix("/run/todod.sock".into()))
        );
        assert_eq!(
            parse_addr("127.0.0.1:1").ok(),
            Some(Target::Http("http://127.0.0.1:1".into()))
        );
        assert!(parse_addr("https://todo.example:443").is_err());
        assert!(parse_addr("unix:").is_err());
        assert!(parse_addr("ftp://x").is_err());
    }

    #[test]
    fn rejects_non_ascii_token() {
        assert!(Connector::new("http://127.0.0.1:1", Some("tok\u{e9}n"), "todoctl").is_err());
        assert!(Connector::new("http://127.0.0.1:1", Some("token"), "todoctl").is_ok());
    }

    #[tokio::test]
    async fn connection_refused_is_unreachable() {
        let dir = tempfile::tempdir().expect("tempdir");
        let sock = dir.path().join("none.sock");
        let conn = Connector::new(&format!("unix:{}", sock.display()), None, "t").expect("valid");
        let err = conn.connect().await.expect_err("fails");
        assert_eq!(err.exit, Exit::Unreachable);
        assert!(
            err.message.starts_with("cannot reach todod at unix:"),
            "{}",
            err.message
        );
    }
}
