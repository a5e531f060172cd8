//! The protocol of exactly-once, model-checked: every interleaving of
//! workers, leases, crashes and late writes at small scope, on the core
//! crate's own transitions (docs/guarantees.md, "Model-checked").
//!
//! - [`checker`]: an explicit-state, breadth-first model checker (shortest
//!   counterexamples).
//! - [`protocol`]: the protocol as a model of it, and its properties.
//! - [`scopes`]: the scopes CI explores, and bigger ones on demand.

#![deny(missing_docs)]

pub mod checker;
pub mod protocol;
pub mod scopes;
