//! template.yaml and the code must agree: the table the code writes, its TTL
//! attribute, and the environment variables the function reads.

use crate::support;

use std::collections::BTreeSet;

use exactly_once::lambda as settings;

use exactly_once::store::attr;
use serde_norway::Value;

const TEMPLATE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/template.yaml");

/// template.yaml with the pieces of sam/ it references merged in: what
/// CloudFormation runs, and what every test below reads.
fn template() -> Value {
    support::sam::composed(std::path::Path::new(TEMPLATE))
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
        .chain(exactly_once::dynamodb::settings::ENV_VARS)
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
/// (which `cargo test` compiles), line for line, its hidden lines (the
/// `Payment` and `PaymentApi` it uses) included: the crate's docs and the
/// manual show one handler. (docs/handlers.md is compiled as a doctest too,
/// and the README's quick start is built and run by infra/quickstart.sh.)
#[test]
fn the_readme_handler_snippet_is_the_compiled_doctest() {
    let handlers = include_str!("../../docs/handlers.md");
    let section = &handlers[handlers.find("## Writing a handler").expect("the section")..];
    let start = section.find("```rust\n").expect("a rust block") + "```rust\n".len();
    let snippet: Vec<&str> = section[start..]
        .lines()
        .take_while(|line| *line != "```")
        .collect();
    let source = include_str!("../../src/prelude.rs");
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
        .collect();
    assert_eq!(snippet, doctest);
}

/// The crate docs (`cargo doc`, docs.rs) open with the README's quick
/// start, block for block: what a newcomer reads in either place builds
/// (the README's is built outside the repository by infra/quickstart.sh,
/// the docs' is a doctest).
#[test]
fn the_crate_docs_open_with_the_readme_quick_start() {
    let readme = include_str!("../../README.md");
    let section = readme
        .split("\n## Your own handler\n")
        .nth(1)
        .and_then(|rest| rest.split("\n## ").next())
        .expect("the README's quick start");
    let docs: String = include_str!("../../src/lib.rs")
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
    let text: String = [
        "template.yaml",
        "sam/exactly-once.yaml",
        "sam/function-wiring.yaml",
    ]
    .iter()
    .map(|file| {
        std::fs::read_to_string(format!("{}/{file}", env!("CARGO_MANIFEST_DIR")))
            .expect("read a template")
    })
    .collect();
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

/// One statement of `FunctionRole`'s inline policy, as docs/iam.md lists it.
#[derive(Debug, PartialEq)]
struct Statement {
    /// The template condition the statement exists under (`!If`), if any.
    condition: Option<String>,
    actions: BTreeSet<String>,
    /// The parameters and resources its `Resource` names (`!Ref`,
    /// `!GetAtt`, `${...}` of `!Sub`), or `*`.
    resources: BTreeSet<String>,
    /// The operators and keys of its `Condition` block.
    condition_keys: BTreeSet<String>,
}

/// A tagged YAML value (`!If [...]`) with its tag, if `value` is one.
fn tag_of(value: &Value) -> Option<(&str, &Value)> {
    match value {
        Value::Tagged(tagged) => {
            let tag = tagged.tag.to_string();
            let tag = tag.trim_start_matches('!');
            ["If", "Ref", "GetAtt", "Sub", "Join", "Select", "Split"]
                .into_iter()
                .find(|known| *known == tag)
                .map(|known| (known, &tagged.value))
        }
        _ => None,
    }
}

/// The names a `${...}` of `!Sub` text refers to (the resource of
/// `${X.Arn}`), but the pseudo parameters (`AWS::...`).
fn sub_names(text: &str, out: &mut BTreeSet<String>) {
    for part in text.split("${").skip(1) {
        let name = part.split('}').next().unwrap_or("");
        let name = name.split('.').next().unwrap_or(name);
        if !name.is_empty() && !name.starts_with("AWS::") {
            out.insert(name.to_owned());
        }
    }
}

/// What a `Resource` value names: parameters and logical ids, or `*`.
fn resource_names(value: &Value, out: &mut BTreeSet<String>) {
    match (tag_of(value), value) {
        // A parameter or a resource, not a pseudo parameter (`AWS::NoValue`,
        // which falls through to nothing below).
        (Some(("Ref", Value::String(name))), _) if !name.starts_with("AWS::") => {
            out.insert(name.clone());
        }
        (Some(("GetAtt", Value::String(path))), _) => {
            out.insert(path.split('.').next().unwrap_or(path).to_owned());
        }
        (Some(("Sub", Value::String(text))), _) => sub_names(text, out),
        (Some(("Sub", Value::Sequence(parts))), _) => {
            let mut names = BTreeSet::new();
            sub_names(parts[0].as_str().expect("the !Sub text"), &mut names);
            let variables = parts[1].as_mapping().expect("the !Sub variables");
            names.retain(|name| !variables.contains_key(name.as_str()));
            out.extend(names);
            for value in variables.values() {
                resource_names(value, out);
            }
        }
        // The branches, not the condition's name.
        (Some(("If", Value::Sequence(parts))), _) => {
            for branch in &parts[1..] {
                resource_names(branch, out);
            }
        }
        (Some((_, inner)), _) => resource_names(inner, out),
        (None, Value::Sequence(items)) => items.iter().for_each(|item| resource_names(item, out)),
        (None, Value::String(text)) if text == "*" => {
            out.insert("*".to_owned());
        }
        _ => {}
    }
}

/// `FunctionRole`'s inline statements by `Sid`, each possibly wrapped in
/// `!If [Condition, {...}, !Ref AWS::NoValue]`.
fn role_statements() -> std::collections::BTreeMap<String, Statement> {
    let template = template();
    let policies = resource(&template, "FunctionRole")["Policies"]
        .as_sequence()
        .expect("inline policies");
    assert_eq!(policies.len(), 1, "one inline policy");
    let mut statements = std::collections::BTreeMap::new();
    for item in policies[0]["PolicyDocument"]["Statement"]
        .as_sequence()
        .expect("statements")
    {
        let (condition, statement) = match tag_of(item) {
            Some(("If", Value::Sequence(parts))) => (
                Some(parts[0].as_str().expect("a condition").to_owned()),
                &parts[1],
            ),
            _ => (None, item),
        };
        let sid = statement["Sid"]
            .as_str()
            .unwrap_or_else(|| panic!("a statement without Sid: {statement:?}"))
            .to_owned();
        assert_eq!(statement["Effect"].as_str(), Some("Allow"), "{sid}");
        let actions = match &statement["Action"] {
            Value::String(action) => BTreeSet::from([action.clone()]),
            Value::Sequence(actions) => actions
                .iter()
                .map(|a| a.as_str().expect("an action").to_owned())
                .collect(),
            other => panic!("{sid}: Action {other:?}"),
        };
        let mut resources = BTreeSet::new();
        resource_names(&statement["Resource"], &mut resources);
        assert!(!resources.is_empty(), "{sid}: a resource");
        let mut condition_keys = BTreeSet::new();
        let blocks = match untagged(&statement["Condition"]) {
            Value::Mapping(block) => vec![Value::Mapping(block)],
            // !If [HasKeyPrefix, {...}, !Ref AWS::NoValue]
            Value::Sequence(branches) => branches,
            _ => vec![],
        };
        for block in blocks.iter().filter_map(Value::as_mapping) {
            for (operator, keys) in block {
                condition_keys.insert(operator.as_str().expect("an operator").to_owned());
                for key in keys.as_mapping().expect("condition keys").keys() {
                    condition_keys.insert(key.as_str().expect("a key").to_owned());
                }
            }
        }
        let previous = statements.insert(
            sid.clone(),
            Statement {
                condition,
                actions,
                resources,
                condition_keys,
            },
        );
        assert!(previous.is_none(), "two statements {sid}");
    }
    statements
}

/// The rows of the Markdown table under `heading` in `page` (up to the
/// next heading), each as its cells.
fn table_rows(page: &str, heading: &str) -> Vec<Vec<String>> {
    let section = page
        .split(&format!("\n{heading}\n"))
        .nth(1)
        .unwrap_or_else(|| panic!("a section {heading}"))
        .split("\n#")
        .next()
        .expect("its text");
    section
        .lines()
        .skip_while(|line| !line.starts_with('|'))
        .take_while(|line| line.starts_with('|'))
        .skip(2) // the header and its rule
        .map(|line| {
            line.trim_matches('|')
                .split(" | ")
                .map(|cell| cell.trim().to_owned())
                .collect()
        })
        .collect()
}

/// The code spans of a Markdown cell: `a`, `b` in "`a` and `b`".
fn code_spans(cell: &str) -> BTreeSet<String> {
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

fn iam_page() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/iam.md"))
        .expect("read docs/iam.md")
}

/// docs/iam.md lists every statement of the function's role with exactly
/// the actions template.yaml grants, the condition it exists under, what
/// it is on and its condition keys: an action added to one and not the
/// other fails, either way.
#[test]
fn the_permissions_page_lists_exactly_the_roles_statements() {
    let granted = role_statements();
    assert!(granted.len() >= 18, "{:?}", granted.keys());
    let page = iam_page();
    let rows = table_rows(&page, "### Statements");
    let mut listed = BTreeSet::new();
    for row in &rows {
        assert_eq!(row.len(), 5, "a row of 5 cells: {row:?}");
        let sid = code_spans(&row[0]).into_iter().next().expect("a `Sid`");
        let Some(statement) = granted.get(&sid) else {
            panic!("docs/iam.md lists {sid}, which FunctionRole does not have");
        };
        assert!(listed.insert(sid.clone()), "{sid} listed twice");
        let actions: BTreeSet<String> = code_spans(&row[2]);
        assert_eq!(
            actions, statement.actions,
            "{sid}: the actions docs/iam.md lists (left) are not those template.yaml grants (right)"
        );
        match &statement.condition {
            Some(condition) => assert!(
                code_spans(&row[1]).contains(condition),
                "{sid} exists only with {condition}: docs/iam.md says {:?}",
                row[1]
            ),
            None => assert_eq!(row[1], "always", "{sid} exists always"),
        }
        let on = code_spans(&row[3]);
        for name in &statement.resources {
            assert!(
                on.contains(name),
                "{sid} is on {name}: docs/iam.md says {:?}",
                row[3]
            );
        }
        for key in &statement.condition_keys {
            assert!(
                on.contains(key),
                "{sid}'s condition uses {key}: docs/iam.md says {:?}",
                row[3]
            );
        }
    }
    let granted: BTreeSet<String> = granted.into_keys().collect();
    assert_eq!(
        listed, granted,
        "the statements docs/iam.md lists (left) and those of FunctionRole (right)"
    );
}

/// The managed policies of the function's role, with the condition each is
/// attached under, are those docs/iam.md lists.
#[test]
fn the_permissions_page_lists_exactly_the_roles_managed_policies() {
    let template = template();
    let mut attached = std::collections::BTreeMap::new();
    for item in resource(&template, "FunctionRole")["ManagedPolicyArns"]
        .as_sequence()
        .expect("managed policies")
    {
        let (condition, arn) = match tag_of(item) {
            Some(("If", Value::Sequence(parts))) => {
                (parts[0].as_str().map(str::to_owned), untagged(&parts[1]))
            }
            _ => (None, untagged(item)),
        };
        let arn = arn.as_str().expect("a policy ARN").to_owned();
        let name = arn.rsplit('/').next().expect("a policy name").to_owned();
        attached.insert(name, condition);
    }
    assert!(attached.len() >= 4, "{attached:?}");
    let page = iam_page();
    let mut listed = std::collections::BTreeMap::new();
    for row in table_rows(&page, "### Managed policies") {
        let name = code_spans(&row[0])
            .into_iter()
            .next()
            .expect("a policy name");
        let condition = (row[1] != "always").then(|| {
            code_spans(&row[1])
                .into_iter()
                .find(|span| attached.get(&name).and_then(Option::as_ref) == Some(span))
                .unwrap_or_else(|| row[1].clone())
        });
        listed.insert(name, condition);
    }
    assert_eq!(
        listed, attached,
        "the managed policies docs/iam.md lists (left) and those of FunctionRole (right)"
    );
}

/// Each event source the template offers (`EventSource`): its name (the
/// library's, as `EVENT_SOURCES` takes it), its event source mappings, the
/// parameters the Rules require for it, and the role statements it alone
/// gets.
struct Offered {
    source: &'static str,
    mappings: &'static [&'static str],
    required: &'static [&'static str],
    statements: &'static [&'static str],
}

