//! The business logic's side of the contract.

use std::future::Future;

use crate::store::outbox::{self, Message};
use crate::store::{Effects, Increment, Lease};

use super::send::Sender;

/// Handed to the business logic with every message it runs.
///
/// Two different things for two different jobs:
/// - [`FencingToken::idempotency_key`] is the SAME for every delivery,
///   takeover and release of one idempotency key: pass it to a downstream
///   system's own idempotency mechanism (a payment API's `Idempotency-Key`
///   header), so that the attempt after a crash or a takeover is recognised
///   there as the same request and applied at most once.
/// - `version` grows with every takeover and release: a fencing number for
///   systems that compare it (a conditional write that accepts only a
///   version above the one stored), so that a worker whose lock was taken
///   over cannot overwrite the newer owner's write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FencingToken {
    /// The item's partition key (key prefix + idempotency key).
    pub key: String,
    /// Fencing number: grows with every takeover and release of the key.
    pub version: u64,
    /// Unique to this claim.
    pub owner: String,
}

impl FencingToken {
    /// The key to hand to downstream idempotency mechanisms: the item's
    /// partition key, unchanged by takeovers and releases (so never the
    /// version, which would make every retry a new request downstream).
    pub fn idempotency_key(&self) -> &str {
        if mutated!(DownstreamKeyPerAttempt) {
            return &self.owner;
        }
        &self.key
    }
}

impl From<&Lease> for FencingToken {
    fn from(lease: &Lease) -> Self {
        Self {
            key: lease.pk.clone(),
            version: lease.version,
            owner: lease.owner.clone(),
        }
    }
}

/// Why the business logic did not finish a message, and whether trying again
/// can help.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HandlerError {
    /// A passing problem (a dependency down, throttling): the key is released
    /// and the message comes again.
    #[error("retryable: {0}")]
    Retryable(String),
    /// The message itself is wrong (a poison record): the key is stored as
    /// FAILED and its redeliveries never run the work again.
    #[error("permanent: {0}")]
    Permanent(String),
}

/// What finished work leaves for the engine to record. `E` is the store's
/// effect type ([`crate::store::Store::Effect`]; DynamoDB: a
/// `TransactWriteItem`).
#[derive(Debug, Clone, PartialEq)]
pub struct Completion<E> {
    /// The work's result, stored on the COMPLETED item and handed to
    /// [`RecordHandler::on_duplicate`] when a duplicate arrives (e.g. the
    /// reply a request-reply consumer sends). At most
    /// [`crate::store::MAX_RESULT_BYTES`] (64 KiB); a larger one fails the
    /// message permanently, since a cut reply would be a wrong reply.
    pub result: Option<String>,
    /// The work's effect as writes of the idempotency store (DynamoDB: Put,
    /// Update, Delete, ConditionCheck on any table), committed in ONE
    /// transaction with the completion: either both happen or neither. At
    /// most [`crate::store::Store::MAX_EFFECTS`] (DynamoDB: 99). Empty when
    /// the work performed its effects itself.
    pub writes: Vec<E>,
    /// The work's commutative effects ("add N to a number of an item",
    /// optionally with a floor such as `balance >= 0`), committed like
    /// `writes` on every backend. On the lock-free path the increments of
    /// consecutive messages on one item merge into one update, so a hot
    /// item's messages share transactions; a merged update that a floor
    /// refuses is split so that each message gets the outcome it would have
    /// had alone. Each counts as one write of `writes`' limit.
    pub increments: Vec<Increment>,
    /// What it means when a condition of `writes` fails, or a floor of
    /// `increments` refuses one.
    pub on_condition_failure: ConditionFailure,
    /// The messages the work emits ([`Completion::emit`]): kept on the
    /// COMPLETED item by the write that completes the key (in the
    /// transaction of `writes` and `increments`), so that they exist if and
    /// only if the effect applied; sent after the commit, each under an id
    /// the same on every attempt ([`crate::outbox`]). A record counts as
    /// finished only once its messages were accepted.
    pub messages: Vec<Message>,
}

impl<E> Default for Completion<E> {
    fn default() -> Self {
        Self {
            result: None,
            writes: Vec::new(),
            increments: Vec::new(),
            on_condition_failure: ConditionFailure::default(),
            messages: Vec::new(),
        }
    }
}

/// How the engine treats a failed condition of a handler's own writes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ConditionFailure {
    /// The message can never succeed (e.g. insufficient funds): FAILED.
    #[default]
    Permanent,
    /// The condition may hold later: release the key, redeliver.
    Retryable,
}

impl<E> Completion<E> {
    /// The work performed its effects itself.
    pub fn done(result: impl Into<String>) -> Self {
        Self {
            result: Some(result.into()),
            ..Self::default()
        }
    }

    /// The work's effect is `writes`, to commit with the completion.
    pub fn transactional(result: impl Into<String>, writes: Vec<E>) -> Self {
        Self {
            result: Some(result.into()),
            writes,
            ..Self::default()
        }
    }

    /// Also commits `increment` with the completion (see
    /// [`Completion::increments`]).
    pub fn increment(mut self, increment: Increment) -> Self {
        self.increments.push(increment);
        self
    }

    /// Also emits `body` to `destination` (an SQS queue URL), committed
    /// with the effect and sent after it (see [`Completion::messages`]).
    pub fn emit(self, destination: impl Into<String>, body: impl Into<String>) -> Self {
        self.emit_message(Message::new(destination, body))
    }

