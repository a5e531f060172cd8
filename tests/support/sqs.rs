//! The local SQS (moto's server, started by `infra/test.sh`): queues for
//! the dead-letter tests, and what they hold.

use serde_json::Value;

/// A client of the local SQS.
pub async fn client() -> aws_sdk_sqs::Client {
    super::env("AWS_ENDPOINT_URL_SQS");
    aws_sdk_sqs::Client::new(&exactly_once::aws::sdk_config().await)
}

/// A new queue: its client and URL.
pub async fn queue() -> (aws_sdk_sqs::Client, String) {
    let client = client().await;
    let name = format!("parked-{}", uuid::Uuid::new_v4().simple());
    // moto answers slowly while it warms up (many schedules of the
    // simulation create their queues at once): a few tries.
    for attempt in 1.. {
        match client.create_queue().queue_name(&name).send().await {
            Ok(created) => {
                let url = created.queue_url().expect("a queue URL").to_owned();
                return (client, url);
            }
            Err(err) if attempt >= 5 => panic!("create a queue: {err:?}"),
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
        }
    }
    unreachable!("the loop returns or panics")
}

/// Every message the queue holds, as JSON (received, so no longer visible).
pub async fn drain(client: &aws_sdk_sqs::Client, url: &str) -> Vec<Value> {
    receive_all(client, url)
        .await
        .iter()
        .map(|m| serde_json::from_str(m.body().unwrap_or("null")).expect("a JSON body"))
        .collect()
}

/// Every message the queue holds, whole (its attributes and system
/// attributes too), received, so no longer visible.
pub async fn receive_all(
    client: &aws_sdk_sqs::Client,
    url: &str,
) -> Vec<aws_sdk_sqs::types::Message> {
    let mut messages = Vec::new();
    loop {
        let received = client
            .receive_message()
            .queue_url(url)
            .max_number_of_messages(10)
            .message_attribute_names("All")
            .message_system_attribute_names(aws_sdk_sqs::types::MessageSystemAttributeName::All)
            .send()
            .await
            .expect("receive");
        if received.messages().is_empty() {
            return messages;
        }
        messages.extend(received.messages().iter().cloned());
    }
}

/// A message's `idempotency-key` attribute: the id an emitted message
/// travels under ("" without one).
pub fn id_of(message: &aws_sdk_sqs::types::Message) -> &str {
    message
        .message_attributes()
        .and_then(|a| a.get("idempotency-key"))
        .and_then(|a| a.string_value())
        .unwrap_or_default()
}
