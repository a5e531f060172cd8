//! Each guard weakened once (`exactly_once_core::mutation`): the checker
//! finds a counterexample, of the length docs/guarantees.md gives, and
//! prints it. The table there is read here, so it cannot drift from what
//! the checker finds.

use exactly_once_core::mutation::{self, Mutation};
use exactly_once_model::checker::refute;
use exactly_once_model::protocol::{PROPERTIES, Protocol};
use exactly_once_model::scopes;

/// One row of the table: the mutation, the scope and the property it
/// breaks, and the length of the shortest trace.
struct Row {
    mutation: String,
    scope: String,
    property: String,
    steps: usize,
}

/// The rows of docs/guarantees.md's mutation table (between its markers).
fn rows() -> Vec<Row> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/guarantees.md");
    let text = std::fs::read_to_string(path).expect("docs/guarantees.md");
    let table = text
        .split("<!-- mutations -->")
        .nth(1)
        .expect("the mutation table's markers");
    table
        .lines()
        .filter(|line| line.starts_with("| `"))
        .map(|line| {
            let cells: Vec<&str> = line.split('|').map(str::trim).collect();
            let plain = |cell: &str| cell.trim_matches('`').to_owned();
            Row {
                mutation: plain(cells[1]),
                scope: plain(cells[3]),
                property: cells[4].to_owned(),
                steps: cells[5].parse().expect("a number of steps"),
            }
        })
        .collect()
}

#[test]
fn every_mutation_has_a_row() {
    let rows = rows();
    for mutation in Mutation::ALL {
        let name = format!("{mutation:?}");
        assert!(
            rows.iter().any(|row| row.mutation == name),
            "{name} has no row in docs/guarantees.md"
        );
    }
}

#[test]
fn each_mutation_breaks_its_property_in_as_many_steps_as_documented() {
    for row in rows() {
        let mutation = *Mutation::ALL
            .iter()
            .find(|m| format!("{m:?}") == row.mutation)
            .unwrap_or_else(|| panic!("no mutation {}", row.mutation));
        let named = scopes::ci()
            .into_iter()
            .find(|n| n.name == row.scope)
            .unwrap_or_else(|| panic!("no CI scope {}", row.scope));
        let property = PROPERTIES
            .iter()
            .find(|p| p.name == row.property)
            .unwrap_or_else(|| panic!("no property {:?}", row.property));
        let model = Protocol::new(named.scope);
        let report = mutation::with(mutation, || refute(&model, 5_000_000, property.name));
        let trace = report.violation(property.name).unwrap_or_else(|| {
            panic!(
                "{mutation:?}: the checker found no state breaking {:?} ({} states)",
                property.name, report.states
            )
        });
        println!(
            "{mutation:?} breaks {:?} in {} steps:\n{}",
            property.name,
            trace.steps.len(),
            model.describe(trace)
        );
        assert_eq!(
            trace.steps.len(),
            row.steps,
            "{mutation:?}: the shortest trace's length"
        );
    }
}