const OFFERED: [Offered; 6] = [
    Offered {
        source: "kafka",
        mappings: &["FunctionKafka", "SelfManagedEventSourceMapping"],
        required: &[
            "TopicName",
            "ConsumerGroupId",
            "ClusterArn",
            "BootstrapServers",
        ],
        statements: &[
            "KafkaCluster",
            "KafkaTopic",
            "KafkaGroup",
            "KafkaSecrets",
            "KafkaVpc",
        ],
    },
    Offered {
        source: "sqs",
        mappings: &["SqsEventSourceMapping"],
        required: &["SqsQueueArn"],
        statements: &["SqsQueue"],
    },
    Offered {
        source: "kinesis",
        mappings: &["KinesisEventSourceMapping"],
        required: &["KinesisStreamArn"],
        statements: &["KinesisStream"],
    },
    Offered {
        source: "dynamodb-streams",
        mappings: &["DynamoDbStreamsEventSourceMapping"],
        required: &["DynamoDbStreamArn"],
        statements: &["DynamoDbStream"],
    },
    Offered {
        source: "rabbitmq",
        mappings: &["RabbitMqEventSourceMapping"],
        required: &["MqBrokerArn", "MqQueueName", "MqSecretArn"],
        statements: MQ_STATEMENTS,
    },
    Offered {
        source: "activemq",
        mappings: &["ActiveMqEventSourceMapping"],
        required: &["MqBrokerArn", "MqQueueName", "MqSecretArn"],
        statements: MQ_STATEMENTS,
    },
];

