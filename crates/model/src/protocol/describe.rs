//! A trace as a reader follows it: each step, then the items, what each
//! worker holds, and what the destination accepted.

use std::fmt::Write as _;

use super::{Protocol, Slot, State};
use crate::checker::Trace;

impl Protocol {
    /// `trace`, one step per line, each followed by the state it led to.
    pub fn describe(&self, trace: &Trace<Self>) -> String {
        let mut text = String::new();
        self.describe_state(&mut text, &trace.init);
        for (number, (action, state)) in trace.steps.iter().enumerate() {
            let _ = writeln!(text, "{:>3}. {action:?}", number + 1);
            self.describe_state(&mut text, state);
        }
        text
    }

    fn describe_state(&self, text: &mut String, state: &State) {
        let _ = write!(text, "     t={}", state.now);
        for (key, keyed) in state.items.iter().enumerate() {
            match keyed {
                Some(k) => {
                    let item = &k.item;
                    let outbox = if item.outbox.is_some() { " outbox" } else { "" };
                    let _ = write!(
                        text,
                        " | k{key} {} v{} {} lock {:?} ttl {} effects {}+{}{outbox}",
                        item.status.as_str(),
                        item.version,
                        item.owner,
                        item.lock_expires_at_ms,
                        item.expires_at_s,
                        k.store_effects,
                        k.outside_effects
                    );
                }
                None => {
                    let _ = write!(text, " | k{key} absent");
                }
            }
        }
        let _ = writeln!(text);
        for (w, worker) in state.workers.iter().enumerate() {
            let slots: Vec<String> = worker.slots.iter().map(slot_text).collect();
            let _ = writeln!(
                text,
                "       w{w} ({}) {:?} #{} [{}] done {:b}",
                self.scope.workers[w].scope,
                worker.phase,
                worker.invocation,
                slots.join(", "),
                worker.done
            );
        }
        for delivered in &state.destination {
            let _ = writeln!(
                text,
                "       destination: {:?} id {}",
                delivered.body,
                &delivered.id[..8]
            );
        }
        for request in &state.net {
            let late = if request.late { " (late)" } else { "" };
            let _ = writeln!(
                text,
                "       net {:?}{late}: {:?}",
                request.from, request.op
            );
        }
    }
}

fn slot_text(slot: &Slot) -> String {
    match slot {
        Slot::Held(l) => format!("held {} v{}", l.owner, l.version),
        Slot::Ran(l) => format!("ran {} v{}", l.owner, l.version),
        Slot::Completing { lease, sent, .. } => {
            format!(
                "completing {} v{} (sent {sent})",
                lease.owner, lease.version
            )
        }
        Slot::Unsent { owner } => format!("unsent (completed as {owner})"),
        Slot::Sent { owner } => format!("sent (completed as {owner})"),
        Slot::Claiming {
            owner, observed, ..
        } => match observed {
            Some(v) => format!("taking over v{v} as {owner}"),
            None => format!("claiming as {owner}"),
        },
        other => format!("{other:?}"),
    }
}
