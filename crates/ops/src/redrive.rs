//! `redrive`: feeds the records an on-failure destination kept back through
//! the function, one invocation record at a time, in the order they failed.
//! The idempotency store makes it safe to repeat: a record already finished
//! is a duplicate, and nothing is applied twice.
//!
//! Sources:
//! - `s3://BUCKET[/PREFIX]`: the mapping's S3 destination, one object per
//!   failed invocation; its `payload` (a JSON string) is the whole event.
//! - a file or a directory of files: invocation records as JSON, one per
//!   file or one per line (the mapping's Kafka-topic destination, saved with
//!   `kafka-console-consumer`; its `payload` is the event as an object).
//!
//! An invocation record without a payload (the batch was too large for the
//! destination, or it came from SQS/SNS, which keep only metadata) cannot be
//! redriven: it is listed with its offsets, to be read again from Kafka.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use aws_config::timeout::TimeoutConfig;
use aws_sdk_lambda::primitives::Blob;
use serde_json::Value;

use super::{EXIT_ERROR, EXIT_REFUSED, EXIT_USAGE, emit};
use exactly_once::aws;
use exactly_once::redact::json_error;

/// Where the invocation records are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `s3://BUCKET[/PREFIX]`.
    S3 {
        /// The bucket.
        bucket: String,
        /// Objects whose key starts with this.
        prefix: String,
    },
    /// A file, or every file of a directory (sorted by name).
    Files(PathBuf),
}

impl Source {
    /// `s3://BUCKET[/PREFIX]`, or a local path.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.strip_prefix("s3://") {
            Some(rest) => {
                let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
                if bucket.is_empty() {
                    return Err(format!("{text:?} names no bucket (s3://BUCKET/PREFIX)"));
                }
                Ok(Self::S3 {
                    bucket: bucket.to_owned(),
                    prefix: prefix.to_owned(),
                })
            }
            None => Ok(Self::Files(PathBuf::from(text))),
        }
    }
}

/// One invocation record read from the source.
struct Failure {
    /// Where it was read (`s3://b/k`, `file:line`).
    origin: String,
    /// The S3 object to delete once it is redriven (`--delete`).
    object: Option<(String, String)>,
    /// The invocation record itself.
    record: Value,
}

/// What an invocation record holds for a redrive.
#[derive(Debug, PartialEq)]
pub enum Kept {
    /// The event to send again, and its number of records.
    Event(Value, usize),
    /// No payload: why, and the records' offsets to read again from Kafka.
    Metadata(String),
}

/// Reads an invocation record as the mapping writes it: `payload` is the
/// event (as a JSON string in S3, as an object in a Kafka topic).
pub fn kept(record: &Value) -> Result<Kept, String> {
    let event = match record.get("payload") {
        Some(Value::String(text)) => serde_json::from_str(text)
            .map_err(|err| format!("payload is not JSON: {}", json_error(&err)))?,
        Some(event @ Value::Object(_)) => event.clone(),
        None | Some(Value::Null) => {
            let condition = record
                .pointer("/requestContext/condition")
                .and_then(Value::as_str)
                .unwrap_or("unknown");
            let batch = record
                .get("KafkaBatchInfo")
                .map(|info| {
                    let mut info = info.clone();
                    // Only where the records are, not the brokers.
                    if let Some(map) = info.as_object_mut() {
                        map.retain(|k, _| k == "recordsInfo" || k == "recordInfo");
                    }
                    info.to_string()
                })
                .unwrap_or_else(|| "no KafkaBatchInfo".to_owned());
            return Ok(Kept::Metadata(format!(
                "no payload kept (condition {condition}); read these records again from Kafka: {batch}"
            )));
        }
        Some(_) => return Err("payload is neither a JSON string nor an object".into()),
    };
    let records = event
        .get("records")
        .and_then(Value::as_object)
        .ok_or("payload is not a Kafka event (no records)")?
        .values()
        .map(|list| list.as_array().map_or(0, Vec::len))
        .sum();
    Ok(Kept::Event(event, records))
}

