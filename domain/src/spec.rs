//! Phase specs: the JSON object that tells the daemon how to run a phase task.
//! The phase workers define their fields; here a spec is checked to be a bounded
//! JSON object, present exactly when the kind is a phase.
use super::model::{Kind, MAX_SPEC_BYTES};
use super::Error;

/// Validates and normalises (compacts) a spec for `kind`. An empty string means
/// no spec.
pub fn validate(field: &str, kind: Kind, spec: &str) -> Result<Option<String>, Error> {
    let spec = spec.trim();
    if !kind.is_phase() && !spec.is_empty() {
        return Err(Error::invalid(
            field,
            "plain (todo) tasks take no spec; only phase kinds do",
        ));
    }
    if spec.is_empty() {
        return if kind.is_phase() {
            Err(Error::invalid(
                field,
                format!("a {kind} task needs a spec (a JSON object)"),
            ))
        } else {
            Ok(None)
        };
    }
    if spec.len() > MAX_SPEC_BYTES {
        return Err(Error::invalid(
            field,
            format!(
                "is {} bytes; at most {MAX_SPEC_BYTES} are allowed",
                spec.len()
            ),
        ));
    }
    let value: serde_json::Value = serde_json::from_str(spec)
        .map_err(|e| Error::invalid(field, format!("is not valid JSON: {e}")))?;
    if !value.is_object() {
        return Err(Error::invalid(field, "must be a JSON object"));
    }
    Ok(Some(value.to_string()))
}

/// A path a phase task will write, named by the spec field that says so:
/// each path is held by one task at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub field: String,
    pub path: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phase_kinds_need_an_object_spec() {
        assert!(validate("spec_json", Kind::named("generation"), "").is_err());
        assert!(validate("spec_json", Kind::named("generation"), "[1]").is_err());
        assert!(validate("spec_json", Kind::named("generation"), "{oops").is_err());
        assert_eq!(
            validate("spec_json", Kind::named("generation"), " { \"a\" : 1 } ").unwrap(),
            Some("{\"a\":1}".to_string())
        );
        assert_eq!(validate("spec_json", Kind::TODO, "").unwrap(), None);
        assert!(validate("spec_json", Kind::TODO, "{}").is_err());
    }
}
