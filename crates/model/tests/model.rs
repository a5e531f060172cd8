//! The protocol explored whole at each scope CI affords
//! (`exactly_once_model::scopes::ci`): every property holds in every state
//! reached, and each scope shows the cases it is for. The states and the
//! time are printed (`cargo test -p exactly-once-model -- --nocapture`).

use std::time::Instant;

use exactly_once_model::checker::{Expect, check};
use exactly_once_model::protocol::{PROPERTIES, Protocol};
use exactly_once_model::scopes;

/// No CI scope comes near it; a scope that grows past it fails instead of
/// running for ever.
const LIMIT: usize = 5_000_000;

fn explore(name: &str) {
    let named = scopes::ci()
        .into_iter()
        .find(|n| n.name == name)
        .expect("a CI scope");
    let model = Protocol::new(named.scope);
    let started = Instant::now();
    let report = check(&model, LIMIT);
    println!(
        "{name}: {} states, depth {}, {:.1} s",
        report.states,
        report.depth,
        started.elapsed().as_secs_f64()
    );
    for (property, trace) in &report.violations {
        println!("violated: {property}\n{}", model.describe(trace));
    }
    assert!(report.violations.is_empty(), "{name}: a property is broken");
    assert!(report.complete, "{name}: more than {LIMIT} states");
    for shown in named.shows {
        assert!(report.shown(shown), "{name} never shows {shown}");
    }
}

#[test]
fn two_containers_over_two_keys_in_opposite_orders() {
    explore("overlap");
}

#[test]
fn a_crash_at_any_step() {
    explore("crash");
}

#[test]
fn requests_and_answers_lost_delayed_and_sent_again() {
    explore("faults");
}

#[test]
fn effects_outside_the_store() {
    explore("outside");
}

#[test]
fn two_functions_sharing_a_table() {
    explore("scopes");
}

#[test]
fn the_lock_free_path() {
    explore("lock-free");
}

#[test]
fn messages_sent_after_the_commit() {
    explore("outbox");
}

#[test]
fn items_past_their_ttl() {
    explore("ttl");
}

#[test]
fn every_sometimes_property_is_shown_by_some_ci_scope() {
    let shown: Vec<&str> = scopes::ci()
        .iter()
        .flat_map(|n| n.shows.iter().copied())
        .collect();
    for property in PROPERTIES.iter().filter(|p| p.expect == Expect::Sometimes) {
        assert!(
            shown.contains(&property.name),
            "no CI scope shows {}",
            property.name
        );
    }
}
