//! template.yaml and the code must agree: the table the code writes, its TTL
//! attribute, and the environment variables the function reads.

mod support;

use std::collections::BTreeSet;

use exactly_once::lambda as settings;

use exactly_once::store::attr;
use serde_norway::Value;

fn template() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/template.yaml");
    let text = std::fs::read_to_string(path).expect("read template.yaml");
    serde_norway::from_str(&text).expect("template.yaml is YAML")
}

fn resource<'a>(template: &'a Value, name: &str) -> &'a Value {
    &template["Resources"][name]["Properties"]
}

fn hash_key(table: &Value) -> (String, String) {
    let key = table["KeySchema"]
        .as_sequence()
        .expect("a key schema")
        .iter()
        .find(|k| k["KeyType"] == "HASH")
        .expect("a hash key")["AttributeName"]
        .as_str()
        .expect("a name")
        .to_owned();
    let kind = table["AttributeDefinitions"]
        .as_sequence()
        .expect("attribute definitions")
        .iter()
        .find(|a| a["AttributeName"].as_str() == Some(&key))
        .expect("the key is defined")["AttributeType"]
        .as_str()
        .expect("a type")
        .to_owned();
    (key, kind)
}

#[test]
fn the_idempotency_table_is_keyed_and_expired_as_the_code_expects() {
    let template = template();
    let table = resource(&template, "IdempotencyTable");
    assert_eq!(hash_key(table), (attr::PK.to_owned(), "S".to_owned()));
    assert_eq!(
        table["KeySchema"].as_sequence().map(Vec::len),
        Some(1),
        "no sort key"
    );
    let ttl = &table["TimeToLiveSpecification"];
    assert_eq!(ttl["AttributeName"].as_str(), Some(attr::EXPIRES_AT));
    assert_eq!(ttl["Enabled"].as_bool(), Some(true));
}

#[test]
fn the_ledger_table_is_keyed_by_account() {
    let template = template();
    let table = resource(&template, "LedgerTable");
    assert_eq!(hash_key(table), ("account_id".to_owned(), "S".to_owned()));
}

#[test]
fn the_function_sets_exactly_the_variables_the_code_reads() {
    let template = template();
    let variables: BTreeSet<&str> = resource(&template, "Function")["Environment"]["Variables"]
        .as_mapping()
        .expect("environment variables")
        .keys()
        .map(|k| k.as_str().expect("a name"))
        .collect();
    let read: BTreeSet<&str> = settings::ENV_VARS
        .iter()
        .chain(ledger::ENV_VARS)
        .chain(exactly_once::postgres::connect::ENV_VARS)
        .chain(exactly_once::redis::connect::ENV_VARS)
        .chain(exactly_once::redis::cache::ENV_VARS)
        .copied()
        .collect();
    assert_eq!(variables, read);
}

#[test]
fn the_function_is_the_msk_handler_binary() {
    let template = template();
    let function = &template["Resources"]["Function"];
    let binary = support::binary("msk-handler");
    assert_eq!(
        function["Metadata"]["BuildProperties"]["Binary"].as_str(),
        binary.file_name().and_then(|name| name.to_str())
    );
    assert_eq!(
        function["Properties"]["Handler"].as_str(),
        Some("bootstrap")
    );
}

/// The handler snippet of docs/handlers.md is the doctest of the prelude
/// (which `cargo test` compiles), line for line: it cannot drift from the
/// API. (The README's quick start is built and run by infra/quickstart.sh.)
#[test]
fn the_readme_handler_snippet_is_the_compiled_doctest() {
    let handlers = include_str!("../docs/handlers.md");
    let section = &handlers[handlers.find("## Writing a handler").expect("the section")..];
    let start = section.find("```rust\n").expect("a rust block") + "```rust\n".len();
    let snippet: Vec<&str> = section[start..]
        .lines()
        .take_while(|line| *line != "```")
        .collect();
    let source = include_str!("../src/prelude.rs");
    let doc = &source[source.find("//! ```no_run").expect("the doctest")..];
    let doctest: Vec<&str> = doc
        .lines()
        .skip(1)
        .map(|line| {
            line.trim_start_matches("//!")
                .strip_prefix(' ')
                .unwrap_or("")
        })
        .take_while(|line| *line != "```")
        .filter(|line| !line.starts_with("# "))
        .collect();
    assert_eq!(snippet, doctest);
}

