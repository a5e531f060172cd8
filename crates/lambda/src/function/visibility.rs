//! An SQS source queue's visibility timeout against the function's timeout
//! (feature `sqs`): read once per container, on its first SQS invocation
//! with a deadline, from the queue the event names (`eventSourceARN`, with
//! `sqs:GetQueueAttributes`, which Lambda's SQS mapping needs of the
//! function's role anyway), beside the batch, never before it; warned
//! about once. The deploy-time guards
//! see only a queue in the stack; this sees any.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use aws_sdk_sqs::Client;
use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::QueueAttributeName;
use serde_json::Value;

use exactly_once_core::clock;

use super::TARGET;

/// Reads the visibility timeout of the queue a container's first SQS
/// invocation names.
pub(super) struct VisibilityCheck {
    client: Client,
    checked: AtomicBool,
}

impl VisibilityCheck {
    pub(super) fn new(client: Client) -> Self {
        Self {
            client,
            checked: AtomicBool::new(false),
        }
    }

    /// On the container's first SQS event (`payload`) with a deadline
    /// (`deadline_ms`, epoch ms): reads its queue's visibility timeout in
    /// a task of its own and warns if it is short of the function's
    /// timeout; a queue that cannot be read is said so, once.
    pub(super) fn check(&self, payload: &Value, deadline_ms: u64) {
        // Every later invocation stops here: the queue is read once.
        if self.checked.load(Ordering::Relaxed) {
            return;
        }
        let now = clock::now_ms();
        let arn = payload["Records"][0]["eventSourceARN"].as_str();
        let Some((url, queue)) = arn.and_then(queue_url) else {
            return;
        };
        if deadline_ms <= now || self.checked.swap(true, Ordering::Relaxed) {
            return;
        }
        let has = Duration::from_millis(deadline_ms - now);
        let read = self
            .client
            .get_queue_attributes()
            .queue_url(url)
            .attribute_names(QueueAttributeName::VisibilityTimeout)
            .send();
        tokio::spawn(async move {
            let visibility = match read.await {
                Ok(read) => read
                    .attributes()
                    .and_then(|attributes| attributes.get(&QueueAttributeName::VisibilityTimeout))
                    .and_then(|seconds| seconds.parse::<u64>().ok()),
                Err(err) => {
                    tracing::info!(
                        target: TARGET,
                        queue,
                        error = %DisplayErrorContext(&err),
                        "the SQS queue's VisibilityTimeout could not be read \
                         (sqs:GetQueueAttributes): not checked against the function's timeout"
                    );
                    return;
                }
            };
            let Some(seconds) = visibility else {
                return;
            };
            if let Some(why) = short_visibility(&queue, Duration::from_secs(seconds), has) {
                tracing::warn!(target: TARGET, has_ms = has.as_millis() as u64, "{why}");
            }
        });
    }
}

/// What an SQS source queue named `queue` whose visibility timeout is
/// `visibility` does to a function whose invocations have `has` (its
/// timeout, to the second above), or nothing: AWS asks for at least six
/// times the function's timeout (plus the batching window, which the
/// function cannot see), so that a message is not visible again while an
/// invocation (or its retries of a throttled batch) still works on it.
fn short_visibility(queue: &str, visibility: Duration, has: Duration) -> Option<String> {
    let timeout_s = has.as_secs_f64().ceil() as u64;
    let (visibility_s, wanted_s) = (visibility.as_secs(), 6 * timeout_s);
    (visibility_s < wanted_s).then(|| {
        format!(
            "the SQS queue {queue} has VisibilityTimeout={visibility_s} s, under 6 times the \
             function's timeout ({timeout_s} s): a message still being worked on becomes visible \
             again and is received again, each receive counting towards the redrive policy's \
             maxReceiveCount (applied messages end in its dead-letter queue); set the queue's \
             VisibilityTimeout to at least {wanted_s} s plus the mapping's batching window"
        )
    })
}

/// The URL and name of the queue of an SQS queue ARN
/// (`arn:PARTITION:sqs:REGION:ACCOUNT:NAME`); `None` for anything else.
fn queue_url(arn: &str) -> Option<(String, String)> {
    let parts: Vec<&str> = arn.splitn(6, ':').collect();
    let ["arn", partition, "sqs", region, account, name] = parts[..] else {
        return None;
    };
    if [region, account, name].iter().any(|part| part.is_empty()) {
        return None;
    }
    let domain = match partition {
        "aws-cn" => "amazonaws.com.cn",
        _ => "amazonaws.com",
    };
    let url = format!("https://sqs.{region}.{domain}/{account}/{name}");
    Some((url, name.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_visible_again_before_six_timeouts_is_named_with_the_fix() {
        assert_eq!(
            short_visibility(
                "payments",
                Duration::from_secs(30),
                Duration::from_millis(29_950)
            )
            .as_deref(),
            Some(
                "the SQS queue payments has VisibilityTimeout=30 s, under 6 times the function's \
                 timeout (30 s): a message still being worked on becomes visible again and is \
                 received again, each receive counting towards the redrive policy's \
                 maxReceiveCount (applied messages end in its dead-letter queue); set the \
                 queue's VisibilityTimeout to at least 180 s plus the mapping's batching window"
            )
        );
        assert_eq!(
            short_visibility(
                "payments",
                Duration::from_secs(180),
                Duration::from_secs(30)
            ),
            None
        );
    }

    #[test]
    fn a_queue_is_found_by_its_arn() {
        assert_eq!(
            queue_url("arn:aws:sqs:eu-west-1:123456789012:payments.fifo"),
            Some((
                "https://sqs.eu-west-1.amazonaws.com/123456789012/payments.fifo".to_owned(),
                "payments.fifo".to_owned()
            ))
        );
        assert_eq!(
            queue_url("arn:aws-cn:sqs:cn-north-1:123456789012:q").map(|(url, _)| url),
            Some("https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q".to_owned())
        );
        for not_a_queue in [
            "arn:aws:kinesis:us-east-1:123456789012:stream/payments",
            "arn:aws:sqs:us-east-1:123456789012",
            "arn:aws:sqs:us-east-1::q",
            "",
        ] {
            assert_eq!(queue_url(not_a_queue), None, "{not_a_queue}");
        }
    }
}
