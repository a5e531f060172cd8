//! docs/figures.toml, the measured numbers the README and docs repeat:
//! tests/repository/docs.rs holds the docs to them, and a test that
//! measures one holds it to what it measures ([`figure`]).

use std::collections::BTreeMap;
use std::path::Path;

/// docs/figures.toml: `name = "value"` lines and comments.
pub fn all() -> BTreeMap<String, String> {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/figures.toml"))
            .expect("read docs/figures.toml");
    let mut figures = BTreeMap::new();
    for (number, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, value) = line
            .split_once(" = ")
            .unwrap_or_else(|| panic!("docs/figures.toml:{}: not `name = \"value\"`", number + 1));
        let value = value
            .strip_prefix('"')
            .and_then(|value| value.strip_suffix('"'))
            .unwrap_or_else(|| panic!("docs/figures.toml:{}: a quoted value", number + 1));
        assert!(
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'),
            "docs/figures.toml:{}: a name of a-z, 0-9 and _",
            number + 1
        );
        let previous = figures.insert(name.to_owned(), value.to_owned());
        assert!(previous.is_none(), "docs/figures.toml: {name} twice");
    }
    figures
}

/// One figure's value as written (`"0"`, `"1,251 ms"`); panics naming it
/// when docs/figures.toml has no such figure.
pub fn figure(name: &str) -> String {
    all()
        .remove(name)
        .unwrap_or_else(|| panic!("docs/figures.toml has no figure {name}"))
}
