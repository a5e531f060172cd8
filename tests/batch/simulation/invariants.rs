//! The invariants checked against DynamoDB Local after a schedule drained:
//!
//! - every produced record is finished (its key COMPLETED with its payload
//!   hash), parked (`POISON_POLICY=park`: its key FAILED with its payload
//!   hash, the durable record of it; or a refused record sent whole to the
//!   dead-letter queue) or in the on-failure destination: never silently
//!   dropped; only records that can never succeed are sent to the queue;
//! - each account's balance and payment count equal the unique payments
//!   whose keys are COMPLETED (transactional mode: exactly). Direct mode
//!   counts the repeats and allows them only from the documented window: a
//!   payment applied again must have been taken over (a crash, a kill at the
//!   deadline, a lost lease: each version runs the work at most once), or its
//!   ledger write was applied and its answer lost, so the SDK sent it again.

use std::collections::{BTreeSet, HashMap};

use aws_sdk_dynamodb::Client;
use exactly_once::dynamodb::DynamoDbStore;
use exactly_once::engine::PoisonPolicy;
use exactly_once::store::Status;
use exactly_once::store::Store;
use exactly_once::store::StoredItem;
use exactly_once::store::payload_hash;
use ledger::{LedgerMode, Payment};

use super::mapping::At;
use super::schedule::Schedule;
use super::writes::WriteLog;
use crate::support::msk::ledger_entry_with;

/// What the checks found.
#[derive(Debug, Default)]
pub struct Findings {
    pub records: u64,
    pub completed: u64,
    pub parked: u64,
    pub dead_lettered: u64,
    /// Records produced bad: without a key, not a payment, or a key reused
    /// with another payload (the one whose payload the key did not keep).
    pub produced_bad: u64,
    /// Payments applied more than once (direct mode only).
    pub repeats: u64,
    pub violations: Vec<String>,
}

/// The final items of every key of the schedule, by `pk`.
pub async fn final_items(
    schedule: &Schedule,
    store: &DynamoDbStore,
) -> HashMap<String, StoredItem> {
    let keys: BTreeSet<&str> = schedule
        .partitions
        .iter()
        .flatten()
        .filter_map(|record| record.key.as_deref())
        .collect();
    let mut items = HashMap::new();
    for key in keys {
        let item = store.get(key).await.expect("read DynamoDB Local");
        if let Some(item) = item {
            items.insert(item.pk.clone(), item);
        }
    }
    items
}

/// `store` and `client` read without faults.
pub async fn check(
    schedule: &Schedule,
    store: &DynamoDbStore,
    client: &Client,
    items: &HashMap<String, StoredItem>,
    destination: &BTreeSet<At>,
    queued: &BTreeSet<At>,
    log: &WriteLog,
) -> Findings {
    let mut findings = Findings::default();
    let item_of = |key: &str| items.get(&store.pk(key).expect("a valid key"));
    for (partition, log) in schedule.partitions.iter().enumerate() {
        for (offset, record) in log.iter().enumerate() {
            findings.records += 1;
            let at = format!("{}@{offset}", Schedule::partition_name(partition));
            let hash = payload_hash(&record.value);
            let item = record.key.as_deref().and_then(item_of);
            let kept = item.is_some_and(|item| item.payload_hash == hash);
            let bad = record.key.is_none() || Payment::parse(&record.value).is_err() || !kept;
            findings.produced_bad += u64::from(bad);
            if !bad && queued.contains(&(partition, offset)) {
                findings.violations.push(format!(
                    "{at}: a good record was sent to the dead-letter queue"
                ));
            }
            let status = item.filter(|_| kept).map(|item| item.status);
            if status == Some(Status::Completed) {
                findings.completed += 1;
            } else if status == Some(Status::Failed) && schedule.poison == PoisonPolicy::Park {
                findings.parked += 1;
            } else if queued.contains(&(partition, offset)) {
                // A refused record, sent whole to the dead-letter queue.
                findings.parked += 1;
            } else if destination.contains(&(partition, offset)) {
                findings.dead_lettered += 1;
            } else {
                findings.violations.push(format!(
                    "{at} (key {:?}) was dropped: neither finished nor in the destination; its item: {:?}",
                    record.key,
                    item.map(|item| (item.status, item.version))
                ));
            }
        }
    }
    check_ledger(schedule, items, log, client, &mut findings).await;
    findings
}

async fn check_ledger(
    schedule: &Schedule,
    items: &HashMap<String, StoredItem>,
    log: &WriteLog,
    client: &Client,
    findings: &mut Findings,
) {
    let payments: HashMap<String, Payment> = schedule
        .partitions
        .iter()
        .flatten()
        .filter_map(|record| {
            let payment = Payment::parse(&record.value).ok()?;
            Some((payload_hash(&record.value), payment))
        })
        .collect();
    for account in &schedule.accounts {
        // Per account: the completed payments, and how many more times the
        // work may have run (once per version not completed).
        let (mut balance, mut count, mut extra_runs) = (0i64, 0i64, 0u64);
        for item in items.values() {
            let Some(payment) = payments.get(&item.payload_hash) else {
                continue;
            };
            if &payment.account_id != account {
                continue;
            }
            match item.status {
                Status::Completed => {
                    balance += payment.amount_cents;
                    count += 1;
                    extra_runs += item.version - 1;
                }
                Status::Started => extra_runs += item.version,
                Status::Failed => {}
            }
        }
        let lost_answers = log.lost_ledger_answers(account);
        let (stored_balance, stored_count) = ledger_entry_with(client, account).await;
        let exact = stored_balance == balance && stored_count == count;
        let repeats = stored_count - count;
        let violation = if exactly_once(schedule.ledger_mode) {
            (!exact).then(|| {
                format!(
                    "{account}: balance {stored_balance} in {stored_count} payments, \
                     the completed payments make {balance} in {count}"
                )
            })
        } else if repeats < 0 || stored_balance < balance {
            Some(format!(
                "{account}: balance {stored_balance} in {stored_count} payments, \
                 less than the completed {balance} in {count}: a payment lost"
            ))
        } else if repeats as u64 > extra_runs + lost_answers {
            Some(format!(
                "{account}: {repeats} repeated payments, more than the window allows \
                 ({extra_runs} runs by versions taken over, {lost_answers} ledger answers lost)"
            ))
        } else if repeats == 0 && !exact {
            Some(format!(
                "{account}: balance {stored_balance}, the completed payments make {balance}"
            ))
        } else {
            None
        };
        match violation {
            Some(violation) => findings.violations.push(violation),
            None => findings.repeats += repeats.max(0) as u64,
        }
    }
}

/// Whether `mode` promises each payment applied exactly once (checked
/// exactly), or at least once with the documented window (repeats counted).
/// Every mode must be classified here.
fn exactly_once(mode: LedgerMode) -> bool {
    match mode {
        LedgerMode::LockFree | LedgerMode::Transactional => true,
        LedgerMode::Direct => false,
    }
}
