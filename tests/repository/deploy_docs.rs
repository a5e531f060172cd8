//! docs/deploy.md's parameter tables agree with what they describe, both
//! ways: "The pieces' parameters" has one row for each parameter of
//! sam/exactly-once.yaml and sam/function-wiring.yaml (but the inputs that
//! wire them to the function), "The function's settings" one for each
//! parameter template.yaml has beside them, and no row names anything
//! else; each row's default is the template's `Default`; each `CDK prop`
//! names props, factories or types that exist in cdk/src.
//!
//! A row is `| parameter | CDK prop | default | meaning |`:
//! - parameter: the name as a code span (several, comma-separated, name
//!   several parameters, each checked);
//! - CDK prop: code spans, each a prop (`batchSize`; a path of props,
//!   `schemaRegistry.uri`, each segment a prop), a factory (`Source.sqs`,
//!   `Store.existingDynamoDbTable`: a static method of that class) or a type
//!   (`KafkaAuth`); or a cell starting with `—` when the setting is not the
//!   construct's (the function's own), whose text is not checked;
//! - default: `` `value` `` (the `Default` as CloudFormation reads it:
//!   `100`, `-1`, `true`) or `(empty)` for "", one per parameter,
//!   comma-separated.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_norway::Value;

/// Parameters of sam/function-wiring.yaml that the template fills from the
/// function and the other piece's outputs: not settings, not in the table.
const WIRING_INPUTS: [&str; 7] = [
    "Function",
    "FunctionArn",
    "AlarmTopic",
    "DeadLetterQueueArn",
    "DeadLetterQueueName",
    "FailedRecordsBucketArn",
    "ParentStackName",
];

const PIECES_HEADING: &str = "### The pieces' parameters";
const FUNCTION_HEADING: &str = "### The function's settings";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap_or_else(|e| panic!("read {path}: {e}"))
}

/// The `Parameters` of a template (its short tags, `!Ref` and the like,
/// read as tagged values), by name.
fn parameters(path: &str) -> BTreeMap<String, Value> {
    let template: Value =
        serde_norway::from_str(&read(path)).unwrap_or_else(|e| panic!("{path} is YAML: {e}"));
    template["Parameters"]
        .as_mapping()
        .unwrap_or_else(|| panic!("{path} has Parameters"))
        .iter()
        .map(|(name, definition)| {
            (
                name.as_str().expect("a parameter's name").to_owned(),
                definition.clone(),
            )
        })
        .collect()
}

/// A parameter's `Default` as a table cell shows it.
fn default_cell(path: &str, name: &str, definition: &Value) -> String {
    let value = match &definition["Default"] {
        Value::String(text) => text.clone(),
        Value::Number(number) => number.to_string(),
        Value::Bool(flag) => flag.to_string(),
        other => panic!("{path}: {name} has no scalar Default: {other:?}"),
    };
    if value.is_empty() {
        "(empty)".to_owned()
    } else {
        format!("`{value}`")
    }
}

/// The cells of a table row, split on the `|` outside code spans (a `|`
/// in a code span, or escaped as `\|`, stays in its cell).
fn cells(line: &str) -> Vec<String> {
    let inner = line
        .trim()
        .strip_prefix('|')
        .and_then(|line| line.strip_suffix('|'))
        .unwrap_or_else(|| panic!("a table row: {line}"));
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut in_code = false;
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' if !in_code => {
                cell.push(c);
                cell.extend(chars.next());
            }
            '`' => {
                in_code = !in_code;
                cell.push(c);
            }
            '|' if !in_code => cells.push(std::mem::take(&mut cell).trim().to_owned()),
            _ => cell.push(c),
        }
    }
    cells.push(cell.trim().to_owned());
    cells
}

/// The rows of the first table under `heading` (up to the next heading),
/// each with its line number.
fn table_rows(page: &str, heading: &str) -> Vec<(usize, Vec<String>)> {
    let lines: Vec<&str> = page.lines().collect();
    let start = lines
        .iter()
        .position(|line| *line == heading)
        .unwrap_or_else(|| panic!("docs/deploy.md has a section {heading:?}"));
    let section: Vec<(usize, &str)> = lines
        .iter()
        .enumerate()
        .skip(start + 1)
        .take_while(|(_, line)| !line.starts_with('#'))
        .map(|(number, line)| (number + 1, *line))
        .collect();
    let rows: Vec<(usize, Vec<String>)> = section
        .iter()
        .skip_while(|(_, line)| !line.starts_with('|'))
        .take_while(|(_, line)| line.starts_with('|'))
        .skip(2) // the header and its rule
        .map(|(number, line)| (*number, cells(line)))
        .collect();
    assert!(!rows.is_empty(), "{heading}: a table");
    rows
}