/// The role statements of an Amazon MQ mapping, either engine's.
const MQ_STATEMENTS: &[&str] = &["MqBroker", "MqSecret", "MqNetworkInterfaces", "MqVpc"];

/// The sources whose mappings have no partial batch response, as the
/// library has it (Amazon MQ's): a failed invocation hands the whole batch
/// back to the broker.
fn retries_whole_batches(source: &str) -> bool {
    !settings::Source::parse(source)
        .unwrap_or_else(|e| panic!("{e}"))
        .has_partial_batch_response()
}

/// The sources whose mappings have no retries, bisection or on-failure
/// destination of their own: SQS (the queue's redrive policy) and Amazon
/// MQ (the broker's redelivery limit and dead-letter queue).
fn without_on_failure_destination(source: &str) -> bool {
    source == "sqs" || retries_whole_batches(source)
}

/// Any tagged value (`!Equals [...]`) as its tag's name and its value.
fn tagged(value: &Value) -> Option<(String, &Value)> {
    match value {
        Value::Tagged(tagged) => Some((
            tagged.tag.to_string().trim_start_matches('!').to_owned(),
            &tagged.value,
        )),
        _ => None,
    }
}

/// The `EventSource` values under which `condition` (a template condition
/// or one of its parts) can hold; `None`: any (it does not depend on
/// `EventSource`).
fn sources_of(template: &Value, condition: &Value) -> Option<BTreeSet<String>> {
    let all = || -> BTreeSet<String> {
        template["Parameters"]["EventSource"]["AllowedValues"]
            .as_sequence()
            .expect("EventSource's values")
            .iter()
            .map(|v| v.as_str().expect("a value").to_owned())
            .collect()
    };
    // `!Equals [!Ref EventSource, X]`: X.
    let equals = |parts: &Value| -> Option<String> {
        let parts = parts.as_sequence()?;
        match (tagged(&parts[0]), parts[1].as_str()) {
            (Some((tag, Value::String(name))), Some(value))
                if tag == "Ref" && name == "EventSource" =>
            {
                Some(value.to_owned())
            }
            _ => None,
        }
    };
    let (tag, inner) = tagged(condition)?;
    match tag.as_str() {
        "Condition" => {
            let name = inner.as_str().expect("a condition's name");
            let next = &template["Conditions"][name];
            assert!(!next.is_null(), "no condition {name}");
            sources_of(template, next)
        }
        "Equals" => equals(inner).map(|value| BTreeSet::from([value])),
        "Not" => {
            let (tag, parts) = tagged(&inner.as_sequence()?[0])?;
            let value = (tag == "Equals").then(|| equals(parts)).flatten()?;
            Some(all().into_iter().filter(|v| *v != value).collect())
        }
        "And" => inner
            .as_sequence()?
            .iter()
            .filter_map(|part| sources_of(template, part))
            .reduce(|a, b| a.intersection(&b).cloned().collect()),
        "Or" => inner
            .as_sequence()?
            .iter()
            .map(|part| sources_of(template, part))
            .collect::<Option<Vec<_>>>()
            .map(|sets| sets.into_iter().flatten().collect()),
        _ => None,
    }
}

