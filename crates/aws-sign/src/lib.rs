//! A `GET` request presigned with SigV4 in its query string: what RDS IAM
//! (the PostgreSQL store's password) and MSK IAM (the Kafka destination's
//! SASL OAUTHBEARER token) take as a token. Signed locally with the
//! function's credentials: no call to AWS.

use std::time::{Duration, SystemTime};

use aws_credential_types::provider::ProvideCredentials;
use aws_types::SdkConfig;
use url::Url;

/// `url` presigned for `service` in `aws`'s region with `aws`'s
/// credentials, valid for `expires_in`: the signing parameters
/// (`X-Amz-Algorithm` … `X-Amz-Signature`) appended to its query. Why not,
/// in words (no credentials, no region), never a secret.
pub async fn presigned(
    aws: &SdkConfig,
    service: &str,
    mut url: Url,
    expires_in: Duration,
) -> Result<Url, String> {
    use aws_sigv4::http_request::{
        SignableBody, SignableRequest, SignatureLocation, SigningSettings, sign,
    };
    let provider = aws
        .credentials_provider()
        .ok_or("no AWS credentials provider")?;
    let credentials = provider
        .provide_credentials()
        .await
        .map_err(|err| err.to_string())?;
    let region = aws.region().ok_or("no AWS region")?.to_string();
    let identity = credentials.into();
    let mut settings = SigningSettings::default();
    settings.expires_in = Some(expires_in);
    settings.signature_location = SignatureLocation::QueryParams;
    let params = aws_sigv4::sign::v4::SigningParams::builder()
        .identity(&identity)
        .region(&region)
        .name(service)
        .time(SystemTime::now())
        .settings(settings)
        .build()
        .map_err(|err| err.to_string())?
        .into();
    let request = SignableRequest::new(
        "GET",
        url.as_str(),
        std::iter::empty(),
        SignableBody::Bytes(&[]),
    )
    .map_err(|err| err.to_string())?;
    let (instructions, _) = sign(request, &params)
        .map_err(|err| err.to_string())?
        .into_parts();
    for (name, value) in instructions.params() {
        url.query_pairs_mut().append_pair(name, value);
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_request_is_presigned_for_its_service_and_region_in_its_query() {
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
        let url = Url::parse("https://example.com/?Action=go").expect("a URL");
        let signed = presigned(&aws, "svc", url, Duration::from_secs(60))
            .await
            .expect("signed");
        let text = signed.as_str();
        assert!(
            text.starts_with("https://example.com/?Action=go&X-Amz-Algorithm=AWS4-HMAC-SHA256"),
            "{text}"
        );
        for part in [
            "%2Feu-west-1%2Fsvc%2Faws4_request",
            "&X-Amz-Expires=60",
            "&X-Amz-Signature=",
        ] {
            assert!(text.contains(part), "{part} in {text}");
        }
        assert!(!text.contains("secret"), "never the secret key");
        let unsigned = SdkConfig::builder().build();
        let url = Url::parse("https://example.com/").expect("a URL");
        assert_eq!(
            presigned(&unsigned, "svc", url, Duration::from_secs(60)).await,
            Err("no AWS credentials provider".to_owned())
        );
    }
}
