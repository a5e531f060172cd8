//! A record's fingerprint (`PAYLOAD_HASH`): what makes two deliveries of one
//! key "the same payload". Stored as `payload_hash`; a key seen again with
//! another fingerprint is rejected as reused.

use serde_json::Value;

use exactly_once_core::redact::json_error;
use exactly_once_core::store::payload_hash;

/// How a record's value is fingerprinted.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Fingerprint {
    /// SHA-256 of the value's bytes (the default): any change of a byte is
    /// another payload.
    #[default]
    Raw,
    /// SHA-256 of the value as RFC 8785 canonical JSON: key order,
    /// whitespace and number spelling (`1.0`, `1e0`, `1`) do not change it.
    CanonicalJson,
    /// SHA-256 of the canonical JSON array of the named fields (JSON
    /// pointers; an absent field counts as `null`): a producer's retry that
    /// restamps another field (`sent_at`) is a duplicate.
    Fields(Vec<String>),
}

impl Fingerprint {
    /// Parses `PAYLOAD_HASH`: `raw`, `canonical-json` or `json:/a,/b`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "raw" => Ok(Self::Raw),
            "canonical-json" => Ok(Self::CanonicalJson),
            other => {
                let Some(pointers) = other.strip_prefix("json:") else {
                    return Err(format!(
                        "unknown payload hash {other:?}; expected raw, canonical-json or json:/field,/other"
                    ));
                };
                let pointers: Vec<String> =
                    pointers.split(',').map(|p| p.trim().to_owned()).collect();
                match pointers.iter().find(|p| !p.starts_with('/')) {
                    Some(bad) => Err(format!(
                        "JSON pointer {bad:?} must start with '/', e.g. json:/payment_id,/amount"
                    )),
                    None => Ok(Self::Fields(pointers)),
                }
            }
        }
    }

    /// Whether the value must be JSON.
    pub fn reads_json(&self) -> bool {
        !matches!(self, Self::Raw)
    }

    /// The fingerprint (hex SHA-256) of a value; `json` is the value parsed,
    /// for the JSON modes. A value that is not JSON under a JSON mode is an
    /// error of that record only.
    pub fn of(
        &self,
        value: &[u8],
        json: Option<&Result<Value, serde_json::Error>>,
    ) -> Result<String, String> {
        let parsed = || match json {
            Some(Ok(json)) => Ok(json),
            Some(Err(err)) => Err(format!(
                "PAYLOAD_HASH needs a JSON value: {}",
                json_error(err)
            )),
            None => Err("PAYLOAD_HASH needs a JSON value".to_owned()),
        };
        let canonical = |json: &Value| {
            serde_json_canonicalizer::to_vec(json)
                .map_err(|err| format!("cannot canonicalize the value: {}", json_error(&err)))
        };
        match self {
            Self::Raw => Ok(payload_hash(value)),
            Self::CanonicalJson => Ok(payload_hash(&canonical(parsed()?)?)),
            Self::Fields(pointers) => {
                let json = parsed()?;
                let fields: Vec<Value> = pointers
                    .iter()
                    .map(|p| json.pointer(p).cloned().unwrap_or(Value::Null))
                    .collect();
                Ok(payload_hash(&canonical(&Value::Array(fields))?))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(mode: &Fingerprint, value: &str) -> Result<String, String> {
        let json = mode
            .reads_json()
            .then(|| serde_json::from_str::<Value>(value));
        mode.of(value.as_bytes(), json.as_ref())
    }

    #[test]
    fn canonical_json_ignores_order_whitespace_and_number_spelling() {
        let mode = Fingerprint::CanonicalJson;
        let a = hash(
            &mode,
            r#"{"id":"p-1","amount":100,"nested":{"b":1.0,"a":[1,2]}}"#,
        );
        let b = hash(
            &mode,
            "{ \"nested\": {\"a\": [1, 2], \"b\": 1e0},\n \"amount\": 1.00e2, \"id\": \"p-1\" }",
        );
        assert_eq!(a, b);
        assert_ne!(
            a,
            hash(
                &mode,
                r#"{"id":"p-1","amount":101,"nested":{"b":1,"a":[1,2]}}"#
            )
        );
        assert_ne!(
            a,
            hash(
                &Fingerprint::Raw,
                r#"{"id":"p-1","amount":100,"nested":{"b":1.0,"a":[1,2]}}"#
            )
        );
    }

    #[test]
    fn named_fields_ignore_everything_else() {
        let mode = Fingerprint::parse("json:/id,/amount").expect("valid");
        let first = hash(&mode, r#"{"id":"p-1","amount":100,"sent_at":"10:00"}"#);
        let retry = hash(&mode, r#"{"sent_at":"10:05","amount":100.0,"id":"p-1"}"#);
        assert_eq!(first, retry);
        assert_ne!(
            first,
            hash(&mode, r#"{"id":"p-1","amount":200,"sent_at":"10:00"}"#)
        );
        // Absent and null are the same; present is not.
        assert_eq!(
            hash(&mode, r#"{"id":"p-1"}"#),
            hash(&mode, r#"{"id":"p-1","amount":null}"#)
        );
    }

    #[test]
    fn a_value_that_is_not_json_fails_under_a_json_mode_without_echoing_it() {
        for mode in [
            Fingerprint::CanonicalJson,
            Fingerprint::Fields(vec!["/id".into()]),
        ] {
            let err = hash(&mode, "secret-card-4111").expect_err("not JSON");
            assert!(
                err.starts_with("PAYLOAD_HASH needs a JSON value: "),
                "{err}"
            );
            assert!(!err.contains("secret"), "{err}");
        }
        assert!(hash(&Fingerprint::Raw, "secret-card-4111").is_ok());
    }

    #[test]
    fn modes_parse() {
        assert_eq!(Fingerprint::parse("raw"), Ok(Fingerprint::Raw));
        assert_eq!(
            Fingerprint::parse("canonical-json"),
            Ok(Fingerprint::CanonicalJson)
        );
        assert_eq!(
            Fingerprint::parse("json:/a, /b/c"),
            Ok(Fingerprint::Fields(vec!["/a".into(), "/b/c".into()]))
        );
        assert!(Fingerprint::parse("json:a").is_err());
        assert!(Fingerprint::parse("md5").is_err());
    }
}
