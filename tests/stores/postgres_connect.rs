//! Connecting to PostgreSQL as the function does on AWS, against the test
//! server (TLS on, a self-signed certificate: `infra/postgres-local.sh`) and
//! a Secrets Manager API (moto's server, `infra/sqs-local.sh`).

use crate::support;

use std::time::Duration;

use exactly_once::postgres::{DatabaseSettings, PostgresStore};
use exactly_once::store::ClaimOutcome;
use exactly_once::store::ClaimRequest;
use exactly_once::store::Store;
use exactly_once::store::StoreError;

/// `DATABASE_URL` of the test server with `query` instead of its own.
fn url_with(query: &str) -> String {
    let url = support::env("DATABASE_URL");
    let base = url.split_once('?').map_or(url.as_str(), |(base, _)| base);
    format!("{base}{query}")
}

fn settings(url: String) -> DatabaseSettings {
    DatabaseSettings::from_lookup(|name| (name == "DATABASE_URL").then(|| url.clone()))
        .expect("settings")
}

/// Whether the pool's connection is encrypted, as the server sees it.
async fn encrypted(settings: &DatabaseSettings) -> Result<bool, String> {
    let pool = settings.pool(None).await.map_err(|err| err.to_string())?;
    let client = pool.get().await.map_err(|err| format!("{err:?}"))?;
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .map_err(|err| err.to_string())?;
    Ok(row.get(0))
}

#[tokio::test]
async fn tls_is_on_by_default_and_verify_full_checks_the_certificate() {
    assert_eq!(
        encrypted(&settings(url_with(""))).await,
        Ok(true),
        "sslmode unset: require"
    );
    let ca = support::env("POSTGRES_LOCAL_CA");
    let verified = settings(url_with(&format!("?sslmode=verify-full&sslrootcert={ca}")));
    assert_eq!(encrypted(&verified).await, Ok(true));
    assert_eq!(
        encrypted(&settings(url_with("?sslmode=disable"))).await,
        Ok(false),
        "only when asked"
    );
    // The system's roots do not trust the test server's certificate: no
    // connection, and a store on it fails closed.
    let untrusted = settings(url_with("?sslmode=verify-full"));
    assert!(encrypted(&untrusted).await.is_err());
    let store = PostgresStore::new(
        untrusted.pool(None).await.expect("a pool"),
        support::store_config(Duration::from_secs(30)),
        untrusted.call_timeout(),
    )
    .expect("store");
    let request = ClaimRequest {
        key: "k-1",
        payload_hash: "h",
        origin: None,
        lease_cap_ms: None,
        owner: None,
    };
    match store.claim(request).await {
        Err(err @ StoreError::Unavailable { .. }) => assert!(err.is_retryable()),
        other => panic!("expected unavailable, got {other:?}"),
    }
}

#[tokio::test]
async fn a_secrets_manager_secret_names_the_database_and_its_login() {
    let aws = exactly_once::aws::sdk_config()
        .await
        .to_builder()
        .endpoint_url(support::env("AWS_ENDPOINT_URL_SQS"))
        .build();
    let url = support::env("DATABASE_URL");
    let port: u16 = url
        .split_once("127.0.0.1:")
        .and_then(|(_, rest)| rest.split('/').next())
        .and_then(|port| port.parse().ok())
        .expect("a port");
    let secret = serde_json::json!({
        "username": "postgres", "password": "from-the-secret", "engine": "postgres",
        "host": "127.0.0.1", "port": port, "dbname": "postgres",
    });
    let client = aws_sdk_secretsmanager::Client::new(&aws);
    let created = client
        .create_secret()
        .name(format!("db-{}", uuid::Uuid::new_v4()))
        .secret_string(secret.to_string())
        .send()
        .await
        .expect("create the secret");
    let arn = created.arn().expect("an ARN").to_owned();
    // The URL names another host, port, user and database: the secret's win.
    let with_secret = |arn: &str| {
        let arn = arn.to_owned();
        DatabaseSettings::from_lookup(move |name| match name {
            "DATABASE_URL" => {
                Some("postgres://nobody@192.0.2.1:1/elsewhere?sslmode=disable".into())
            }
            "DATABASE_SECRET_ARN" => Some(arn.clone()),
            _ => None,
        })
        .expect("settings")
    };
    let pool = with_secret(&arn)
        .pool(Some(&aws))
        .await
        .expect("a pool from the secret");
    let client = pool
        .get()
        .await
        .expect("a connection to the secret's server");
    let user: String = client
        .query_one("SELECT current_user", &[])
        .await
        .expect("query")
        .get(0);
    assert_eq!(user, "postgres");
    let store = PostgresStore::new(
        pool.clone(),
        support::store_config(Duration::from_secs(30)),
        Duration::from_secs(5),
    )
    .expect("store");
    support::postgres::migrate(&pool).await;
    let request = ClaimRequest {
        key: "k-1",
        payload_hash: "h",
        origin: None,
        lease_cap_ms: None,
        owner: None,
    };
    assert!(matches!(
        store.claim(request).await,
        Ok(ClaimOutcome::Acquired(_))
    ));

    // A secret that does not exist: a clear error at start, no pool.
    let missing = format!("{arn}-gone");
    let err = with_secret(&missing)
        .pool(Some(&aws))
        .await
        .expect_err("no such secret");
    assert!(
        err.to_string().starts_with("DATABASE_SECRET_ARN: "),
        "{err}"
    );
    assert!(!err.to_string().contains("from-the-secret"), "{err}");
}
