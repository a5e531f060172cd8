//! RDS IAM authentication: the password of each new connection is a token
//! signed with the function's role.

use std::time::Duration;

use aws_config::SdkConfig;
use exactly_once_aws_sign::presigned;
use tokio_postgres::Config;
use tokio_postgres::config::Host;

use super::ConnectError;

/// RDS IAM authentication: a token is a SigV4-presigned
/// `connect` request for the user at the host, valid 15 minutes.
pub(super) struct IamToken {
    aws: SdkConfig,
    host: String,
    port: u16,
    user: String,
}

impl IamToken {
    pub(super) fn new(aws: &SdkConfig, config: &Config) -> Result<Self, ConnectError> {
        let host = match config.get_hosts().first() {
            Some(Host::Tcp(host)) => host.clone(),
            _ => return Err(ConnectError::Iam("DATABASE_URL names no TCP host".into())),
        };
        let user = config
            .get_user()
            .ok_or_else(|| ConnectError::Iam("DATABASE_URL names no user".into()))?;
        Ok(Self {
            aws: aws.clone(),
            host,
            port: config.get_ports().first().copied().unwrap_or(5432),
            user: user.to_owned(),
        })
    }

    pub(super) async fn token(&self) -> Result<String, String> {
        let mut url = url::Url::parse(&format!("https://{}:{}/", self.host, self.port))
            .map_err(|err| err.to_string())?;
        url.query_pairs_mut()
            .append_pair("Action", "connect")
            .append_pair("DBUser", &self.user);
        let signed = presigned(&self.aws, "rds-db", url, Duration::from_secs(900)).await?;
        Ok(signed.as_str().trim_start_matches("https://").to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn an_iam_token_is_a_presigned_connect_request_for_the_user() {
        use aws_credential_types::Credentials;
        use aws_credential_types::provider::SharedCredentialsProvider;
        let aws = SdkConfig::builder()
            .region(aws_config::Region::new("eu-west-1"))
            .credentials_provider(SharedCredentialsProvider::new(Credentials::new(
                "AKIDEXAMPLE",
                "secret",
                None,
                None,
                "test",
            )))
            .build();
        let config: Config = "postgres://app@db.example.com:6543/ledger"
            .parse()
            .expect("url");
        let token = IamToken::new(&aws, &config)
            .expect("IAM settings")
            .token()
            .await
            .expect("a token");
        let prefix = "db.example.com:6543/?Action=connect&DBUser=app&X-Amz-Algorithm=AWS4-HMAC-SHA256\
                      &X-Amz-Credential=AKIDEXAMPLE%2F";
        assert!(token.starts_with(prefix), "{token}");
        for part in [
            "%2Feu-west-1%2Frds-db%2Faws4_request",
            "&X-Amz-Expires=900",
            "&X-Amz-SignedHeaders=host",
            "&X-Amz-Signature=",
        ] {
            assert!(token.contains(part), "{part} in {token}");
        }
        assert!(!token.contains("secret"), "never the secret key");
    }
}