/// Redrives every invocation record of `source` through `function`, one
/// at a time (an S3 object is read just before it is sent). Exit code 0:
/// every record finished; 1: some were reported again, failed, or had no
/// payload; 2: a bad source; 3: S3 or Lambda failed.
pub async fn redrive(source: Source, function: &str, delete: bool) -> ExitCode {
    let sdk = aws::sdk_config().await;
    let redrive = Redrive {
        s3: aws_sdk_s3::Client::from_conf(
            aws_sdk_s3::config::Builder::from(&sdk)
                .timeout_config(timeouts(60))
                // S3-compatible endpoints (moto, MinIO, LocalStack) want paths.
                .force_path_style(custom_endpoint("S3"))
                .build(),
        ),
        // An invocation may run up to the function's timeout (15 min).
        lambda: aws_sdk_lambda::Client::from_conf(
            aws_sdk_lambda::config::Builder::from(&sdk)
                .timeout_config(timeouts(905))
                .build(),
        ),
        function,
        delete,
    };
    let pending = match &source {
        Source::S3 { bucket, prefix } => redrive.s3_objects(bucket, prefix).await,
        Source::Files(path) => read_files(path).map_err(|message| (EXIT_USAGE, message)),
    };
    let pending = match pending {
        Ok(pending) => pending,
        Err((code, message)) => {
            eprintln!("error: {message}");
            return ExitCode::from(code);
        }
    };
    let mut totals = Totals::default();
    for item in pending {
        let line = match redrive.one(item, &mut totals).await {
            Ok(line) => line,
            Err(message) => {
                eprintln!("error: {message}");
                return ExitCode::from(EXIT_ERROR);
            }
        };
        if !emit(&format!("{line}\n")) {
            return ExitCode::from(EXIT_ERROR);
        }
    }
    emit(&format!(
        "{} invocation record(s), {} record(s) redriven through {function}; {} reported again, {} failed invocation(s), {} without a payload\n",
        totals.read, totals.records, totals.reported, totals.unfinished, totals.unusable
    ));
    match totals.reported + totals.unfinished + totals.unusable {
        0 => ExitCode::SUCCESS,
        _ => ExitCode::from(EXIT_REFUSED),
    }
}

/// An invocation record to redrive: read already, or an S3 object.
enum Pending {
    Read(Failure),
    Object { bucket: String, key: String },
}

struct Redrive<'a> {
    s3: aws_sdk_s3::Client,
    lambda: aws_sdk_lambda::Client,
    function: &'a str,
    delete: bool,
}

