//! The bearer-token check of the TCP listener. The Unix socket is private to
//! the daemon's user (mode 0600); anyone on the machine can reach a TCP port,
//! loopback included, so TCP calls must carry the token.
use subtle::ConstantTimeEq;
use tonic::{Request, Status};

/// The fewest non-space characters a token may have.
pub const MIN_TOKEN_CHARS: usize = 16;

/// Trims a token and checks it is long enough to be a secret.
pub fn validate_token(token: &str) -> Result<String, String> {
    let token = token.trim();
    if token.chars().count() < MIN_TOKEN_CHARS {
        return Err(format!(
            "a token needs at least {MIN_TOKEN_CHARS} non-space characters"
        ));
    }
    if token.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("a token may not contain spaces or control characters".into());
    }
    if !token.is_ascii() {
        return Err("a token must be ASCII (it travels as request metadata)".into());
    }
    Ok(token.to_string())
}

/// An interceptor that admits requests carrying `authorization: Bearer
/// <token>` (the scheme in any case, RFC 7235). The comparison takes the same
/// time whatever the mismatch, so the token cannot be guessed byte by byte.
#[derive(Clone)]
pub struct BearerAuth {
    expected: Option<Vec<u8>>,
}

impl BearerAuth {
    /// `None` admits everything (the Unix socket, or `--insecure-no-token`).
    pub fn new(token: Option<&str>) -> BearerAuth {
        BearerAuth {
            expected: token.map(|t| t.trim().as_bytes().to_vec()),
        }
    }

    pub fn check<T>(&self, request: Request<T>) -> Result<Request<T>, Status> {
        let header = request
            .metadata()
            .get("authorization")
            .map(|v| v.as_bytes());
        if self.admits(header) {
            Ok(request)
        } else {
            Err(Status::unauthenticated(
                "missing or wrong bearer token (authorization: Bearer <token>); todoctl \
                 reads the daemon's token from its state directory, or from TODOD_TOKEN",
            ))
        }
    }

    /// Whether an `authorization` header's value (if any) carries the token;
    /// the same rule for gRPC calls and the HTTP routes beside them.
    pub fn admits(&self, header: Option<&[u8]>) -> bool {
        let Some(expected) = &self.expected else {
            return true;
        };
        let header = header.unwrap_or_default();
        let given = match header.iter().position(|b| *b == b' ') {
            Some(at) if header[..at].eq_ignore_ascii_case(b"bearer") => header[at..].trim_ascii(),
            _ => &[][..],
        };
        // Compare over the expected length whatever was given, so that neither
        // the content nor the length of the token shows in the timing.
        let mut padded = vec![0u8; expected.len()];
        let n = given.len().min(expected.len());
        padded[..n].copy_from_slice(&given[..n]);
        let same_length = (given.len() as u64).ct_eq(&(expected.len() as u64));
        !given.is_empty() && bool::from(padded.ct_eq(expected.as_slice()) & same_length)
    }
}

impl tonic::service::Interceptor for BearerAuth {
    fn call(&mut self, request: Request<()>) -> Result<Request<()>, Status> {
        self.check(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(header: &str) -> Request<()> {
        let mut request = Request::new(());
        request
            .metadata_mut()
            .insert("authorization", header.parse().unwrap());
        request
    }

    #[test]
    fn only_the_right_token_passes() {
        let auth = BearerAuth::new(Some("s3cret-s3cret-s3cret"));
        assert!(auth.check(with("Bearer s3cret-s3cret-s3cret")).is_ok());
        assert!(auth.check(with("bearer s3cret-s3cret-s3cret")).is_ok());
        assert!(auth.check(with("BEARER   s3cret-s3cret-s3cret ")).is_ok());
        assert!(auth.check(with("Bearer s3cret-s3cret-s3cres")).is_err());
        assert!(auth.check(with("Bearer    ")).is_err());
        assert!(auth.check(with("Basic s3cret-s3cret-s3cret")).is_err());
        assert!(auth.check(with("s3cret-s3cret-s3cret")).is_err());
        assert!(auth.check(Request::new(())).is_err());
        assert!(BearerAuth::new(None).check(Request::new(())).is_ok());
    }

    #[test]
    fn tokens_must_be_long_enough() {
        assert!(validate_token("   ").is_err());
        assert!(validate_token("short").is_err());
        assert!(validate_token("has a space in the middle").is_err());
        assert_eq!(
            validate_token("  0123456789abcdef \n").unwrap(),
            "0123456789abcdef"
        );
    }
}
