//! `ORDERING_MODE`: how the records of one ordering unit split into lanes,
//! the engine running each lane in order and the lanes side by side.

use std::collections::HashMap;

use crate::sources::Decoded;

/// How records of one ordering unit (a Kafka partition, an SQS FIFO
/// message group, a shard) may run relative to each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderingMode {
    /// Strict order within the unit, one record at a time (the default).
    Partition,
    /// Records with the same key ([`Record::key`](crate::Record::key): Kafka's record key,
    /// Kinesis's partition key, DynamoDB Streams' item keys) in order;
    /// different keys concurrently (records without a key form one group).
    Key,
    /// Every record on its own.
    Unordered,
}

impl OrderingMode {
    /// Parses `ORDERING_MODE`: `partition`, `key` or `none`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text {
            "partition" => Ok(Self::Partition),
            "key" => Ok(Self::Key),
            "none" => Ok(Self::Unordered),
            other => Err(format!(
                "unknown ordering mode {other:?}; expected partition, key or none"
            )),
        }
    }
    /// Splits an ordering unit's records (in order) into lanes that keep
    /// this order.
    pub(crate) fn lanes(self, records: Vec<Decoded>) -> Vec<Vec<Decoded>> {
        match self {
            Self::Partition => vec![records],
            Self::Unordered => records.into_iter().map(|record| vec![record]).collect(),
            Self::Key => {
                let mut lanes: Vec<Vec<Decoded>> = Vec::new();
                let mut lane_of: HashMap<Option<Vec<u8>>, usize> = HashMap::new();
                for record in records {
                    // An undecodable record has no key: it joins the keyless lane.
                    let key = record
                        .1
                        .as_ref()
                        .ok()
                        .and_then(|r| Some(r.key()?.into_owned()));
                    let lane = *lane_of.entry(key).or_insert_with(|| {
                        lanes.push(Vec::new());
                        lanes.len() - 1
                    });
                    lanes[lane].push(record);
                }
                lanes
            }
        }
    }
}
