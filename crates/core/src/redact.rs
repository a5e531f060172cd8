//! Error texts that never echo what they failed on: log lines and stored
//! errors must not carry payload content (card numbers, names, keys).

use serde_json::error::Category;

/// Says what is wrong with a JSON document without quoting it: serde's own
/// messages echo values (``invalid type: string "4111...", expected i64``),
/// so only the expected shape, a field name from the schema and the
/// position are kept.
pub fn json_error(err: &serde_json::Error) -> String {
    let at = format!("at line {} column {}", err.line(), err.column());
    match err.classify() {
        Category::Eof => format!("truncated JSON ({at})"),
        Category::Syntax => format!("not valid JSON ({at})"),
        Category::Io => "could not be read".to_owned(),
        Category::Data => {
            let message = err.to_string();
            let message = message
                .rsplit_once(" at line ")
                .map_or(message.as_str(), |(head, _)| head);
            // Field names come from the schema, not from the document.
            if message.starts_with("missing field ") || message.starts_with("duplicate field ") {
                return format!("{message} ({at})");
            }
            match message.split_once(", expected ") {
                Some((_, expected)) if !message.starts_with("unknown field ") => {
                    format!("wrong type or value, expected {expected} ({at})")
                }
                _ => format!("wrong type or value ({at})"),
            }
        }
    }
}

/// The JSON type of a value, for errors that must not show the value.
pub fn json_type(value: &serde_json::Value) -> &'static str {
    match value {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Card {
        number: i64,
        holder: String,
    }

    fn error(json: &str) -> String {
        json_error(&serde_json::from_str::<Card>(json).expect_err("invalid"))
    }

    #[test]
    fn errors_name_the_shape_never_the_value() {
        let cases = [
            (
                r#"{"number":"4111-secret","holder":"x"}"#,
                "wrong type or value, expected i64 (at line 1 column 23)",
            ),
            (
                r#"{"number":1}"#,
                "missing field `holder` (at line 1 column 12)",
            ),
            (
                r#"{"number":1,"holder":"x","secret-field":1}"#,
                "wrong type or value (at line 1 column 39)",
            ),
            (r#"{"number":1,"#, "truncated JSON (at line 1 column 12)"),
            (r"{secret}", "not valid JSON (at line 1 column 2)"),
        ];
        for (json, expected) in cases {
            let text = error(json);
            assert_eq!(text, expected, "{json}");
            assert!(!text.contains("secret"), "{text}");
        }
    }
}