    /// Also emits `message` (one with an ordering group, for a FIFO queue:
    /// [`Message::in_group`]).
    pub fn emit_message(mut self, message: Message) -> Self {
        self.messages.push(message);
        self
    }

    /// The writes, increments and messages, as the store commits them.
    pub(super) fn effects(&self) -> Effects<E>
    where
        E: Clone,
    {
        Effects {
            writes: self.writes.clone(),
            increments: self.increments.clone(),
            outbox: outbox::encode(&self.messages),
        }
    }

    /// Whether the work's effect happened outside the store ("direct
    /// mode"): no write of the store's beside the completion.
    pub(super) fn is_direct(&self) -> bool {
        self.writes.is_empty() && self.increments.is_empty()
    }

    /// Whether its completion is the key's own write alone (nothing beside
    /// it, no message on it): what a batch of fenced writes carries.
    pub(super) fn is_bare(&self) -> bool {
        self.is_direct() && self.messages.is_empty()
    }

    /// Why this completion cannot be stored, if so: too large a result or
    /// outbox (permanent: retrying gives the same result), or a message
    /// `sender` cannot send (none configured, an unknown destination:
    /// retryable, so that the record comes again once the configuration is
    /// fixed, and nothing is committed that could never be sent).
    pub(super) fn refusal(&self, sender: Option<&dyn Sender>) -> Option<HandlerError> {
        let bytes = self.result.as_ref().map_or(0, String::len);
        if bytes > crate::store::MAX_RESULT_BYTES {
            return Some(HandlerError::Permanent(format!(
                "the handler's result is {bytes} bytes; at most {} are stored",
                crate::store::MAX_RESULT_BYTES
            )));
        }
        if self.messages.is_empty() {
            return None;
        }
        let Some(sender) = sender else {
            return Some(HandlerError::Retryable(
                "the handler emits messages but this function has no sender (on Lambda: build \
                 exactly-once with its `sqs` feature; else Engine::with_sender)"
                    .into(),
            ));
        };
        if let Some(err) = self.messages.iter().find_map(|m| sender.check(m).err()) {
            return Some(HandlerError::Retryable(err.to_string()));
        }
        let bytes = outbox::encode(&self.messages).map_or(0, |text| text.len());
        (bytes > outbox::MAX_OUTBOX_BYTES).then(|| {
            HandlerError::Permanent(format!(
                "the handler's messages are {bytes} bytes; at most {} are kept",
                outbox::MAX_OUTBOX_BYTES
            ))
        })
    }
}

/// How the engine commits a handler's work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitPath {
    /// Claim the key (a lock), run the work under a renewed lease, record
    /// the outcome with fenced writes: for work with effects outside
    /// DynamoDB. Two requests per new message.
    Locking,
    /// No claim, no lock: the work's whole effect is the DynamoDB writes it
    /// returns in [`Completion::writes`], computed WITHOUT side effects (the
    /// engine may compute them ahead, and drop them). They commit in ONE
    /// transaction with the COMPLETED item, which succeeds only if the key is
    /// new. One request per new message, or less: consecutive messages of a
    /// lane whose writes touch distinct items share a transaction.
    LockFree,
}

/// The business logic run once per idempotency key.
///
/// `Record` is what the edge hands over for each message (for MSK:
/// `exactly_once::lambda::KafkaRecord`, the whole record); the engine never looks
/// inside it. `E` is the effect type of the store the handler runs on
/// ([`crate::store::Store::Effect`]): a handler whose effects are its own
/// calls (no writes for the store to commit) implements the trait for every
/// `E`, and so runs on any backend; a transactional handler implements it
/// for its store's effect type.
///
/// One handler serves every record of every invocation of its container,
/// several at once (the lanes of a batch; and on Lambda Managed Instances,
/// several invocations): it is `Send + Sync`, and keeps no state of one
/// record or invocation in `self` (what a record needs comes with it and its
/// [`FencingToken`]); shared clients and caches belong there.
///
/// The facade crate `exactly-once` shows a whole handler (its `prelude`
/// module, and its `examples/`).
pub trait RecordHandler<E>: Send + Sync + 'static {
    /// One message as the edge delivers it.
    type Record: Send + Sync + 'static;

    /// How this handler's work is committed. Required, with no default, so
    /// that a wrapper around another handler must say (usually: forward the
    /// inner handler's answer) and can never switch paths silently. Answer
    /// [`CommitPath::LockFree`] only if `handle` performs no side effect and
    /// derives its writes from the record alone.
    fn commit_path(&self) -> CommitPath;

    /// Does the work for `record`, or returns it as writes to commit (see
    /// [`Completion`]).
    fn handle(
        &self,
        token: &FencingToken,
        record: &Self::Record,
    ) -> impl Future<Output = Result<Completion<E>, HandlerError>> + Send;

    /// Called instead of [`Self::handle`] for a verified duplicate (the key
    /// is COMPLETED for this payload), with the result stored by the first
    /// delivery: a request-reply consumer sends that reply again here. The
    /// work itself never runs again. An error reports the record, so that
    /// it comes again (and this is called again); nothing is stored.
    /// Default: nothing to do.
    fn on_duplicate(
        &self,
        record: &Self::Record,
        result: Option<&str>,
    ) -> impl Future<Output = Result<(), HandlerError>> + Send {
        let _ = (record, result);
        async { Ok(()) }
    }
}
