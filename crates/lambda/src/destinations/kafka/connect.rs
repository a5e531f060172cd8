//! Connecting to a cluster as its destination says ([`Auth`]): TLS with
//! the system's roots, and MSK IAM's token or SCRAM's credentials from the
//! function's AWS configuration.

use std::sync::Arc;
use std::time::Duration;

use aws_types::SdkConfig;
use base64::Engine as _;
use exactly_once_aws_sign::presigned;
use rskafka::BackoffConfig;
use rskafka::client::{Client, ClientBuilder, Credentials, OauthBearerCredentials, SaslConfig};

use super::topic::{Auth, Cluster};

/// How long a request (a connection, a produce with its retries) may take
/// before the sender gives up on it: as long as one AWS SDK operation.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A client of `cluster`, connected and authenticated as its [`Auth`]
/// says; `aws` signs MSK IAM tokens and reads SCRAM secrets.
pub async fn connect(cluster: &Cluster, aws: &SdkConfig) -> Result<Client, String> {
    let mut builder = ClientBuilder::new(cluster.brokers.clone())
        .client_id("exactly-once")
        .backoff_config(BackoffConfig {
            deadline: Some(REQUEST_TIMEOUT),
            ..BackoffConfig::default()
        });
    if cluster.auth != Auth::Plaintext {
        builder = builder.tls_config(tls()?);
    }
    match &cluster.auth {
        Auth::Plaintext | Auth::Tls => {}
        Auth::Iam => {
            let aws = aws.clone();
            builder = builder.sasl_config(SaslConfig::Oauthbearer(OauthBearerCredentials {
                callback: Arc::new(move || {
                    let aws = aws.clone();
                    Box::pin(async move { msk_iam_token(&aws).await.map_err(Into::into) })
                }),
                authz_id: None,
                bearer_kvs: Vec::new(),
            }));
        }
        Auth::Scram { sha512, secret } => {
            let credentials = scram_credentials(aws, secret).await?;
            builder = builder.sasl_config(if *sha512 {
                SaslConfig::ScramSha512(credentials)
            } else {
                SaslConfig::ScramSha256(credentials)
            });
        }
    }
    builder.build().await.map_err(|err| err.to_string())
}

/// TLS on ring with the system's root certificates (Amazon's roots sign
/// MSK's brokers).
fn tls() -> Result<Arc<rustls::ClientConfig>, String> {
    let mut roots = rustls::RootCertStore::empty();
    let found = rustls_native_certs::load_native_certs();
    let (added, _) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        return Err("no system root certificate to verify the brokers with".into());
    }
    let config = rustls::ClientConfig::builder_with_provider(
        rustls::crypto::ring::default_provider().into(),
    )
    .with_safe_default_protocol_versions()
    .map_err(|err| err.to_string())?
    .with_root_certificates(roots)
    .with_no_client_auth();
    Ok(Arc::new(config))
}

/// The SCRAM user and password of the Secrets Manager secret `secret`
/// (`{"username", "password"}`, as MSK's SCRAM secrets hold them).
async fn scram_credentials(aws: &SdkConfig, secret: &str) -> Result<Credentials, String> {
    #[derive(serde::Deserialize)]
    struct Secret {
        username: String,
        password: String,
    }
    let value = aws_sdk_secretsmanager::Client::new(aws)
        .get_secret_value()
        .secret_id(secret)
        .send()
        .await
        .map_err(|err| {
            format!(
                "reading the SCRAM secret {secret}: {}",
                aws_sdk_secretsmanager::error::DisplayErrorContext(err)
            )
        })?;
    let text = value.secret_string().unwrap_or_default();
    // Never the secret's text in the error: only what is missing.
    let parsed: Secret = serde_json::from_str(text).map_err(|_| {
        format!("the SCRAM secret {secret} is not {{\"username\": …, \"password\": …}}")
    })?;
    Ok(Credentials::new(parsed.username, parsed.password))
}

/// An MSK IAM authentication token, as AWS's `aws-msk-iam-sasl-signer`
/// makes it: a `kafka-cluster:Connect` request to
/// `kafka.<region>.amazonaws.com`, SigV4-presigned for 15 minutes with the
/// function's credentials, a `User-Agent` parameter added, base64url
/// without padding.
pub async fn msk_iam_token(aws: &SdkConfig) -> Result<String, String> {
    let region = aws.region().ok_or("no AWS region")?;
    let mut url = url::Url::parse(&format!("https://kafka.{region}.amazonaws.com/"))
        .map_err(|err| err.to_string())?;
    url.query_pairs_mut()
        .append_pair("Action", "kafka-cluster:Connect");
    let mut signed = presigned(aws, "kafka-cluster", url, Duration::from_secs(900)).await?;
    signed.query_pairs_mut().append_pair(
        "User-Agent",
        concat!("exactly-once/", env!("CARGO_PKG_VERSION")),
    );
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(signed.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_msk_iam_token_is_a_presigned_connect_request_in_base64url() {
        use aws_credential_types::Credentials;
        use aws_credential_types::provider::SharedCredentialsProvider;
        let aws = SdkConfig::builder()
            .region(aws_types::region::Region::new("eu-west-1"))
            .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
                "AKIDEXAMPLE",
                "secret",
                None,
                None,
                "test",
            )))
            .build();
        let token = msk_iam_token(&aws).await.expect("a token");
        assert!(
            !token.contains(['=', '+', '/']),
            "base64url, unpadded: {token}"
        );
        let url = String::from_utf8(
            base64::engine::general_purpose::URL_SAFE_NO_PAD
                .decode(&token)
                .expect("base64url"),
        )
        .expect("a URL");
        let prefix = "https://kafka.eu-west-1.amazonaws.com/?Action=kafka-cluster%3AConnect\
                      &X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=AKIDEXAMPLE%2F";
        assert!(url.starts_with(prefix), "{url}");
        for part in [
            "%2Feu-west-1%2Fkafka-cluster%2Faws4_request",
            "&X-Amz-Expires=900",
            "&X-Amz-SignedHeaders=host",
            "&X-Amz-Signature=",
            "&User-Agent=exactly-once%2F",
        ] {
            assert!(url.contains(part), "{part} in {url}");
        }
        assert!(!url.contains("secret"), "never the secret key");
    }
}
