//! Bearer-token check for daemons that listen beyond loopback.
use subtle::ConstantTimeEq;
use tonic::{Request, Status};

/// An interceptor that admits requests carrying `authorization: Bearer <token>`.
/// The comparison takes the same time whatever the mismatch, so the token
/// cannot be guessed byte by byte.
#[derive(Clone)]
pub struct BearerAuth {
    expected: Option<Vec<u8>>,
}

impl BearerAuth {
    /// `None` admits everything (loopback and Unix-socket daemons).
    pub fn new(token: Option<&str>) -> BearerAuth {
        BearerAuth {
            expected: token.map(|t| format!("Bearer {t}").into_bytes()),
        }
    }

    pub fn check<T>(&self, request: Request<T>) -> Result<Request<T>, Status> {
        let Some(expected) = &self.expected else {
            return Ok(request);
        };
        let given = request
            .metadata()
            .get("authorization")
            .map(|v| v.as_bytes())
            .unwrap_or_default();
        // Compare over the expected length whatever was given, so that neither
        // the content nor the length of the token shows in the timing.
        let mut padded = vec![0u8; expected.len()];
        let n = given.len().min(expected.len());
        padded[..n].copy_from_slice(&given[..n]);
        let same_length = (given.len() as u64).ct_eq(&(expected.len() as u64));
        if bool::from(padded.ct_eq(expected.as_slice()) & same_length) {
            Ok(request)
        } else {
            Err(Status::unauthenticated(
                "missing or wrong bearer token (authorization: Bearer <token>)",
            ))
        }
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

    #[test]
    fn only_the_right_token_passes() {
        let auth = BearerAuth::new(Some("s3cret"));
        let mut good = Request::new(());
        good.metadata_mut()
            .insert("authorization", "Bearer s3cret".parse().unwrap());
        assert!(auth.check(good).is_ok());
        let mut bad = Request::new(());
        bad.metadata_mut()
            .insert("authorization", "Bearer s3cres".parse().unwrap());
        assert!(auth.check(bad).is_err());
        assert!(auth.check(Request::new(())).is_err());
        assert!(BearerAuth::new(None).check(Request::new(())).is_ok());
    }
}