/// The `EventSource` values under which the template condition `name` holds.
fn sources_of_condition(template: &Value, name: &str) -> Option<BTreeSet<String>> {
    sources_of(
        template,
        &Value::Tagged(Box::new(serde_norway::value::TaggedValue {
            tag: serde_norway::value::Tag::new("Condition"),
            value: Value::String(name.to_owned()),
        })),
    )
}

/// `EventSource` offers exactly the library's sources, Kafka first and by
/// default (the stack as before: an MSK trigger); each has its event source
/// mapping, which exists only with it and answers with partial batch
/// responses where the source has them (`ReportBatchItemFailures`: the
/// function reports the records that did not finish, and Lambda delivers
/// only those again; Amazon MQ has none); the Rules refuse a stack whose
/// chosen source misses its queue, stream, topic or broker.
#[test]
fn each_source_has_its_mapping_with_partial_batch_responses_where_it_has_them() {
    let template = template();
    let parameter = &template["Parameters"]["EventSource"];
    let offered: Vec<&str> = parameter["AllowedValues"]
        .as_sequence()
        .expect("EventSource's values")
        .iter()
        .map(|v| v.as_str().expect("a value"))
        .collect();
    let library: Vec<&str> = settings::Source::ALL.iter().map(|s| s.name()).collect();
    assert_eq!(
        offered, library,
        "EventSource's values are the library's sources"
    );
    assert_eq!(parameter["Default"].as_str(), Some("kafka"));
    assert_eq!(
        OFFERED.iter().map(|o| o.source).collect::<Vec<_>>(),
        library
    );

    let resources = template["Resources"].as_mapping().expect("resources");
    let mappings: BTreeSet<&str> = resources
        .iter()
        .filter(|(_, r)| r["Type"] == "AWS::Lambda::EventSourceMapping")
        .filter_map(|(id, _)| id.as_str())
        .collect();
    let listed: BTreeSet<&str> = OFFERED
        .iter()
        .flat_map(|o| o.mappings.iter().copied())
        .collect();
    assert_eq!(
        mappings, listed,
        "the template's mappings (left), those listed here (right)"
    );

    for offered in &OFFERED {
        for id in offered.mappings {
            let mapping = &template["Resources"][*id];
            let condition = mapping["Condition"]
                .as_str()
                .unwrap_or_else(|| panic!("{id} exists only with its source"));
            assert_eq!(
                sources_of_condition(&template, condition),
                Some(BTreeSet::from([offered.source.to_owned()])),
                "{id} exists only with EventSource {}",
                offered.source
            );
            let properties = untagged(&mapping["Properties"]);
            assert_eq!(
                properties["FunctionName"].as_str(),
                Some("Function"),
                "{id}"
            );
            if retries_whole_batches(offered.source) {
                assert!(
                    properties["FunctionResponseTypes"].is_null(),
                    "{id}: Amazon MQ has no partial batch response"
                );
            } else {
                assert_eq!(
                    properties["FunctionResponseTypes"],
                    serde_norway::from_str::<Value>("[ReportBatchItemFailures]").unwrap(),
                    "{id} answers with partial batch responses"
                );
            }
            // Retries, bisection and an on-failure destination where the
            // source has them; an SQS mapping takes none (the queue's
            // redrive policy counts receives instead), nor an Amazon MQ one
            // (the broker's redelivery limit).
            let retries = [
                "MaximumRetryAttempts",
                "BisectBatchOnFunctionError",
                "DestinationConfig",
            ];
            for property in retries {
                assert_eq!(
                    properties[property].is_null(),
                    without_on_failure_destination(offered.source),
                    "{id}: {property}"
                );
            }
            if !without_on_failure_destination(offered.source) {
                assert_eq!(
                    properties["BisectBatchOnFunctionError"].as_bool(),
                    Some(true),
                    "{id}"
                );
            }
        }
        // The Rules refuse the source without its queue, stream, topic or
        // broker: a rule for it (or for it and the other sources that need
        // the same parameter, as both Amazon MQ engines need a broker).
        for required in offered.required {
            let needing: BTreeSet<String> = OFFERED
                .iter()
                .filter(|other| other.required.contains(required))
                .map(|other| other.source.to_owned())
                .collect();
            let refused = template["Rules"]
                .as_mapping()
                .expect("rules")
                .values()
                .filter(|rule| {
                    sources_of(&template, &rule["RuleCondition"]).is_some_and(|sources| {
                        sources.contains(offered.source) && sources.is_subset(&needing)
                    })
                })
                .flat_map(|rule| rule["Assertions"].as_sequence().expect("assertions"))
                .any(|assertion| {
                    untagged(&assertion["Assert"])
                        == serde_norway::from_str::<Value>(&format!("[[{required}, \"\"]]"))
                            .unwrap()
                });
            assert!(
                refused,
                "no rule refuses EventSource {} without {required}",
                offered.source
            );
        }
    }
}

