//! The API key a request carries: what makes one usable at all.

/// A key must make a valid `authorization` header: no CR, LF or other
/// control bytes, not empty.
pub fn check_key_value(variable: &str, value: &str) -> Result<(), String> {
    if value.trim().is_empty() {
        return Err(format!("{variable} is empty"));
    }
    if value.bytes().any(|b| b.is_ascii_control() || b == 0x7f) {
        return Err(format!(
            "{variable} holds control characters (CR, LF, ...) that cannot go in an HTTP header"
        ));
    }
    reqwest::header::HeaderValue::from_str(&format!("Bearer {value}"))
        .map_err(|_| format!("{variable} holds characters that cannot go in an HTTP header"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_must_fit_a_header() {
        assert!(check_key_value("K", "sk-abc").is_ok());
        assert!(check_key_value("K", "sk-abc\r\nX-Evil: 1").is_err());
        assert!(check_key_value("K", "  ").is_err());
    }
}