/// The code spans of a cell, in order: `a`, `b` in "`a` and `b`".
fn code_spans(cell: &str) -> Vec<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// The default cell's items: "`a`, (empty)" is ["`a`", "(empty)"].
fn default_items(cell: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut item = String::new();
    let mut in_code = false;
    for c in cell.chars() {
        if c == '`' {
            in_code = !in_code;
        }
        if c == ',' && !in_code {
            items.push(std::mem::take(&mut item).trim().to_owned());
        } else {
            item.push(c);
        }
    }
    items.push(item.trim().to_owned());
    items
}

/// The TypeScript of cdk/src, every file.
fn cdk_sources() -> String {
    let dir = root().join("cdk/src");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|entry| entry.expect("a cdk/src entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "ts"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "cdk/src holds the construct");
    paths
        .iter()
        .map(|path| std::fs::read_to_string(path).expect("read a cdk/src file"))
        .collect::<Vec<_>>()
        .join("\n")
}

fn is_identifier(text: &str) -> bool {
    let mut chars = text.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Whether `source` declares the prop `name` (`readonly name?:` or
/// `readonly name:`).
fn declares_prop(source: &str, name: &str) -> bool {
    source.contains(&format!("readonly {name}?:")) || source.contains(&format!("readonly {name}:"))
}

/// Whether `source` declares `name` as a class, interface or enum.
fn declares_type(source: &str, name: &str) -> bool {
    ["class", "interface", "enum"].iter().any(|kind| {
        source
            .match_indices(&format!("{kind} {name}"))
            .any(|(at, found)| {
                !source[at + found.len()..].starts_with(|c: char| c.is_ascii_alphanumeric())
            })
    })
}

/// Why the code span `span` of a `CDK prop` cell names nothing of
/// cdk/src, if it does not.
fn unknown_cdk_name(source: &str, span: &str) -> Option<String> {
    let first = span.chars().next()?;
    let parts: Vec<&str> = span.split('.').collect();
    if !parts.iter().all(|part| is_identifier(part)) {
        return Some(format!("`{span}` is not a prop, a factory or a type"));
    }
    if first.is_ascii_uppercase() {
        match parts.as_slice() {
            [kind] if declares_type(source, kind) => None,
            [kind] => Some(format!("no class, interface or enum {kind} in cdk/src")),
            [class, _] if !declares_type(source, class) => {
                Some(format!("no class {class} (for `{span}`) in cdk/src"))
            }
            [_, method] if source.contains(&format!("static {method}(")) => None,
            [_, method] => Some(format!(
                "no static method {method} (for `{span}`) in cdk/src"
            )),
            _ => Some(format!("`{span}`: Class.factory, at most")),
        }
    } else {
        parts
            .iter()
            .find(|part| !declares_prop(source, part))
            .map(|part| format!("no prop `readonly {part}` (for `{span}`) in cdk/src"))
    }
}

/// Checks one table against the parameters it must list: each exactly
/// once, with its default; returns the problems.
fn check_table(
    page: &str,
    heading: &str,
    expected: &BTreeMap<String, (&str, Value)>,
    cdk: &str,
) -> Vec<String> {
    let mut problems = Vec::new();
    let mut listed = BTreeSet::new();
    for (line, row) in table_rows(page, heading) {
        let place = format!("docs/deploy.md:{line}");
        if row.len() != 4 {
            problems.push(format!(
                "{place}: 4 cells (parameter | CDK prop | default | meaning), not {}",
                row.len()
            ));
            continue;
        }
        let names = code_spans(&row[0]);
        if names.is_empty() {
            problems.push(format!("{place}: no `parameter` in {:?}", row[0]));
        }
        let defaults = default_items(&row[2]);
        if defaults.len() != names.len() {
            problems.push(format!(
                "{place}: {} parameter(s) but {} default(s) in {:?}",
                names.len(),
                defaults.len(),
                row[2]
            ));
        }
        for (name, written) in names.iter().zip(&defaults) {
            if !listed.insert(name.clone()) {
                problems.push(format!("{place}: {name} has another row"));
            }
            match expected.get(name) {
                None => problems.push(format!(
                    "{place}: {name} is not a parameter this table lists ({heading})"
                )),
                Some((path, definition)) => {
                    let default = default_cell(path, name, definition);
                    if *written != default {
                        problems.push(format!(
                            "{place}: {name}'s default is {default} in {path}, the row says {written}"
                        ));
                    }
                }
            }
        }
        let prop = &row[1];
        if !prop.starts_with('—') {
            let spans = code_spans(prop);
            if spans.is_empty() {
                problems.push(format!(
                    "{place}: the CDK prop names none (or starts with — and says why): {prop:?}"
                ));
            }
            for span in spans {
                if let Some(why) = unknown_cdk_name(cdk, &span) {
                    problems.push(format!("{place}: {why}"));
                }
            }
        }
    }
    for (name, (path, _)) in expected {
        if !listed.contains(name) {
            problems.push(format!("{heading} has no row for {path}'s {name}"));
        }
    }
    problems
}

#[test]
fn the_parameter_tables_are_the_pieces_and_template_yaml_both_ways() {
    let page = read("docs/deploy.md");
    let cdk = cdk_sources();
    let mut pieces: BTreeMap<String, (&str, Value)> = BTreeMap::new();
    for path in ["sam/exactly-once.yaml", "sam/function-wiring.yaml"] {
        for (name, definition) in parameters(path) {
            if WIRING_INPUTS.contains(&name.as_str()) {
                continue;
            }
            // A parameter both pieces take has one default (tests/repository/template.rs
            // also checks both against template.yaml's definition).
            if let Some((first, theirs)) = pieces.get(&name) {
                assert_eq!(
                    theirs["Default"], definition["Default"],
                    "{name}: {first} and {path} differ in Default"
                );
                continue;
            }
            pieces.insert(name, (path, definition));
        }
    }
    assert!(
        pieces.len() >= 70,
        "the pieces' parameters: {}",
        pieces.len()
    );
    let own: BTreeMap<String, (&str, Value)> = parameters("template.yaml")
        .into_iter()
        .filter(|(name, _)| !pieces.contains_key(name))
        .map(|(name, definition)| (name, ("template.yaml", definition)))
        .collect();
    assert!(
        own.len() >= 30,
        "template.yaml's own parameters: {}",
        own.len()
    );

    let mut problems = check_table(&page, PIECES_HEADING, &pieces, &cdk);
    problems.extend(check_table(&page, FUNCTION_HEADING, &own, &cdk));
    assert!(problems.is_empty(), "\n{}\n", problems.join("\n"));
}

/// The checks above can fail: a wrong default, an unknown prop, a missing
/// row and a row of nothing are each caught.
#[test]
fn the_table_check_catches_a_wrong_default_a_wrong_prop_and_a_missing_row() {
    let cdk = "export interface P {\n  readonly batchSize?: number;\n}\n\
               export class Source {\n  public static sqs(): Source {}\n}\n";
    let definition = |default: &str| -> Value {
        serde_norway::from_str(&format!("{{Type: Number, Default: {default}}}")).unwrap()
    };
    let expected: BTreeMap<String, (&str, Value)> = [
        ("BatchSize".to_owned(), ("piece.yaml", definition("100"))),
        ("Other".to_owned(), ("piece.yaml", definition("\"\""))),
    ]
    .into_iter()
    .collect();
    let page = |rows: &str| {
        format!(
            "# Deploy\n\n### T\n\n| parameter | CDK prop | default | meaning |\n| --- | --- | --- | --- |\n{rows}\n## After\n"
        )
    };
    let good = page(
        "| `BatchSize` | `batchSize` of `Source.sqs` | `100` | records |\n\
         | `Other` | — not the construct's | (empty) | x |",
    );
    assert_eq!(
        check_table(&good, "### T", &expected, cdk),
        Vec::<String>::new()
    );

    let wrong_default =
        page("| `BatchSize` | `batchSize` | `10` | records |\n| `Other` | — | (empty) | x |");
    let problems = check_table(&wrong_default, "### T", &expected, cdk);
    assert!(
        problems.len() == 1 && problems[0].contains("BatchSize's default is `100`"),
        "{problems:?}"
    );

    let wrong_prop = page(
        "| `BatchSize` | `batchSizes` of `Source.kinesis` | `100` | records |\n\
         | `Other` | `KafkaAuth` | (empty) | x |",
    );
    let problems = check_table(&wrong_prop, "### T", &expected, cdk);
    assert_eq!(problems.len(), 3, "{problems:?}");

    let missing_and_unknown =
        page("| `BatchSize` | `batchSize` | `100` | records |\n| `Nothing` | — | `1` | x |");
    let problems = check_table(&missing_and_unknown, "### T", &expected, cdk);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("Nothing is not a parameter"))
            && problems
                .iter()
                .any(|p| p.contains("no row for piece.yaml's Other")),
        "{problems:?}"
    );
}