/// The function serves the source its mapping delivers and refuses any
/// other (`EVENT_SOURCES`): the variable is `EventSource` itself, whose
/// values are the library's names, and each mapping exists only under its
/// own value (above).
#[test]
fn the_function_serves_exactly_the_source_of_its_mapping() {
    let template = template();
    let variable = &resource(&template, "Function")["Environment"]["Variables"]["EVENT_SOURCES"];
    match tagged(variable) {
        Some((tag, Value::String(name))) if tag == "Ref" => assert_eq!(name, "EventSource"),
        _ => panic!("EVENT_SOURCES is {variable:?}, not !Ref EventSource"),
    }
    for offered in &OFFERED {
        let parsed = settings::Source::parse(offered.source)
            .unwrap_or_else(|e| panic!("EVENT_SOURCES={}: {e}", offered.source));
        assert_eq!(parsed.name(), offered.source);
    }
}

/// Each source's role statements exist only when it is the stack's source
/// (or, for a statement both Amazon MQ engines need, one of them; its
/// queue, stream or broker named, never `*` but for the Describe actions of
/// the network interfaces), and with SQS and Amazon MQ, whose mappings have
/// no on-failure destination, the destinations' statements do not exist.
#[test]
fn each_sources_role_statements_exist_only_with_it() {
    let template = template();
    let statements = role_statements();
    let only = |source: &str| Some(BTreeSet::from([source.to_owned()]));
    for offered in &OFFERED {
        for sid in offered.statements {
            let statement = statements
                .get(*sid)
                .unwrap_or_else(|| panic!("FunctionRole has no statement {sid}"));
            let condition = statement
                .condition
                .as_deref()
                .unwrap_or_else(|| panic!("{sid} exists always"));
            let sharing: BTreeSet<String> = OFFERED
                .iter()
                .filter(|other| other.statements.contains(sid))
                .map(|other| other.source.to_owned())
                .collect();
            assert_eq!(
                sources_of_condition(&template, condition),
                Some(sharing.clone()),
                "{sid} exists only with EventSource {sharing:?} (its condition {condition})"
            );
            assert!(
                !statement.resources.contains("*") || ["KafkaVpc", "MqVpc"].contains(sid),
                "{sid} on *"
            );
        }
        if offered.source != "kafka" {
            let sid = offered.statements[0];
            assert_eq!(
                statements[sid].resources,
                BTreeSet::from([offered.required[0].to_owned()]),
                "{sid} is on {}",
                offered.required[0]
            );
        }
    }
    // No other statement grants a source's reading actions.
    let owned: BTreeSet<&str> = OFFERED
        .iter()
        .flat_map(|o| o.statements.iter().copied())
        .collect();
    for (sid, statement) in &statements {
        let reads = statement.actions.iter().any(|action| {
            // Writing a stream (a handler's destination) reads nothing.
            (action.starts_with("kinesis:") && !action.starts_with("kinesis:Put"))
                || action.starts_with("mq:")
                || matches!(
                    action.as_str(),
                    "sqs:ReceiveMessage"
                        | "sqs:DeleteMessage"
                        | "dynamodb:GetRecords"
                        | "dynamodb:GetShardIterator"
                        | "kafka-cluster:ReadData"
                        | "ec2:CreateNetworkInterface"
                )
        });
        assert!(
            !reads || owned.contains(sid.as_str()),
            "{sid} reads a source"
        );
    }
    for sid in ["DeadLetterQueue", "FailedRecordsBucket", "FailureTopic"] {
        let condition = statements[sid].condition.as_deref().expect("a condition");
        let sources = sources_of_condition(&template, condition).expect("source-dependent");
        for source in sources {
            assert!(
                !without_on_failure_destination(&source),
                "{sid} exists with EventSource {source}, whose mapping has no on-failure destination"
            );
        }
    }
    // The MSK mapping's managed policy, with MSK only.
    let managed = resource(&template, "FunctionRole")["ManagedPolicyArns"]
        .as_sequence()
        .expect("managed policies");
    let msk = managed
        .iter()
        .find_map(|item| match tagged(item) {
            Some((tag, Value::Sequence(parts))) if tag == "If" => {
                let arn = untagged(&parts[1]);
                arn.as_str()
                    .is_some_and(|a| a.ends_with("AWSLambdaMSKExecutionRole"))
                    .then(|| parts[0].as_str().expect("a condition").to_owned())
            }
            _ => None,
        })
        .expect("AWSLambdaMSKExecutionRole under a condition");
    assert_eq!(sources_of_condition(&template, &msk), only("kafka"));
}