impl Redrive<'_> {
    /// Redrives one invocation record: its line of output, or why S3 or
    /// Lambda failed (the redrive stops there).
    async fn one(&self, item: Pending, totals: &mut Totals) -> Result<String, String> {
        let failure = match item {
            Pending::Read(failure) => failure,
            Pending::Object { bucket, key } => self.s3_object(bucket, key).await?,
        };
        totals.read += 1;
        let origin = &failure.origin;
        let (event, records) = match kept(&failure.record) {
            Err(reason) => {
                totals.unusable += 1;
                return Ok(format!("{origin}: not an invocation record: {reason}"));
            }
            Ok(Kept::Metadata(reason)) => {
                totals.unusable += 1;
                return Ok(format!("{origin}: {reason}"));
            }
            Ok(Kept::Event(event, records)) => (event, records),
        };
        let answer = invoke(&self.lambda, self.function, &event)
            .await
            .map_err(|message| format!("{origin}: {message}"))?;
        Ok(match answer {
            Answer::Finished => {
                totals.records += records;
                let deleted = match (self.delete, &failure.object) {
                    (true, Some((bucket, key))) => {
                        self.s3
                            .delete_object()
                            .bucket(bucket)
                            .key(key)
                            .send()
                            .await
                            .map_err(|err| {
                                format!("deleting {origin}: {}", err.into_service_error())
                            })?;
                        "; deleted"
                    }
                    _ => "",
                };
                format!("{origin}: {records} record(s), all finished{deleted}")
            }
            Answer::Reported(reported) => {
                totals.records += records;
                totals.reported += reported.len();
                let reported = reported.join(", ");
                format!("{origin}: {records} record(s); reported again: {reported}: kept")
            }
            Answer::FunctionError(error) => {
                totals.unfinished += 1;
                format!("{origin}: {records} record(s); the function failed: {error}: kept")
            }
        })
    }

    /// The objects under `prefix`, in key order: object keys carry the
    /// failure's time, so their order is the failures'.
    async fn s3_objects(&self, bucket: &str, prefix: &str) -> Result<Vec<Pending>, (u8, String)> {
        let mut keys = Vec::new();
        let mut pages = self
            .s3
            .list_objects_v2()
            .bucket(bucket)
            .prefix(prefix)
            .into_paginator()
            .send();
        while let Some(page) = pages.next().await {
            let page = page.map_err(|err| {
                let err = err.into_service_error();
                (EXIT_ERROR, format!("listing s3://{bucket}/{prefix}: {err}"))
            })?;
            keys.extend(
                page.contents()
                    .iter()
                    .filter_map(|o| o.key().map(str::to_owned)),
            );
        }
        keys.sort();
        Ok(keys
            .into_iter()
            .map(|key| Pending::Object {
                bucket: bucket.to_owned(),
                key,
            })
            .collect())
    }

    async fn s3_object(&self, bucket: String, key: String) -> Result<Failure, String> {
        let origin = format!("s3://{bucket}/{key}");
        let object = self
            .s3
            .get_object()
            .bucket(&bucket)
            .key(&key)
            .send()
            .await
            .map_err(|err| format!("reading {origin}: {}", err.into_service_error()))?;
        let bytes = object
            .body
            .collect()
            .await
            .map_err(|err| format!("reading {origin}: {err}"))?
            .into_bytes();
        Ok(Failure {
            origin,
            object: Some((bucket, key)),
            record: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        })
    }
}

#[derive(Default)]
struct Totals {
    read: usize,
    records: usize,
    reported: usize,
    unfinished: usize,
    unusable: usize,
}

/// Timeouts for S3 and Lambda calls that may take long (large objects,
/// whole invocations). Every one is set: unset ones would be the
/// function's short defaults (`dynamo::sdk_config`).
fn timeouts(attempt_secs: u64) -> TimeoutConfig {
    TimeoutConfig::builder()
        .connect_timeout(Duration::from_secs(5))
        .operation_attempt_timeout(Duration::from_secs(attempt_secs))
        .operation_timeout(Duration::from_secs(3 * attempt_secs + 10))
        .build()
}

/// Whether `AWS_ENDPOINT_URL_<SERVICE>` or `AWS_ENDPOINT_URL` points the
/// SDK elsewhere than AWS.
fn custom_endpoint(service: &str) -> bool {
    [
        format!("AWS_ENDPOINT_URL_{service}"),
        "AWS_ENDPOINT_URL".to_owned(),
    ]
    .iter()
    .any(|name| std::env::var(name).is_ok_and(|v| !v.is_empty()))
}

fn read_files(path: &Path) -> Result<Vec<Pending>, String> {
    let mut files = match path.is_dir() {
        true => std::fs::read_dir(path)
            .map_err(|err| format!("{}: {err}", path.display()))?
            .filter_map(|entry| entry.ok().map(|e| e.path()))
            .filter(|p| p.is_file())
            .collect(),
        false => vec![path.to_owned()],
    };
    files.sort();
    let mut failures = Vec::new();
    for file in files {
        let text =
            std::fs::read_to_string(&file).map_err(|err| format!("{}: {err}", file.display()))?;
        // One JSON document, or one per line.
        match serde_json::from_str::<Value>(&text) {
            Ok(record) => failures.push(Pending::Read(Failure {
                origin: file.display().to_string(),
                object: None,
                record,
            })),
            Err(_) => failures.extend(
                text.lines()
                    .enumerate()
                    .filter(|(_, line)| !line.trim().is_empty())
                    .map(|(n, line)| {
                        Pending::Read(Failure {
                            origin: format!("{}:{}", file.display(), n + 1),
                            object: None,
                            record: serde_json::from_str(line).unwrap_or(Value::Null),
                        })
                    }),
            ),
        }
    }
    Ok(failures)
}

