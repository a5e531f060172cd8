//! Operator CLI for the idempotency table: inspect a key, list stuck keys,
//! release a key or retry a failed one (see `exactly_once::ops`).

use std::process::ExitCode;

use clap::Parser;
use exactly_once::ops::{Cli, run};

#[tokio::main]
async fn main() -> ExitCode {
    run(Cli::parse()).await
}