/// The Amazon MQ mappings (RabbitMQ, ActiveMQ) as Lambda takes them: the
/// broker and its one queue, exactly one `BASIC_AUTH` secret, a virtual host
/// on RabbitMQ only (and only when set), no partial batch response, no
/// retries, bisection, on-failure destination or starting position (the
/// broker redelivers a failed batch whole); the role gets exactly the
/// actions of `AWSLambdaMQExecutionRole`, each on the least IAM allows, and
/// not that managed policy; the queue's depth is alarmed on.
#[test]
fn the_amazon_mq_mappings_hand_failed_batches_back_to_the_broker() {
    let template = template();
    for (id, source, virtual_host) in [
        ("RabbitMqEventSourceMapping", "rabbitmq", true),
        ("ActiveMqEventSourceMapping", "activemq", false),
    ] {
        let mapping = &template["Resources"][id];
        let condition = mapping["Condition"].as_str().expect("a condition");
        assert_eq!(
            sources_of_condition(&template, condition),
            Some(BTreeSet::from([source.to_owned()])),
            "{id}"
        );
        let properties = untagged(&mapping["Properties"]);
        assert_eq!(
            properties["EventSourceArn"].as_str(),
            Some("MqBrokerArn"),
            "{id}"
        );
        assert_eq!(
            properties["Queues"],
            serde_norway::from_str::<Value>("[MqQueueName]").unwrap(),
            "{id}: one queue"
        );
        assert_eq!(properties["BatchSize"].as_str(), Some("BatchSize"), "{id}");
        assert_eq!(
            properties["MaximumBatchingWindowInSeconds"].as_str(),
            Some("MaximumBatchingWindowInSeconds"),
            "{id}"
        );
        for absent in [
            "FunctionResponseTypes",
            "MaximumRetryAttempts",
            "MaximumRecordAgeInSeconds",
            "BisectBatchOnFunctionError",
            "DestinationConfig",
            "StartingPosition",
            "ParallelizationFactor",
            "ScalingConfig",
            "ProvisionedPollerConfig",
            "Topics",
        ] {
            assert!(properties[absent].is_null(), "{id}: {absent}");
        }
        // Each access configuration, possibly under `!If [c, {...}, NoValue]`,
        // with the condition it exists under.
        let mut accesses = Vec::new();
        for item in mapping["Properties"]["SourceAccessConfigurations"]
            .as_sequence()
            .expect("SourceAccessConfigurations")
        {
            match tagged(item) {
                Some((tag, Value::Sequence(parts))) if tag == "If" => {
                    accesses.push((parts[0].as_str().map(str::to_owned), untagged(&parts[1])));
                }
                _ => accesses.push((None, untagged(item))),
            }
        }
        let of_type = |kind: &str| -> Vec<(Option<String>, String)> {
            accesses
                .iter()
                .filter(|(_, access)| access["Type"] == kind)
                .map(|(condition, access)| {
                    (
                        condition.clone(),
                        access["URI"].as_str().expect("a URI").to_owned(),
                    )
                })
                .collect()
        };
        assert_eq!(
            of_type("BASIC_AUTH"),
            vec![(None, "MqSecretArn".to_owned())],
            "{id}: exactly one BASIC_AUTH, the broker user's secret"
        );
        let hosts = of_type("VIRTUAL_HOST");
        if virtual_host {
            assert_eq!(hosts.len(), 1, "{id}: at most one VIRTUAL_HOST");
            let (condition, uri) = &hosts[0];
            assert_eq!(uri, "MqVirtualHost", "{id}");
            let condition = condition.as_deref().expect("VIRTUAL_HOST only when set");
            assert_eq!(
                sources_of_condition(&template, condition),
                Some(BTreeSet::from([source.to_owned()])),
                "{id}: VIRTUAL_HOST under {condition}"
            );
        } else {
            assert!(hosts.is_empty(), "{id}: ActiveMQ has no virtual host");
        }
        assert_eq!(accesses.len(), 1 + hosts.len(), "{id}: {accesses:?}");
    }

    // The role: the actions of AWSLambdaMQExecutionRole (but its logs,
    // which AWSLambdaBasicExecutionRole grants), each on the least IAM
    // allows.
    let statements = role_statements();
    let expected: [(&str, &[&str], &[&str]); 4] = [
        ("MqBroker", &["mq:DescribeBroker"], &["MqBrokerArn"]),
        (
            "MqSecret",
            &["secretsmanager:GetSecretValue"],
            &["MqSecretArn"],
        ),
        (
            "MqNetworkInterfaces",
            &["ec2:CreateNetworkInterface", "ec2:DeleteNetworkInterface"],
            &["MqBrokerArn"],
        ),
        (
            "MqVpc",
            &[
                "ec2:DescribeNetworkInterfaces",
                "ec2:DescribeSecurityGroups",
                "ec2:DescribeSubnets",
                "ec2:DescribeVpcs",
            ],
            &["*"],
        ),
    ];
    let mut granted = BTreeSet::new();
    for (sid, actions, on) in expected {
        let statement = &statements[sid];
        assert_eq!(
            statement.actions,
            actions.iter().map(|a| (*a).to_owned()).collect(),
            "{sid}'s actions"
        );
        assert_eq!(
            statement.resources,
            on.iter().map(|r| (*r).to_owned()).collect(),
            "{sid}'s resources"
        );
        assert!(statement.condition_keys.is_empty(), "{sid}");
        granted.extend(statement.actions.iter().cloned());
    }
    assert_eq!(
        granted,
        BTreeSet::from(
            [
                "mq:DescribeBroker",
                "secretsmanager:GetSecretValue",
                "ec2:CreateNetworkInterface",
                "ec2:DeleteNetworkInterface",
                "ec2:DescribeNetworkInterfaces",
                "ec2:DescribeSecurityGroups",
                "ec2:DescribeSubnets",
                "ec2:DescribeVpcs",
            ]
            .map(str::to_owned)
        ),
        "the actions of AWSLambdaMQExecutionRole"
    );
    // The interfaces: EC2 resources of the broker's region and account,
    // both read from MqBrokerArn.
    let interfaces =
        resource(&template, "FunctionRole")["Policies"][0]["PolicyDocument"]["Statement"]
            .as_sequence()
            .expect("statements")
            .iter()
            .map(untagged)
            .find_map(|item| {
                item.as_sequence()
                    .and_then(|parts| parts.get(1).cloned())
                    .filter(|statement| statement["Sid"] == "MqNetworkInterfaces")
            })
            .expect("MqNetworkInterfaces");
    let arn = interfaces["Resource"][0].as_str().expect("a !Sub text");
    assert_eq!(arn, "arn:${AWS::Partition}:ec2:${Region}:${Account}:*");
    let managed = format!(
        "{:?}",
        resource(&template, "FunctionRole")["ManagedPolicyArns"]
    );
    assert!(
        !managed.contains("AWSLambdaMQExecutionRole"),
        "the managed policy grants every action on *: {managed}"
    );

    // The alarm: the broker's metrics of the queue, with either engine.
    let alarm = &template["Resources"]["MqQueueDepthAlarm"];
    assert_eq!(
        sources_of_condition(&template, alarm["Condition"].as_str().expect("a condition")),
        Some(BTreeSet::from([
            "rabbitmq".to_owned(),
            "activemq".to_owned()
        ]))
    );
    let metrics = format!("{:?}", untagged(&alarm["Properties"]["Metrics"]));
    for part in [
        "AWS/AmazonMQ",
        "MessageReadyCount",
        "QueueSize",
        "MqQueueName",
    ] {
        assert!(metrics.contains(part), "MqQueueDepthAlarm: {part}");
    }
    // No on-failure destination, hence no dead-letter queue, with Amazon MQ.
    let queue = template["Resources"]["DeadLetterQueue"]["Condition"]
        .as_str()
        .expect("a condition");
    let sources = sources_of_condition(&template, queue).expect("source-dependent");
    assert!(!sources.contains("rabbitmq") && !sources.contains("activemq"));
}

