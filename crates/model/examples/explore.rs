//! Explores a scope and prints what it found:
//! `cargo run --release -p exactly-once-model --example explore -- [name] [limit]`
//! (every scope of CI without a name).

use std::time::Instant;

use exactly_once_model::checker::check;
use exactly_once_model::protocol::Protocol;
use exactly_once_model::scopes;

fn main() {
    let mut args = std::env::args().skip(1);
    let name = args.next();
    let limit = args
        .next()
        .and_then(|l| l.parse().ok())
        .unwrap_or(50_000_000);
    let all = scopes::ci().into_iter().chain(scopes::larger());
    let horizon: Option<u8> = std::env::var("HORIZON").ok().and_then(|h| h.parse().ok());
    for mut named in all.filter(|n| name.as_deref().is_none_or(|name| name == n.name)) {
        if let Some(horizon) = horizon {
            named.scope.horizon = horizon;
        }
        let started = Instant::now();
        let report = check(&Protocol::new(named.scope), limit);
        println!(
            "{}: {} states, depth {}, {}, {:.1} s; {} violated, {} of the sometimes shown",
            named.name,
            report.states,
            report.depth,
            if report.complete {
                "complete"
            } else {
                "cut at the limit"
            },
            started.elapsed().as_secs_f64(),
            report.violations.len(),
            report.examples.len(),
        );
        for (property, trace) in &report.examples {
            println!("  shown: {property} ({} steps)", trace.steps.len());
        }
        for (property, trace) in &report.violations {
            println!("  violated: {property} ({} steps)", trace.steps.len());
            for (action, _) in &trace.steps {
                println!("    {action:?}");
            }
        }
    }
}
