//! Why the function could not start: each variant says what to fix.

use exactly_once_core::config::SettingsError;
use exactly_once_lambda::StoreKind;

/// An error of another crate, boxed (a handler's builder, the runtime).
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why [`run`](crate::run) could not start serving, or stopped. Printed by
/// `main` as its message (its `Debug` is its `Display`), which Lambda shows
/// as the init error.
#[derive(thiserror::Error)]
#[non_exhaustive]
pub enum StartError {
    /// A variable is missing or wrong: fix the function's configuration.
    #[error(transparent)]
    Settings(#[from] SettingsError),
    /// A variable asks for a part this build leaves out: enable the
    /// feature (`exactly-once = { features = [...] }`), or unset the variable.
    #[error(
        "{variable}={value} needs the `{feature}` feature of exactly-once, which this \
         build does not have: add it to the dependency's features, or unset {variable}"
    )]
    FeatureOff {
        /// The variable.
        variable: &'static str,
        /// Its value.
        value: String,
        /// The cargo feature that builds the part in.
        feature: &'static str,
    },
    /// The handler's effects are one store's writes, and `IDEMPOTENCY_STORE`
    /// names another: choose the handler's store, or write the handler
    /// generic over the store's effect.
    #[error(
        "this handler's effects are {handler_store} writes, which IDEMPOTENCY_STORE={chosen} \
         cannot commit: set IDEMPOTENCY_STORE={handler_store}, or write the handler for every \
         store's effect (impl<E> RecordHandler<E>)",
        handler_store = handler_store.name(),
        chosen = chosen.name()
    )]
    WrongStore {
        /// The store the handler's effects are for.
        handler_store: StoreKind,
        /// The store `IDEMPOTENCY_STORE` chose.
        chosen: StoreKind,
    },
    /// The store cannot be used as configured (a schema behind this build,
    /// an unusable table name, a connection that cannot be set up).
    #[error("the idempotency store ({store}): {reason}")]
    Store {
        /// Which store.
        store: &'static str,
        /// What is wrong, and what to do.
        reason: String,
    },
    /// The logs or spans could not be set up (`TRACING_EXPORT`).
    #[error("tracing: {0}")]
    Telemetry(String),
    /// The handler's builder (of [`run_with`](crate::run_with)) failed.
    #[error("the handler could not be built: {0}")]
    Handler(BoxError),
    /// The Lambda runtime stopped with an error.
    #[error("the Lambda runtime stopped: {0}")]
    Runtime(BoxError),
}

/// As its message, so that `main` returning it prints a sentence.
impl std::fmt::Debug for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(self, f)
    }
}