/// Every value `value` (a variable of the function's environment) can take
/// as the template is deployed: a literal; a parameter's allowed values
/// (or its default); either branch of an `!If`; a resource's name or an
/// attribute (some non-empty text).
fn possible_values(template: &Value, value: &Value) -> Vec<String> {
    match tagged(value) {
        Some((tag, inner)) if tag == "If" => inner
            .as_sequence()
            .expect("!If [condition, then, else]")
            .iter()
            .skip(1)
            .flat_map(|branch| possible_values(template, branch))
            .collect(),
        Some((tag, inner)) if tag == "Ref" => {
            let name = inner.as_str().expect("!Ref NAME");
            let parameter = &template["Parameters"][name];
            match (
                parameter["AllowedValues"].as_sequence(),
                &parameter["Default"],
            ) {
                (Some(allowed), _) => allowed.iter().map(scalar).collect(),
                (None, Value::Null) => vec![format!("<{name}>")],
                (None, default) => vec![scalar(default)],
            }
        }
        Some((tag, _)) => vec![format!("<{tag}>")],
        None => vec![scalar(value)],
    }
}

fn scalar(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Number(number) => number.to_string(),
        Value::Bool(flag) => flag.to_string(),
        other => panic!("not a scalar: {other:?}"),
    }
}

/// The features of `exactly-once` the shipped function (msk-handler) is
/// built with, as cargo resolves them (`cargo metadata`).
fn msk_handler_features() -> BTreeSet<String> {
    let output = std::process::Command::new(env!("CARGO"))
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata");
    assert!(output.status.success(), "cargo metadata failed");
    let metadata: serde_json::Value =
        serde_json::from_slice(&output.stdout).expect("cargo metadata is JSON");
    let packages = metadata["packages"].as_array().expect("packages");
    let package = |name: &str| {
        packages
            .iter()
            .find(|package| package["name"] == name)
            .unwrap_or_else(|| panic!("no package {name}"))
    };
    let facade = &package("exactly-once")["features"];
    let dependency = package("msk-handler")["dependencies"]
        .as_array()
        .expect("dependencies")
        .iter()
        .find(|dependency| dependency["name"] == "exactly-once")
        .expect("msk-handler depends on exactly-once");
    let mut asked: Vec<String> = dependency["features"]
        .as_array()
        .expect("features")
        .iter()
        .map(|feature| feature.as_str().expect("a name").to_owned())
        .collect();
    if dependency["uses_default_features"] == true {
        asked.push("default".to_owned());
    }
    // Each feature with the features it enables, transitively.
    let mut built = BTreeSet::new();
    while let Some(feature) = asked.pop() {
        if let Some(enables) = facade[&feature].as_array()
            && built.insert(feature)
        {
            asked.extend(enables.iter().filter_map(|f| f.as_str()).map(str::to_owned));
        }
    }
    built
}

