//! After a batch's lanes: the messages its finished records emitted (or
//! found still in their items' outboxes) are sent, in batches of what one
//! request to their destination carries, in batch order per destination,
//! none of a group after one of that group that failed. A record counts as
//! finished only once all of its messages were accepted; then its item's
//! outbox is cleared (fenced on its owner). One whose messages were not all
//! accepted is reported ([`Outcome::Unsent`]): its redelivery finds the
//! outbox and sends what is left, under the same ids.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use crate::clock::ms_to_s;
use crate::store::outbox::Pending;
use crate::store::{Listing, Operator, Store, StoreError};

use super::send::{Outgoing, SendError, Sender};
use super::{Deadline, Outcome, RecordOutcome};

/// Whether a record's messages are sent only after the write that completes
/// its key (always: the engine delivers them once the batch's lanes are
/// done, `engine/deliver.rs`), but under the model checker's mutation
/// `SendBeforeCommit`: the order that the model (`crates/model`) re-states,
/// sending them as the handler returns when it is off.
pub fn sent_after_commit() -> bool {
    !mutated!(SendBeforeCommit)
}

/// A message's answer, for its record.
type Answer = Result<(), SendError>;

/// A message in its destination's queue: its record (by index of the
/// pending records) and its place among that record's messages.
struct Queued {
    record: usize,
    place: usize,
    outgoing: Outgoing,
}

/// Sends what `outcomes` left to send through `sender`, cut at
/// `deadline`; turns the records whose messages were not all accepted into
/// [`Outcome::Unsent`], and clears the outboxes of the others in `store`.
pub(super) async fn deliver<S: Store, T>(
    store: &S,
    sender: Option<&dyn Sender>,
    outcomes: &mut [(T, RecordOutcome)],
    deadline: Deadline,
) {
    // Each item's messages once, however many of the batch's records found
    // them (copies of one record).
    let mut records: Vec<(usize, usize)> = Vec::new();
    let mut pending: Vec<Pending> = Vec::new();
    let mut by_pk: HashMap<String, usize> = HashMap::new();
    for (index, (_, recorded)) in outcomes.iter_mut().enumerate() {
        let (Outcome::Processed { unsent, .. } | Outcome::Duplicate { unsent, .. }) =
            &mut recorded.outcome
        else {
            continue;
        };
        let Some(unsent) = unsent.take() else {
            continue;
        };
        let at = *by_pk.entry(unsent.pk.clone()).or_insert_with(|| {
            pending.push(*unsent);
            pending.len() - 1
        });
        records.push((index, at));
    }
    if pending.is_empty() {
        return;
    }
    let answers = match sender {
        Some(sender) => tokio::select! {
            answers = send_all(sender, &pending) => answers,
            () = deadline.cut() => failed(&pending, "the invocation's deadline came near before they were accepted"),
        },
        None => failed(&pending, "this engine has no sender (Engine::with_sender)"),
    };
    let mut sent = Vec::new();
    let mut unsent: HashMap<usize, String> = HashMap::new();
    for (at, (record, answers)) in pending.into_iter().zip(answers).enumerate() {
        match answers.into_iter().find_map(Result::err) {
            None => sent.push(record),
            Some(err) => {
                unsent.insert(at, err.to_string());
            }
        }
    }
    if let Some(error) = unsent.values().next() {
        // Each record's line (the edge's) names it and says why.
        tracing::warn!(records = unsent.len(), error = %error, "emitted messages not all accepted: their records are reported, and their redeliveries send them under the same ids");
    }
    for (index, at) in records {
        if let Some(error) = unsent.get(&at) {
            outcomes[index].1.outcome = Outcome::Unsent {
                error: error.clone(),
            };
        }
    }
    if sent.is_empty() {
        return;
    }
    // Accepted: the records are finished. An outbox left (the store failed
    // here) is sent again by a redelivery or the sweeper, under the same
    // ids, which the destination's consumers drop.
    if let Err(err) = store.outbox_sent(&sent).await {
        tracing::warn!(error = %err, records = sent.len(), "sent messages' outboxes not cleared: they are sent again later, under the same ids");
    }
}

/// What the sweeper found and did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Swept {
    /// COMPLETED keys of this function whose messages were left unsent,
    /// completed before the cutoff.
    pub found: usize,
    /// Those whose messages were all accepted now.
    pub sent: usize,
    /// How long ago the oldest of those still unsent completed, seconds (0:
    /// none left): what the alarm watches.
    pub oldest_left_age_s: u64,
}

/// The sweeper (the scheduled check's, `exactly-once-ops unsent --send`):
/// the messages of this function's COMPLETED items completed
/// more than `older_than` ago and still unsent (their record never came
/// back: past its retries, or its source gone), sent through `sender`, the
/// outboxes of those accepted cleared.
pub async fn send_unsent<S: Operator>(
    store: &S,
    sender: Option<&dyn Sender>,
    older_than: Duration,
) -> Result<Swept, StoreError> {
    let mut listed = store.list(Listing::Unsent { older_than }).await?;
    let config = store.config();
    listed
        .items
        .retain(|item| config.owns(item.scope.as_deref()));
    let (pending, completed_at): (Vec<Pending>, Vec<Option<u64>>) = listed
        .items
        .iter()
        .filter_map(|item| Some((Pending::of_item(item)?, item.updated_at_ms)))
        .unzip();
    let answers = match sender {
        Some(sender) => send_all(sender, &pending).await,
        None => failed(&pending, "this function has no sender"),
    };
    let mut sent = Vec::new();
    let (mut oldest_left, mut left, mut why) = (None::<u64>, 0, None);
    for ((record, answers), at) in pending.into_iter().zip(answers).zip(completed_at) {
        match answers.into_iter().find_map(Result::err) {
            None => sent.push(record),
            Some(err) => {
                let at = at.unwrap_or(0);
                oldest_left = Some(oldest_left.map_or(at, |oldest| oldest.min(at)));
                left += 1;
                why.get_or_insert(err);
            }
        }
    }
    if let Some(err) = why {
        tracing::warn!(records = left, error = %err, "messages left unsent: their destination still refuses them");
    }
    store.outbox_sent(&sent).await?;
    let now = store.now_ms();
    Ok(Swept {
        found: listed.items.len(),
        sent: sent.len(),
        oldest_left_age_s: oldest_left.map_or(0, |at| ms_to_s(now.saturating_sub(at))),
    })
}

