//! A Kafka topic as a destination names it:
//! `kafka://host:port[,host:port…]/topic[?auth=…]`. The brokers are the
//! bootstrap servers; `auth` says how the function connects:
//!
//! - none: plaintext, no SASL (a self-managed cluster inside the VPC, the
//!   tests' broker);
//! - `auth=tls`: TLS, no SASL (MSK's port 9094);
//! - `auth=iam`: TLS and SASL OAUTHBEARER with a token signed by the
//!   function's role (MSK IAM, port 9098);
//! - `auth=scram-sha-512&secret=<ARN>`: TLS and SASL/SCRAM-SHA-512 (or
//!   `scram-sha-256`), the user and password from the Secrets Manager
//!   secret `{"username", "password"}` (MSK SCRAM, port 9096).
//!
//! The name is stored with every message, so it holds no secret: only the
//! secret's ARN.

use exactly_once_core::outbox::SendError;

/// How the destination's scheme starts.
pub const SCHEME: &str = "kafka://";

/// A topic and the cluster it lives on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KafkaTopic {
    /// The cluster: its brokers and how to connect.
    pub cluster: Cluster,
    /// The topic's name.
    pub topic: String,
}

/// The brokers to bootstrap from and how to connect to them: the key the
/// sender keeps one connection per.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Cluster {
    /// `host:port` of each bootstrap broker, as named.
    pub brokers: Vec<String>,
    /// How the function connects.
    pub auth: Auth,
}

/// How the function connects to a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Auth {
    /// Plaintext, no SASL.
    Plaintext,
    /// TLS, no SASL.
    Tls,
    /// TLS, SASL OAUTHBEARER with an MSK IAM token of the function's role.
    Iam,
    /// TLS, SASL/SCRAM with the credentials of a Secrets Manager secret.
    Scram {
        /// SCRAM-SHA-512 (`true`) or SCRAM-SHA-256.
        sha512: bool,
        /// The secret's ARN (or name).
        secret: String,
    },
}

impl KafkaTopic {
    /// The topic `destination` names, or why it names none.
    pub fn parse(destination: &str) -> Result<Self, SendError> {
        let invalid = |why: &str| {
            SendError::Unsupported(format!(
                "{destination:?} is not a Kafka topic: {why} (kafka://host:port[,host:port]/topic\
                 [?auth=tls|iam|scram-sha-512&secret=ARN])"
            ))
        };
        let rest = destination
            .strip_prefix(SCHEME)
            .ok_or_else(|| invalid("no kafka:// scheme"))?;
        let (address, query) = rest.split_once('?').unwrap_or((rest, ""));
        let (brokers, topic) = address
            .split_once('/')
            .ok_or_else(|| invalid("no /topic"))?;
        let brokers: Vec<String> = brokers.split(',').map(str::to_owned).collect();
        if brokers.iter().any(|broker| !is_host_port(broker)) {
            return Err(invalid("a broker is not host:port"));
        }
        // Kafka's own rule for topic names.
        let legal = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-');
        if topic.is_empty() || topic.len() > 249 || !topic.chars().all(legal) {
            return Err(invalid("the topic is not a legal Kafka topic name"));
        }
        let mut auth = None;
        let mut secret = None;
        for pair in query.split('&').filter(|pair| !pair.is_empty()) {
            match pair.split_once('=') {
                Some(("auth", value)) if auth.is_none() => auth = Some(value),
                Some(("secret", value)) if secret.is_none() && !value.is_empty() => {
                    secret = Some(value.to_owned());
                }
                _ => return Err(invalid("only auth= and secret= may follow ?, once each")),
            }
        }
        let auth = match (auth, secret) {
            (None, None) => Auth::Plaintext,
            (Some("tls"), None) => Auth::Tls,
            (Some("iam"), None) => Auth::Iam,
            (Some(mechanism @ ("scram-sha-512" | "scram-sha-256")), Some(secret)) => Auth::Scram {
                sha512: mechanism == "scram-sha-512",
                secret,
            },
            (Some("scram-sha-512" | "scram-sha-256"), None) => {
                return Err(invalid("SCRAM needs secret=<the secret's ARN>"));
            }
            (_, Some(_)) => return Err(invalid("secret= goes with auth=scram-sha-512 only")),
            (Some(_), None) => return Err(invalid("auth is tls, iam or scram-sha-512")),
        };
        Ok(Self {
            cluster: Cluster { brokers, auth },
            topic: topic.to_owned(),
        })
    }
}

/// Whether `broker` is `host:port`.
fn is_host_port(broker: &str) -> bool {
    broker
        .rsplit_once(':')
        .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kafka_destination_names_its_brokers_topic_and_auth() {
        let topic = KafkaTopic::parse("kafka://127.0.0.1:9092/ledger-events").expect("a topic");
        assert_eq!(topic.cluster.brokers, ["127.0.0.1:9092"]);
        assert_eq!(topic.cluster.auth, Auth::Plaintext);
        assert_eq!(topic.topic, "ledger-events");

        let msk = "kafka://b-1.c.kafka.eu-west-1.amazonaws.com:9098,b-2.c.kafka.eu-west-1.amazonaws.com:9098/ledger.events_v1?auth=iam";
        let topic = KafkaTopic::parse(msk).expect("an MSK topic");
        assert_eq!(topic.cluster.brokers.len(), 2);
        assert_eq!(topic.cluster.auth, Auth::Iam);
        assert_eq!(topic.topic, "ledger.events_v1");

        let scram = "kafka://b-1:9096/t?auth=scram-sha-512&secret=arn:aws:secretsmanager:eu-west-1:1:secret:AmazonMSK_ledger-x";
        assert_eq!(
            KafkaTopic::parse(scram).expect("SCRAM").cluster.auth,
            Auth::Scram {
                sha512: true,
                secret: "arn:aws:secretsmanager:eu-west-1:1:secret:AmazonMSK_ledger-x".into()
            }
        );
        assert_eq!(
            KafkaTopic::parse("kafka://b-1:9094/t?auth=tls")
                .expect("TLS")
                .cluster
                .auth,
            Auth::Tls
        );
    }

    #[test]
    fn a_malformed_kafka_destination_says_what_is_wrong() {
        for (destination, why) in [
            ("kafka://127.0.0.1:9092", "no /topic"),
            ("kafka://127.0.0.1/t", "host:port"),
            ("kafka://127.0.0.1:0/t", "host:port"),
            ("kafka://a:1,/t", "host:port"),
            ("kafka://a:1/", "legal Kafka topic"),
            ("kafka://a:1/a/b", "legal Kafka topic"),
            ("kafka://a:1/t?auth=kerberos", "tls, iam or scram"),
            ("kafka://a:1/t?auth=scram-sha-512", "needs secret"),
            ("kafka://a:1/t?auth=iam&secret=s", "secret= goes with"),
            ("kafka://a:1/t?auth=iam&auth=tls", "once each"),
            ("kafka://a:1/t?password=x", "only auth= and secret="),
        ] {
            match KafkaTopic::parse(destination) {
                Err(SendError::Unsupported(reason)) => {
                    assert!(reason.contains(why), "{destination}: {reason}");
                }
                other => panic!("{destination}: expected Unsupported, got {other:?}"),
            }
        }
    }
}
