//! The manual agrees with itself and with the code: every measured number
//! the README and docs/ repeat comes from docs/figures.toml; every
//! environment variable the library reads is on the library's side of
//! docs/configuration.md, the demo ledger's on its own; every page with
//! Rust snippets is compiled as a doctest; the pg_cron purge job is one
//! statement. (The handler snippets, the IAM page and the template are
//! checked in tests/repository/template.rs.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const MARKER: &str = "<!-- figure: ";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every page of docs/ and docs/sources/, with their text.
fn pages() -> Vec<(PathBuf, String)> {
    let mut paths = vec![root().join("README.md")];
    let mut docs: Vec<PathBuf> = ["docs", "docs/sources"]
        .iter()
        .flat_map(|dir| {
            std::fs::read_dir(root().join(dir)).unwrap_or_else(|e| panic!("read {dir}/: {e}"))
        })
        .map(|entry| entry.expect("a docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .collect();
    docs.sort();
    paths.extend(docs);
    paths
        .into_iter()
        .map(|path| {
            let text = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
            (path, text)
        })
        .collect()
}

fn shown(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// docs/figures.toml's figures, each a number with a unit.
fn figures() -> BTreeMap<String, String> {
    let figures = crate::support::figures::all();
    for (name, value) in &figures {
        assert!(
            parse_figure(value).is_some(),
            "docs/figures.toml: {name} = {value:?} is not a number with a unit"
        );
    }
    figures
}

/// Units a figure may have, longest first where one ends another.
const UNITS: &[&str] = &["ms", "min", "MB", "/s", "s", "x", "%"];

/// A figure at the end of `text`, as (the number as written, its unit):
/// `... takes **0.84 s**` is ("0.84", "s"); `1,251 ms` is ("1,251", "ms");
/// `30.4x` is ("30.4", "x"); `0.024` is ("0.024", "").
fn parse_figure(text: &str) -> Option<(String, String)> {
    let text = text.trim_end_matches('*');
    let (rest, unit) = UNITS
        .iter()
        .find_map(|unit| text.strip_suffix(unit).map(|rest| (rest, *unit)))
        .unwrap_or((text, ""));
    let rest = if unit.is_empty() {
        rest
    } else {
        rest.strip_suffix(' ').unwrap_or(rest)
    };
    let start = rest
        .char_indices()
        .rev()
        .take_while(|(_, c)| c.is_ascii_digit() || *c == '.' || *c == ',')
        .last()
        .map(|(i, _)| i)?;
    let number = rest[start..].trim_start_matches([',', '.']);
    let digits = number.trim_end_matches([',', '.']);
    if digits.is_empty() || digits != number || !number.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    Some((number.to_owned(), unit.to_owned()))
}

fn value_of(number: &str) -> f64 {
    number.replace(',', "").parse().expect("a number")
}

fn decimals(number: &str) -> i32 {
    number
        .split_once('.')
        .map_or(0, |(_, fraction)| fraction.len() as i32)
}

/// Whether `written` shows `figure`: the same, or rounded to fewer
/// decimals, or milliseconds written as seconds.
fn shows(written: &(String, String), figure: &(String, String)) -> bool {
    let scale = match (figure.1.as_str(), written.1.as_str()) {
        (a, b) if a == b => 1.0,
        ("ms", "s") => 0.001,
        _ => return false,
    };
    let expected = value_of(&figure.0) * scale;
    let tolerance = 0.5 * 10f64.powi(-decimals(&written.0)) + 1e-9;
    (expected - value_of(&written.0)).abs() <= tolerance
}

/// Every figure marker of every page names a figure of docs/figures.toml
/// and follows that figure's value (or a rounding of it), and every
/// figure is used: a number changed in one place and not in the others
/// fails, naming each place.
#[test]
fn every_repeated_figure_is_the_one_of_figures_toml() {
    let figures = figures();
    assert!(figures.len() >= 20, "{figures:?}");
    let mut used = BTreeSet::new();
    let mut problems = Vec::new();
    for (path, text) in pages() {
        for (number, line) in text.lines().enumerate() {
            let place = format!("{}:{}", shown(&path), number + 1);
            let mut rest = line;
            let mut before = String::new();
            while let Some(at) = rest.find(MARKER) {
                before.push_str(&rest[..at]);
                let after = &rest[at + MARKER.len()..];
                let Some((name, tail)) = after.split_once(" -->") else {
                    problems.push(format!("{place}: a marker without ` -->`"));
                    break;
                };
                rest = tail;
                let Some(value) = figures.get(name) else {
                    problems.push(format!(
                        "{place}: `{name}` is not a figure of docs/figures.toml"
                    ));
                    continue;
                };
                used.insert(name.to_owned());
                let figure = parse_figure(value).expect("checked when read");
                match parse_figure(&before) {
                    Some(written) if shows(&written, &figure) => {}
                    Some((number, unit)) => problems.push(format!(
                        "{place}: `{name}` is {value} (docs/figures.toml), the page says {number}{}{unit}",
                        if unit.is_empty() || unit == "x" || unit == "%" { "" } else { " " },
                    )),
                    None => problems.push(format!(
                        "{place}: no figure right before the marker of `{name}` ({value})"
                    )),
                }
            }
        }
    }
    for name in figures.keys().filter(|name| !used.contains(*name)) {
        problems.push(format!(
            "docs/figures.toml: `{name}` is used by no page (remove it, or mark its uses)"
        ));
    }
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

#[test]
fn a_figure_is_read_with_its_unit_and_its_roundings() {
    let parsed = |text: &str| parse_figure(text).map(|(n, u)| format!("{n}|{u}"));
    assert_eq!(parsed("takes **0.84 s**").as_deref(), Some("0.84|s"));
    assert_eq!(parsed("| 1,251 ms").as_deref(), Some("1,251|ms"));
    assert_eq!(parsed("(30.4x").as_deref(), Some("30.4|x"));
    assert_eq!(parsed("record (0.024").as_deref(), Some("0.024|"));
    assert_eq!(parsed("19.7 MB").as_deref(), Some("19.7|MB"));
    assert_eq!(parsed("a sentence."), None);
    assert_eq!(parsed("requests"), None);
    let figure = |text: &str| parse_figure(text).expect("a figure");
    assert!(shows(&figure("0.84 s"), &figure("841 ms")));
    assert!(shows(&figure("22.2 s"), &figure("22,199 ms")));
    assert!(shows(&figure("26x"), &figure("26.4x")));
    assert!(shows(&figure("0.01"), &figure("0.010")));
    assert!(!shows(&figure("0.85 s"), &figure("841 ms")));
    assert!(!shows(&figure("842 ms"), &figure("841 ms")));
    assert!(!shows(&figure("27x"), &figure("26.4x")));
    assert!(!shows(&figure("12.7 MB"), &figure("12.7 ms")));
}

/// The rows of the Markdown table under `heading` in `page` (up to the
/// next heading): each row's first cell's code spans.
fn variables_under(page: &str, heading: &str) -> BTreeSet<String> {
    let section = page
        .split(&format!("\n{heading}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("docs/configuration.md: a section {heading}"))
        .split("\n## ")
        .next()
        .expect("its text");
    section
        .lines()
        .filter(|line| line.starts_with("| `"))
        .flat_map(|line| {
            let first = line
                .trim_start_matches('|')
                .split(" | ")
                .next()
                .unwrap_or("");
            first
                .split('`')
                .skip(1)
                .step_by(2)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// docs/configuration.md lists what `exactly_once::run` reads under the
/// library's variables, and the demo ledger's own variables apart: a
/// variable added to the code and not to the page fails, and so does a
/// ledger variable listed as the library's.
#[test]
fn the_configuration_page_separates_the_librarys_variables_from_the_demos() {
    let page = std::fs::read_to_string(root().join("docs/configuration.md"))
        .expect("read docs/configuration.md");
    let library = variables_under(&page, "## The library's variables");
    let demo = variables_under(&page, "## The shipped function's variables");
    let read: BTreeSet<String> = exactly_once::lambda::ENV_VARS
        .iter()
        .chain(exactly_once::dynamodb::settings::ENV_VARS)
        .chain(exactly_once::postgres::connect::ENV_VARS)
        .chain(exactly_once::redis::connect::ENV_VARS)
        .chain(exactly_once::redis::cache::ENV_VARS)
        .map(|name| (*name).to_owned())
        .collect();
    // Read by the library too, from the AWS SDK's, Lambda's or
    // OpenTelemetry's conventions rather than its own settings.
    let conventional: BTreeSet<String> = [
        "AWS_ENDPOINT_URL_DYNAMODB",
        "AWS_LAMBDA_FUNCTION_NAME",
        "AWS_LAMBDA_MAX_CONCURRENCY",
        "AWS_LAMBDA_LOG_FORMAT",
        "AWS_LAMBDA_LOG_LEVEL",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect();
    let missing: Vec<&String> = read.difference(&library).collect();
    assert!(
        missing.is_empty(),
        "the library reads {missing:?}: list them under \"The library's variables\""
    );
    let unknown: Vec<&String> = library
        .difference(&read)
        .filter(|name| !conventional.contains(*name))
        .collect();
    assert!(
        unknown.is_empty(),
        "\"The library's variables\" lists {unknown:?}, which the library does not read"
    );
    let ledger: BTreeSet<String> = ledger::ENV_VARS.iter().map(|n| (*n).to_owned()).collect();
    assert_eq!(
        demo, ledger,
        "\"The shipped function's variables\" (left) are the demo ledger's (right)"
    );
    assert!(library.is_disjoint(&ledger), "{library:?}");
}

/// Every page of docs/ with a ```rust snippet is compiled as a doctest
/// (the `#[cfg(doctest)]` module of src/lib.rs includes it), and no code
/// block is left without a language: rustdoc would compile an untagged one
/// as Rust, and a reader could not tell.
#[test]
fn every_page_with_rust_snippets_is_a_doctest_and_every_block_has_a_language() {
    let lib = std::fs::read_to_string(root().join("src/lib.rs")).expect("read src/lib.rs");
    let doctests = lib
        .split("#[cfg(doctest)]")
        .nth(1)
        .expect("a #[cfg(doctest)] module in src/lib.rs");
    let mut problems = Vec::new();
    for (path, text) in pages() {
        let name = shown(&path);
        let mut open = false;
        let mut rust = false;
        for (number, line) in text.lines().enumerate() {
            let fence = line.trim_start();
            if !fence.starts_with("```") {
                continue;
            }
            rust |= !open && fence.starts_with("```rust");
            if !open && fence == "```" {
                problems.push(format!(
                    "{name}:{}: a code block without a language",
                    number + 1
                ));
            }
            open = !open;
        }
        let included = format!("include_str!(\"../{name}\")");
        if name.starts_with("docs/") && rust && !doctests.contains(&included) {
            problems.push(format!(
                "{name} has Rust snippets: add it to the #[cfg(doctest)] module of src/lib.rs"
            ));
        }
    }
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

/// The pg_cron job that purges expired rows is one statement wherever the
/// manual shows it (docs/stores.md, docs/deploy-variants.md): the one
/// `exactly-once-ops purge-expired` runs, rows being written skipped.
#[test]
fn the_pg_cron_purge_is_the_same_statement_everywhere() {
    let mut statements = BTreeMap::new();
    for (path, text) in pages() {
        let mut lines = text.lines();
        while let Some(line) = lines.next() {
            if line.trim_start() != "```sql" {
                continue;
            }
            let block: Vec<&str> = lines
                .by_ref()
                .take_while(|line| line.trim_start() != "```")
                .map(str::trim)
                .collect();
            let block = block.join("\n");
            if block.contains("cron.schedule") {
                statements.insert(shown(&path), block);
            }
        }
    }
    assert!(statements.len() >= 2, "{statements:?}");
    let first = statements.values().next().expect("one").clone();
    assert!(first.contains("FOR UPDATE SKIP LOCKED"), "{first}");
    for (page, statement) in &statements {
        assert_eq!(statement, &first, "the pg_cron job of {page}");
    }
}

/// The names `pub use` lines of `source` bring in (the last segment of a
/// path, or each name of a `{...}` list).
fn reexported(source: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut statement = String::new();
    for line in source.lines().filter(|line| !line.starts_with("//")) {
        if line.starts_with("pub use ") || !statement.is_empty() {
            statement.push_str(line);
            if line.trim_end().ends_with(';') {
                let path = statement
                    .trim_start_matches("pub use ")
                    .trim_end_matches(';');
                let list = match path.split_once('{') {
                    Some((_, list)) => list.trim_end_matches('}').to_owned(),
                    None => path.rsplit("::").next().unwrap_or(path).to_owned(),
                };
                names.extend(
                    list.split(',')
                        .map(|name| name.trim().to_owned())
                        .filter(|name| !name.is_empty()),
                );
                statement.clear();
            }
        }
    }
    names
}

/// docs/handlers.md lists exactly what `use exactly_once::prelude::*;`
/// brings (src/prelude.rs's re-exports).
#[test]
fn the_handlers_page_lists_the_prelude() {
    let handlers = std::fs::read_to_string(root().join("docs/handlers.md")).expect("handlers.md");
    let bullet = handlers
        .split("- `use exactly_once::prelude::*;` brings ")
        .nth(1)
        .and_then(|rest| rest.split("\n\n").next())
        .expect("the prelude's bullet");
    // Its code spans but the methods mentioned (`body()`).
    let listed: BTreeSet<String> = bullet
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|span| !span.contains('('))
        .map(str::to_owned)
        .collect();
    let prelude = std::fs::read_to_string(root().join("src/prelude.rs")).expect("src/prelude.rs");
    assert_eq!(listed, reexported(&prelude));
}