/// No variable template.yaml sets, with any value its parameters allow,
/// asks for a part the function's build leaves out (it would stop the
/// function at start: `StartError::FeatureOff`). The generated project's
/// templates are held to theirs by infra/template-check.sh, which starts
/// each with its template's environment.
#[test]
fn every_part_the_template_can_ask_for_is_built_into_its_function() {
    let template = template();
    let variables = resource(&template, "Function")["Environment"]["Variables"]
        .as_mapping()
        .expect("environment variables");
    let built = msk_handler_features();
    let mut asked = BTreeSet::new();
    for (name, value) in variables {
        let name = name.as_str().expect("a name");
        for value in possible_values(&template, value) {
            let env = |variable: &str| (variable == name).then(|| value.clone());
            for uses in exactly_once::features::needed(env) {
                assert!(
                    built.contains(uses.feature),
                    "{name}={value} needs the `{}` feature, which msk-handler's build \
                     ({built:?}) leaves out",
                    uses.feature
                );
                asked.insert(uses.feature);
            }
        }
    }
    // The template offers every store, the shared cache, parked records and
    // OTLP spans: all asked for, so the check above saw each rule.
    assert_eq!(
        asked,
        BTreeSet::from(["dynamodb", "postgres", "redis", "sqs", "opentelemetry"])
    );
}

/// Each parameter of a piece of sam/ that template.yaml passes through is
/// defined as template.yaml defines it (type, default, allowed values,
/// description): one definition, checked, not two that drift.
#[test]
fn every_piece_parameter_is_defined_as_in_template_yaml() {
    let path = std::path::Path::new(TEMPLATE);
    let parent: Value = serde_norway::from_str(&std::fs::read_to_string(path).expect("read"))
        .expect("template.yaml is YAML");
    let mut compared = 0;
    for (id, piece) in support::sam::pieces(path) {
        for (name, definition) in piece["Parameters"].as_mapping().expect("parameters") {
            let Some(ours) = parent["Parameters"].get(name) else {
                continue; // a wired output (the function, the alarm topic, ...)
            };
            assert_eq!(ours, definition, "{id}'s {name:?} is not template.yaml's");
            compared += 1;
        }
    }
    assert!(
        compared >= 90,
        "the pieces take the parameters through: {compared}"
    );
}

/// A stack moving from a copied template to the pieces keeps its tables:
/// the composed template still names them `IdempotencyTable` and
/// `LedgerTable`, retained, with the key schema, TTL and indexes the code
/// reads (a changed key schema would make CloudFormation replace a table);
/// and existing tables can stand in for them (ExistingIdempotencyTable,
/// ExistingLedgerTable, docs/upgrading.md), in the role's statements and the
/// function's IDEMPOTENCY_TABLE.
#[test]
fn the_tables_keep_their_logical_ids_key_schemas_and_can_be_existing_ones() {
    let template = template();
    let table = &template["Resources"]["IdempotencyTable"];
    assert_eq!(table["Type"], "AWS::DynamoDB::Table");
    assert_eq!(table["DeletionPolicy"], "Retain");
    assert_eq!(table["UpdateReplacePolicy"], "Retain");
    let properties = &table["Properties"];
    let key: Value = serde_norway::from_str("[{AttributeName: pk, KeyType: HASH}]").unwrap();
    assert_eq!(properties["KeySchema"], key);
    assert_eq!(hash_key(properties), ("pk".to_owned(), "S".to_owned()));
    assert_eq!(
        properties["TimeToLiveSpecification"]["AttributeName"],
        attr::EXPIRES_AT
    );
    let indexes: BTreeSet<&str> = properties["GlobalSecondaryIndexes"]
        .as_sequence()
        .expect("indexes")
        .iter()
        .filter_map(|index| index["IndexName"].as_str())
        .collect();
    assert_eq!(indexes, BTreeSet::from(["started", "unsent"]));

    let creates = format!(
        "{:?}",
        template["Conditions"][table["Condition"].as_str().unwrap()]
    );
    assert!(creates.contains("ExistingIdempotencyTable"), "{creates}");
    let variables = &resource(&template, "Function")["Environment"]["Variables"];
    let mut named = BTreeSet::new();
    resource_names(&variables["IDEMPOTENCY_TABLE"], &mut named);
    assert!(named.contains("ExistingIdempotencyTable"), "{named:?}");
    for (sid, table) in [
        ("IdempotencyStore", "IdempotencyTable"),
        ("IdempotencyStartedIndex", "IdempotencyTable"),
        ("Ledger", "LedgerTable"),
    ] {
        let statement = &role_statements()[sid];
        let existing = format!("Existing{table}");
        assert!(
            statement.resources.contains(table) && statement.resources.contains(&existing),
            "{sid}: {:?}",
            statement.resources
        );
    }
    // The ledger (a copied template's business state) moves the same way.
    let ledger = &template["Resources"]["LedgerTable"];
    assert_eq!(ledger["DeletionPolicy"], "Retain");
    let key: Value =
        serde_norway::from_str("[{AttributeName: account_id, KeyType: HASH}]").unwrap();
    assert_eq!(ledger["Properties"]["KeySchema"], key);
    let creates = format!(
        "{:?}",
        template["Conditions"][ledger["Condition"].as_str().unwrap()]
    );
    assert!(creates.contains("ExistingLedgerTable"), "{creates}");
}

/// The pieces carry the version of the crate they ship in (what a team
/// upgrades is that version), and so does the CDK construct's package.
#[test]
fn the_pieces_and_the_construct_are_the_crates_version() {
    for (id, piece) in support::sam::pieces(std::path::Path::new(TEMPLATE)) {
        assert_eq!(
            piece["Metadata"]["ExactlyOnceVersion"].as_str(),
            Some(env!("CARGO_PKG_VERSION")),
            "{id}"
        );
    }
    let package = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/cdk/package.json"))
        .expect("read cdk/package.json");
    let package: serde_json::Value = serde_json::from_str(&package).expect("JSON");
    assert_eq!(package["version"], env!("CARGO_PKG_VERSION"));
}
