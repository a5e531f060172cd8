//! A function that cannot start tells the Lambda Runtime API why
//! (`POST /2018-06-01/runtime/init/error`), as the Runtime API asks of a
//! runtime whose initialisation failed: Lambda then reports the error as
//! the invocation's (`Runtime.InitError` with this message), and a local
//! emulator answers the waiting invoke with it (`cargo lambda invoke`
//! prints the error instead of hanging). The error also goes to stderr, as
//! `main`'s `Err`.

use std::time::Duration;

use lambda_runtime_api_client::PooledClient;
use lambda_runtime_api_client::body::Body;

use crate::StartError;

/// The `errorType` of a start-up error.
const ERROR_TYPE: &str = "StartError";

/// Posts `err` to the Runtime API the environment names, if any; gives up
/// silently after 2 s (the process exits with the error either way).
pub(crate) async fn report(err: &StartError) {
    let Some(api) = std::env::var("AWS_LAMBDA_RUNTIME_API")
        .ok()
        .filter(|api| !api.is_empty())
    else {
        return;
    };
    // Lambda gives `host:port`; local emulators may give a whole URL.
    let base = match api.contains("://") {
        true => api,
        false => format!("http://{api}"),
    };
    let Ok(endpoint) = base.parse::<http::Uri>() else {
        return;
    };
    let client = PooledClient::builder().with_endpoint(endpoint).build();
    let body = serde_json::json!({
        "errorMessage": err.to_string(),
        "errorType": ERROR_TYPE,
        "stackTrace": [],
    });
    let request = http::Request::post("/2018-06-01/runtime/init/error")
        .header("Lambda-Runtime-Function-Error-Type", ERROR_TYPE)
        .header("Content-Type", "application/vnd.aws.lambda.error+json")
        .body(Body::from(body.to_string()));
    let Ok(request) = request else {
        return;
    };
    if let Ok(Err(failed)) =
        tokio::time::timeout(Duration::from_secs(2), client.call(request)).await
    {
        tracing::debug!(error = %failed, "the start-up error was not posted to the Runtime API");
    }
}