/// What the function answered.
enum Answer {
    /// Every record finished (an empty `batchItemFailures`).
    Finished,
    /// These records (`partition@offset`) were reported again.
    Reported(Vec<String>),
    /// An invocation error (the function's own answer, e.g. the store down).
    FunctionError(String),
}

async fn invoke(
    lambda: &aws_sdk_lambda::Client,
    function: &str,
    event: &Value,
) -> Result<Answer, String> {
    let payload = serde_json::to_vec(event).map_err(|err| err.to_string())?;
    let output = lambda
        .invoke()
        .function_name(function)
        .payload(Blob::new(payload))
        .send()
        .await
        .map_err(|err| format!("invoking {function}: {}", err.into_service_error()))?;
    let answer: Value = output
        .payload()
        .and_then(|blob| serde_json::from_slice(blob.as_ref()).ok())
        .unwrap_or(Value::Null);
    if let Some(kind) = output.function_error() {
        let message = answer
            .get("errorMessage")
            .and_then(Value::as_str)
            .unwrap_or("no message");
        return Ok(Answer::FunctionError(format!("{kind}: {message}")));
    }
    let failures = answer
        .get("batchItemFailures")
        .and_then(Value::as_array)
        .ok_or_else(|| {
            format!("{function} did not answer with a partial batch response: {answer}")
        })?;
    let reported: Vec<String> = failures
        .iter()
        .map(|f| {
            let id = &f["itemIdentifier"];
            format!(
                "{}@{}",
                id["partition"].as_str().unwrap_or("?"),
                id["offset"]
            )
        })
        .collect();
    Ok(match reported.is_empty() {
        true => Answer::Finished,
        false => Answer::Reported(reported),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sources_are_s3_locations_or_paths() {
        assert_eq!(
            Source::parse("s3://failed/aws/lambda/"),
            Ok(Source::S3 {
                bucket: "failed".into(),
                prefix: "aws/lambda/".into()
            })
        );
        assert_eq!(
            Source::parse("s3://failed"),
            Ok(Source::S3 {
                bucket: "failed".into(),
                prefix: String::new()
            })
        );
        assert!(Source::parse("s3:///prefix").is_err());
        assert_eq!(
            Source::parse("dump.jsonl"),
            Ok(Source::Files("dump.jsonl".into()))
        );
    }

    #[test]
    fn the_payload_is_read_as_s3_and_kafka_destinations_write_it() {
        let event = json!({"eventSource": "aws:kafka", "records": {"p-0": [{}, {}], "p-1": [{}]}});
        let s3 = json!({"payload": event.to_string()});
        assert_eq!(kept(&s3), Ok(Kept::Event(event.clone(), 3)));
        let topic = json!({"payload": event});
        assert_eq!(kept(&topic), Ok(Kept::Event(event.clone(), 3)));
        let too_large = json!({
            "requestContext": {"condition": "MaximumPayloadSizeExceeded"},
            "KafkaBatchInfo": {"bootstrapServers": "b-1:9092", "recordsInfo": {"p-0": {"firstRecordOffset": "7"}}},
            "payload": null
        });
        assert_eq!(
            kept(&too_large),
            Ok(Kept::Metadata(
                "no payload kept (condition MaximumPayloadSizeExceeded); read these records again from Kafka: {\"recordsInfo\":{\"p-0\":{\"firstRecordOffset\":\"7\"}}}".into()
            ))
        );
        let secret = json!({"payload": "{\"card\": \"4111"});
        let error = kept(&secret).expect_err("not JSON");
        assert!(!error.contains("4111"), "{error}");
        assert!(kept(&json!({"payload": {"no": "records"}})).is_err());
    }
}
