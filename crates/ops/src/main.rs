//! Operator CLI for the idempotency table: inspect a key, list stuck keys,
//! release a key or retry a failed one (see the `exactly_once_ops` library).

use std::process::ExitCode;

use clap::Parser;
use exactly_once_ops::{Cli, run};

#[tokio::main]
async fn main() -> ExitCode {
    run(Cli::parse()).await
}