/// Every message of `pending` failed for `why`.
fn failed(pending: &[Pending], why: &str) -> Vec<Vec<Answer>> {
    let err = || Err(SendError::NoAnswer(why.to_owned()));
    pending
        .iter()
        .map(|record| record.messages.iter().map(|_| err()).collect())
        .collect()
}

/// Requests in flight to one destination at once: its messages go in this
/// many queues, each sent in order, a group's messages all in one.
const QUEUES_PER_DESTINATION: u64 = 8;

/// The queue of a destination `outgoing` goes in: its group's (by a hash of
/// it), or, without a group, the next in turn (`nth` of the destination's
/// messages).
fn queue_of(outgoing: &Outgoing, nth: usize) -> u64 {
    match &outgoing.group {
        Some(group) => {
            use std::hash::{Hash, Hasher};
            let mut hasher = std::collections::hash_map::DefaultHasher::new();
            group.hash(&mut hasher);
            hasher.finish() % QUEUES_PER_DESTINATION
        }
        None => nth as u64 % QUEUES_PER_DESTINATION,
    }
}

/// Sends every message of `pending`: each destination's in
/// [`QUEUES_PER_DESTINATION`] queues, each in order (a group's messages in
/// one), all at once: each message's answer, by record.
async fn send_all(sender: &dyn Sender, pending: &[Pending]) -> Vec<Vec<Answer>> {
    let mut queues: Vec<((&str, u64), Vec<Queued>)> = Vec::new();
    let mut per_destination: HashMap<&str, usize> = HashMap::new();
    for (at, record) in pending.iter().enumerate() {
        for (place, (message, outgoing)) in record.outgoing().enumerate() {
            let destination = message.destination.as_str();
            let nth = per_destination.entry(destination).or_default();
            let name = (destination, queue_of(&outgoing, *nth));
            *nth += 1;
            let queue = match queues.iter().position(|(n, _)| *n == name) {
                Some(queue) => queue,
                None => {
                    queues.push((name, Vec::new()));
                    queues.len() - 1
                }
            };
            queues[queue].1.push(Queued {
                record: at,
                place,
                outgoing,
            });
        }
    }
    let sent = futures_util::future::join_all(
        queues
            .iter()
            .map(|((destination, _), queue)| send_in_order(sender, destination, queue)),
    )
    .await;
    let mut answers: Vec<Vec<Option<Answer>>> = pending
        .iter()
        .map(|record| vec![None; record.messages.len()])
        .collect();
    for (queued, answer) in sent.into_iter().flatten() {
        answers[queued.record][queued.place] = Some(answer);
    }
    let missing = || Err(SendError::NoAnswer("the message was not sent".into()));
    answers
        .into_iter()
        .map(|record| {
            record
                .into_iter()
                .map(|a| a.unwrap_or_else(missing))
                .collect()
        })
        .collect()
}

/// Sends one destination's `queue` in order, in requests of its batch
/// limit; a message of a group that already failed is not sent (its order
/// kept for the next attempt).
async fn send_in_order<'a>(
    sender: &dyn Sender,
    destination: &str,
    queue: &'a [Queued],
) -> Vec<(&'a Queued, Answer)> {
    let limit = sender.batch_limit(destination).max(1);
    let mut failed_groups: HashSet<&str> = HashSet::new();
    let mut answers = Vec::with_capacity(queue.len());
    let mut rest = queue.iter().peekable();
    while rest.peek().is_some() {
        let mut chunk = Vec::with_capacity(limit);
        while chunk.len() < limit
            && let Some(entry) = rest.next()
        {
            match entry.outgoing.group.as_deref() {
                Some(group) if failed_groups.contains(group) => answers.push((
                    entry,
                    Err(SendError::NoAnswer(
                        "an earlier message of its group was not accepted".into(),
                    )),
                )),
                _ => chunk.push(entry),
            }
        }
        if chunk.is_empty() {
            continue;
        }
        let messages: Vec<Outgoing> = chunk.iter().map(|q| q.outgoing.clone()).collect();
        let replies = sender.send(destination, &messages).await;
        let mut replies = replies.into_iter();
        for queued in chunk {
            let reply = replies.next().unwrap_or_else(|| {
                Err(SendError::NoAnswer(
                    "the destination answered fewer messages than it was sent".into(),
                ))
            });
            if reply.is_err()
                && let Some(group) = queued.outgoing.group.as_deref()
            {
                failed_groups.insert(group);
            }
            answers.push((queued, reply));
        }
    }
    answers
}
