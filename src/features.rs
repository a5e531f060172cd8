//! Which cargo features of this crate a function's environment asks for:
//! one rule per variable, read by [`run`](crate::run) before anything
//! starts (a part the build leaves out is [`StartError::FeatureOff`]) and
//! by the tests that hold every shipped template to the features of the
//! build that serves it.

use crate::StartError;

/// A variable whose value asks for a part built only with a cargo feature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureUse {
    /// The variable.
    pub variable: &'static str,
    /// Its value.
    pub value: String,
    /// The cargo feature of `exactly-once` that builds the part in.
    pub feature: &'static str,
}

impl FeatureUse {
    /// The start-up error of a build without the feature.
    pub fn off(self) -> StartError {
        StartError::FeatureOff {
            variable: self.variable,
            value: self.value,
            feature: self.feature,
        }
    }
}

/// The parts `env` asks for that need a feature, each with the variable
/// that asks. A value the settings would refuse anyway (an unknown store)
/// asks for nothing here: the settings name it.
///
/// ```
/// let env = |name: &str| (name == "DEAD_LETTER_QUEUE_URL").then(|| "https://sqs/1/parked".to_owned());
/// let needed: Vec<_> = exactly_once::features::needed(env).into_iter().map(|u| u.feature).collect();
/// assert_eq!(needed, ["dynamodb", "sqs"]);
/// ```
pub fn needed(env: impl Fn(&str) -> Option<String>) -> Vec<FeatureUse> {
    // As the settings read them: trimmed, and empty as unset.
    let set = |variable: &str| {
        env(variable)
            .map(|value| value.trim().to_owned())
            .filter(|value| !value.is_empty())
    };
    let mut needed = Vec::new();
    let mut uses = |variable: &'static str, value: String, feature: &'static str| {
        needed.push(FeatureUse {
            variable,
            value,
            feature,
        });
    };
    // IDEMPOTENCY_STORE: the store, DynamoDB when unset.
    let store = set("IDEMPOTENCY_STORE").unwrap_or_else(|| "dynamodb".to_owned());
    if let Some(feature) = ["dynamodb", "postgres", "redis"]
        .into_iter()
        .find(|name| *name == store)
    {
        uses("IDEMPOTENCY_STORE", store, feature);
    }
    // DUPLICATE_CACHE=redis: Redis's cache of COMPLETED keys.
    if let Some(cache) = set("DUPLICATE_CACHE").filter(|cache| cache == "redis") {
        uses("DUPLICATE_CACHE", cache, "redis");
    }
    // DEAD_LETTER_QUEUE_URL: parked records sent to SQS.
    if let Some(url) = set("DEAD_LETTER_QUEUE_URL") {
        uses("DEAD_LETTER_QUEUE_URL", url, "sqs");
    }
    // TRACING_EXPORT=otlp: spans over OTLP/HTTP.
    if let Some(export) = set("TRACING_EXPORT").filter(|export| export == "otlp") {
        uses("TRACING_EXPORT", export, "opentelemetry");
    }
    needed
}

/// Each feature [`needed`] names, and whether this build has it.
const BUILT: [(&str, bool); 5] = [
    ("dynamodb", cfg!(feature = "dynamodb")),
    ("postgres", cfg!(feature = "postgres")),
    ("redis", cfg!(feature = "redis")),
    ("sqs", cfg!(feature = "sqs")),
    ("opentelemetry", cfg!(feature = "opentelemetry")),
];

/// Whether this build has `feature` (one [`needed`] names).
pub fn built_with(feature: &str) -> bool {
    BUILT.iter().any(|(name, built)| *name == feature && *built)
}

/// The first part `env` asks for that this build leaves out, as the
/// start-up error that names its feature.
pub fn check(env: impl Fn(&str) -> Option<String>) -> Result<(), StartError> {
    match needed(env)
        .into_iter()
        .find(|uses| !built_with(uses.feature))
    {
        Some(missing) => Err(missing.off()),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn features(pairs: &[(&str, &str)]) -> Vec<&'static str> {
        let env = |name: &str| {
            pairs
                .iter()
                .find(|(variable, _)| *variable == name)
                .map(|(_, value)| (*value).to_owned())
        };
        needed(env).into_iter().map(|uses| uses.feature).collect()
    }

    #[test]
    fn each_variable_asks_for_its_part() {
        assert_eq!(features(&[]), ["dynamodb"]);
        assert_eq!(features(&[("IDEMPOTENCY_STORE", "")]), ["dynamodb"]);
        assert_eq!(features(&[("IDEMPOTENCY_STORE", "postgres")]), ["postgres"]);
        assert_eq!(
            features(&[("IDEMPOTENCY_STORE", "redis"), ("DUPLICATE_CACHE", "redis")]),
            ["redis", "redis"]
        );
        assert_eq!(
            features(&[("DUPLICATE_CACHE", "none"), ("TRACING_EXPORT", "off")]),
            ["dynamodb"]
        );
        assert_eq!(
            features(&[
                (
                    "DEAD_LETTER_QUEUE_URL",
                    "https://sqs.eu-west-1.amazonaws.com/1/q"
                ),
                ("TRACING_EXPORT", "otlp")
            ]),
            ["dynamodb", "sqs", "opentelemetry"]
        );
        assert_eq!(features(&[("IDEMPOTENCY_STORE", " redis ")]), ["redis"]);
        // Unset by an empty value, as a template's `!If [c, x, ""]` does.
        assert_eq!(features(&[("DEAD_LETTER_QUEUE_URL", "")]), ["dynamodb"]);
        // Unknown: the settings name it, not a feature.
        assert_eq!(
            features(&[("IDEMPOTENCY_STORE", "mysql")]),
            Vec::<&str>::new()
        );
    }

    #[test]
    fn a_part_the_build_leaves_out_names_its_feature() {
        let env = |name: &str| (name == "TRACING_EXPORT").then(|| "otlp".to_owned());
        match check(env) {
            Ok(()) => assert!(built_with("opentelemetry")),
            Err(err) => {
                assert!(!built_with("opentelemetry"));
                assert_eq!(
                    err.to_string(),
                    "TRACING_EXPORT=otlp needs the `opentelemetry` feature of exactly-once, \
                     which this build does not have: add it to the dependency's features, \
                     or unset TRACING_EXPORT"
                );
            }
        }
    }
}
