//! The scheduled checks EventBridge's schedule runs instead of a batch: the
//! stuck-key check and the sweeper of unsent messages, each logged and
//! written as its EMF document.

use exactly_once_core::clock::now_ms;
use exactly_once_core::engine::{RecordHandler, Swept};
use exactly_once_core::store::{Listing, Operator};

use super::BatchFunction;
use crate::error::InvocationError;
use crate::sources::FromRecord;
use crate::stuck_check::{self, StartedKeys};

/// The scheduled checks need the store's listings ([`Operator`]).
impl<H, S> BatchFunction<H, S>
where
    S: Operator,
    H: RecordHandler<S::Effect>,
    H::Record: FromRecord,
{
    /// The sweeper: sends the messages of this function's keys COMPLETED
    /// more than [`SWEEP_AFTER`](stuck_check::SWEEP_AFTER) ago and still
    /// unsent, and writes its EMF document (`UnsentRecords`, `SweptRecords`,
    /// `OldestUnsentAgeSeconds`).
    pub async fn sweep_unsent(&self, function_name: &str) -> Result<Swept, InvocationError> {
        let swept = self
            .engine
            .send_unsent(stuck_check::SWEEP_AFTER)
            .await
            .map_err(InvocationError::Sweep)?;
        tracing::info!(
            target: super::TARGET,
            unsent = swept.found,
            sent = swept.sent,
            oldest_left_age_s = swept.oldest_left_age_s,
            "sweep of unsent messages"
        );
        if let Some(write) = &self.metrics {
            write(&stuck_check::sweep_metrics(&swept, function_name, now_ms()).to_string());
        }
        Ok(swept)
    }

    /// Lists the STARTED keys through the store's index of them, logs the
    /// stuck ones (lock ended, not taken over: by origin, owner and version,
    /// the key as `LOG_KEYS` shows keys) and writes the check's EMF document
    /// (`StartedKeys`, `StuckKeys`, `OldestStartedAgeSeconds`).
    pub async fn check_started_keys(
        &self,
        function_name: &str,
    ) -> Result<StartedKeys, InvocationError> {
        let store = self.engine.store();
        // Every STARTED key: the lock ended, or created before now.
        let all_started = Listing::Stuck {
            older_than: std::time::Duration::ZERO,
        };
        let mut listed = store
            .list(all_started)
            .await
            .map_err(InvocationError::StuckKeyCheck)?;
        // This function's keys: another function sharing the table checks
        // its own.
        let config = store.config();
        listed
            .items
            .retain(|item| config.owns(item.scope.as_deref()));
        let now = store.now_ms();
        let prefix = &store.config().key_prefix;
        for item in listed.items.iter().filter(|item| item.lock_expired(now)) {
            let key = item.pk.strip_prefix(prefix.as_str()).unwrap_or(&item.pk);
            tracing::warn!(
                target: super::TARGET,
                key = %self.settings.log_keys.show(key),
                version = item.version,
                owner = %item.owner,
                origin = item.origin.as_deref().unwrap_or("-"),
                "stuck key: STARTED, its lock ended and nobody took it over"
            );
        }
        let keys = StartedKeys::of(&listed.items, now);
        tracing::info!(
            target: super::TARGET,
            started = keys.started,
            stuck = keys.stuck,
            oldest_age_s = keys.oldest_age_s,
            items_read = listed.cost.read,
            requests = listed.cost.requests,
            "stuck-key check"
        );
        if let Some(write) = &self.metrics {
            write(&keys.metrics(function_name, now_ms()).to_string());
        }
        Ok(keys)
    }
}
