//! The repository agrees with itself: the manual with the code and its
//! measured figures, the deploy docs with the templates, `template.yaml` and
//! its SAM pieces with what the code reads and writes. No server needed.

#[path = "../support/mod.rs"]
mod support;

mod deploy_docs;
mod docs;
mod template;