/// The crate docs (`cargo doc`, docs.rs) open with the README's quick
/// start, block for block: what a newcomer reads in either place builds
/// (the README's is built outside the repository by infra/quickstart.sh,
/// the docs' is a doctest).
#[test]
fn the_crate_docs_open_with_the_readme_quick_start() {
    let readme = include_str!("../README.md");
    let section = readme
        .split("\n## Your own handler\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("the README's quick start");
    let docs: String = include_str!("../src/lib.rs")
        .lines()
        .take_while(|line| line.starts_with("//!"))
        .map(|line| {
            line.trim_start_matches("//!")
                .strip_prefix(' ')
                .unwrap_or("")
        })
        .collect::<Vec<_>>()
        .join("\n");
    for (readme_fence, docs_fence) in [("```toml\n", "```toml\n"), ("```rust\n", "```no_run\n")] {
        let block = |text: &str, fence: &str| -> String {
            let start = text.find(fence).expect("a block") + fence.len();
            text[start..]
                .split("\n```")
                .next()
                .expect("its end")
                .to_owned()
        };
        assert_eq!(block(section, readme_fence), block(&docs, docs_fence));
    }
}

/// `template` with CloudFormation's short forms read as plain values:
/// `!Ref X` as `X`, `!GetAtt R.A` as `R.A`, `!If [c, a, b]` as `[c, a, b]`.
fn untagged(value: &Value) -> Value {
    match value {
        Value::Tagged(tagged) => untagged(&tagged.value),
        Value::Sequence(items) => Value::Sequence(items.iter().map(untagged).collect()),
        Value::Mapping(map) => Value::Mapping(
            map.iter()
                .map(|(key, value)| (key.clone(), untagged(value)))
                .collect(),
        ),
        other => other.clone(),
    }
}

/// `ComputeType=managed-instances` (Lambda Managed Instances, off by
/// default) puts the function on the template's capacity provider, each
/// execution environment serving as many invocations at once as
/// `PerExecutionEnvironmentMaxConcurrency` says (Lambda passes it on as
/// `AWS_LAMBDA_MAX_CONCURRENCY`, which `exactly_once::run` serves), and takes
/// the function out of a VPC of its own (the provider's VPC is used).
#[test]
fn managed_instances_serve_the_parameters_concurrency_on_the_capacity_provider() {
    let template = untagged(&template());
    assert_eq!(
        template["Parameters"]["ComputeType"]["Default"].as_str(),
        Some("lambda")
    );
    let function = &template["Resources"]["Function"]["Properties"];
    let config = &function["CapacityProviderConfig"];
    assert_eq!(config[0].as_str(), Some("ManagedInstances"));
    let managed = &config[1]["LambdaManagedInstancesCapacityProviderConfig"];
    assert_eq!(
        managed["CapacityProviderArn"].as_str(),
        Some("CapacityProvider.Arn")
    );
    assert_eq!(
        managed["PerExecutionEnvironmentMaxConcurrency"].as_str(),
        Some("PerExecutionEnvironmentMaxConcurrency")
    );
    assert_eq!(config[2].as_str(), Some("AWS::NoValue"));
    let vpc = &function["VpcConfig"];
    assert_eq!(
        (vpc[0].as_str(), vpc[1].as_str()),
        (Some("ManagedInstances"), Some("AWS::NoValue"))
    );
    let provider = &template["Resources"]["CapacityProvider"];
    assert_eq!(provider["Condition"].as_str(), Some("ManagedInstances"));
    assert_eq!(
        provider["Properties"]["InstanceRequirements"]["Architectures"][0].as_str(),
        Some("Architecture")
    );
}

/// The defaults let an invocation wait out a crashed worker's lease (and
/// take its key over) instead of reporting its record until the retries run
/// out: the function's timeout exceeds a lease plus the safety margin.
#[test]
fn the_default_timeout_outlasts_a_lease_and_the_safety_margin() {
    let template = template();
    let default = |name: &str| {
        template["Parameters"][name]["Default"]
            .as_u64()
            .unwrap_or_else(|| panic!("a numeric default for {name}"))
    };
    let (timeout_s, lock_s, margin_ms) = (
        default("Timeout"),
        default("LockTimeoutSeconds"),
        default("SafetyMarginMs"),
    );
    assert!(
        timeout_s * 1000 > lock_s * 1000 + margin_ms + 30_000,
        "Timeout {timeout_s} s must leave a lease ({lock_s} s), the margin ({margin_ms} ms) and 30 s of work"
    );
    assert!(default("MaximumRetryAttempts") >= 1);
}

/// Every `MskExactlyOnce` metric the template's alarms and dashboard name
/// is one the function writes (a misspelt name would alarm on nothing).
#[test]
fn every_alarm_and_dashboard_metric_is_one_the_function_writes() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/template.yaml");
    let text = std::fs::read_to_string(path).expect("read template.yaml");
    let written = exactly_once::lambda::metric_names();
    let lines: Vec<&str> = text.lines().collect();
    // Alarms: `Namespace: MskExactlyOnce` then `MetricName: X`.
    let mut named: Vec<String> = lines
        .windows(2)
        .filter(|pair| pair[0].trim() == "Namespace: MskExactlyOnce")
        .filter_map(|pair| pair[1].trim().strip_prefix("MetricName: "))
        .map(str::to_owned)
        .collect();
    let alarms = named.len();
    // The dashboard: `["MskExactlyOnce", "X", ...]`.
    named.extend(
        text.split("[\"MskExactlyOnce\", \"")
            .skip(1)
            .filter_map(|rest| rest.split('"').next().map(str::to_owned)),
    );
    assert!(
        alarms >= 8,
        "the alarms on the function's metrics: {named:?}"
    );
    assert!(
        named.len() >= alarms + 15,
        "the dashboard's metrics: {named:?}"
    );
    for name in &named {
        assert!(
            written.contains(name),
            "{name} is not written by the function: {written:?}"
        );
    }
}

/// The runbook (docs/operations.md) has a row for every alarm of the
/// template, by its logical id (what the alarm's name and notification
/// carry).
#[test]
fn the_runbook_covers_every_alarm() {
    let template = template();
    let operations =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
            .expect("read docs/operations.md");
    let runbook = operations
        .split("### Runbook")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("a Runbook section");
    let resources = template["Resources"].as_mapping().expect("resources");
    let alarms: Vec<&str> = resources
        .iter()
        .filter(|(_, resource)| resource["Type"] == "AWS::CloudWatch::Alarm")
        .filter_map(|(id, _)| id.as_str())
        .collect();
    assert!(alarms.len() >= 12, "{alarms:?}");
    for alarm in alarms {
        assert!(
            runbook.contains(&format!("| `{alarm}`")),
            "the runbook has no row for {alarm}"
        );
    }
}
