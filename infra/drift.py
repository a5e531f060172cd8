#!/usr/bin/env python3
"""One truth, no drift: the SAM template (template.yaml and sam/*.yaml,
evaluated by infra/cfn_eval.py) and the CDK construct (cdk/, its example
synthesized by infra/cdk-check.sh) must deploy the same thing.

    infra/cdk-check.sh /tmp/cdk-out          # <source>-<store>.json per configuration
    infra/drift.py /tmp/cdk-out [--only sqs-postgres ...] [--verbose]

For each configuration of cdk/example/configurations.json ({"<source>-<store>[-team]":
{"sam": {parameter: value}, ...}}: the SAM parameters that mean what the CDK
example builds for `-c source=... -c store=...`), template.yaml is evaluated
with its "sam" parameters and compared with <dir>/<source>-<store>.json on:
  (a) the multiset of resource types, but for IGNORED_TYPES;
  (b) the function's role: the actions allowed per kind of resource (table,
      table index, queue, bucket, topic, secret, kafka cluster/topic/group,
      stream, broker, ..., "*"), named by its literal ARN or by the resource's
      type and logical id (the CDK's without its construct path and hash),
      with the statement's condition keys; its managed policies, by name;
  (c) the event source mapping's settings (MAPPING_KEYS);
  (d) the alarms: (Namespace, MetricName, ComparisonOperator, Threshold,
      Statistic or ExtendedStatistic), and each alarm metric's Period,
      EvaluationPeriods and DatapointsToAlarm;
  (e) the function's environment: the variable names, and the values that
      are literal (a value from a resource is compared by its type); a
      configuration's "handler_variables" (a team's own tables and
      destinations, <source>-<store>-team) must be the construct's and not
      template.yaml's, whose function is the demo's.
Actions on a literal ARN are compared as IAM applies them: those of the
ARN's own service (SAM's HandlerDestinations grants every kind's sending
action on every destination; only each one's own applies).
Symbolic values (Ref, GetAtt, Join, Sub of resources) are written as
{Type Name} or {Type Name.Attr}, Name the logical id as logical() cuts it.
Prints a report per configuration; exits 1 on any difference, 2 on usage.
"""

import argparse
import collections
import json
import pathlib
import re
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import cfn_eval  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parent.parent
CONFIGURATIONS = ROOT / "cdk" / "example" / "configurations.json"

# Resource types that are one side's mechanics, not part of what is compared.
IGNORED_TYPES = {
    "AWS::CDK::Metadata": "the CDK's own analytics resource; SAM has none",
    "AWS::Lambda::Function": "the function is the user's on both sides (compared by its role and environment in (b), (e)); "
                             "the CDK adds its own provider functions for custom resources",
    "AWS::IAM::Policy": "the CDK puts a role's statements in a separate DefaultPolicy, SAM inline in the role; compared in (b)",
    "Custom::*": "custom resources the CDK adds (log retention, auto-delete, ...), with their provider's function",
    "AWS::CloudFormation::CustomResource": "the same, under the generic type",
}
MAPPING_KEYS = ("EventSourceArn", "FunctionResponseTypes", "BisectBatchOnFunctionError", "MaximumRetryAttempts",
                "MaximumRecordAgeInSeconds", "BatchSize", "MaximumBatchingWindowInSeconds", "StartingPosition",
                "StartingPositionTimestamp", "ParallelizationFactor", "ScalingConfig", "FilterCriteria",
                "DestinationConfig", "ProvisionedPollerConfig", "Topics", "Queues", "SourceAccessConfigurations",
                "AmazonManagedKafkaEventSourceConfig", "SelfManagedKafkaEventSourceConfig", "SelfManagedEventSource")
# A resource string (ARN, or what describe() makes of a symbolic one) -> its kind.
KINDS = [
    (r"/index/", "table index"),
    (r"^arn:aws:dynamodb:[^:]*:\d*:table/[^/]+/stream/", "dynamodb stream"),
    (r"AWS::DynamoDB::Table|^arn:aws:dynamodb:[^:]*:\d*:table/", "table"),
    (r"AWS::SQS::Queue|^arn:aws:sqs:", "queue"),
    (r"(AWS::S3::Bucket.*|^arn:aws:s3:::.*)/\*$", "bucket objects"),
    (r"AWS::S3::Bucket|^arn:aws:s3:", "bucket"),
    (r"AWS::SNS::Topic|^arn:aws:sns:", "topic"),
    (r"^arn:aws:secretsmanager:", "secret"),
    (r"^arn:aws:kafka:[^:]*:\d*:cluster/", "kafka cluster"),
    (r"^arn:aws:kafka:[^:]*:\d*:topic/|^kafka://", "kafka topic"),
    (r"^arn:aws:kafka:[^:]*:\d*:group/", "kafka group"),
    (r"^arn:aws:kinesis:", "stream"),
    (r"^arn:aws:events:[^:]*:\d*:event-bus/", "event bus"),
    (r"^arn:aws:mq:", "broker"),
    (r"^arn:aws:ec2:", "ec2"),
    (r"^arn:aws:rds-db:", "database user"),
    (r"^arn:aws:glue:", "schema registry"),
    (r"^\*$", "*"),
]


def logical(name):
    """A logical id without the CDK's construct path and hash: ExactlyOnceDeadLetterQueue5A31D2C9 -> DeadLetterQueue."""
    return re.sub(r"^ExactlyOnce(?=[A-Z])|[0-9A-F]{8}$", "", name)


def resource(name, resources, attr=""):
    """{Type Name} or {Type Name.Attr}; a table's ARN written with Sub as its GetAtt Arn."""
    return "{" + resources.get(name, {}).get("Type", "?") + " " + logical(name) + (attr and "." + attr) + "}"


def canonical(text):
    return re.sub(r"arn:aws:dynamodb:us-east-1:123456789012:table/(\{AWS::DynamoDB::Table \w+)\}", r"\1.Arn}", text)


def describe(value, resources):
    """A value as a string: literal parts as they are, resources as {Type Name} / {Type Name.Attr}."""
    return canonical(_describe(value, resources))


def _describe(value, resources):
    if isinstance(value, bool):
        return "true" if value else "false"
    if not isinstance(value, (dict, list)):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(describe(v, resources) for v in value) + "]"
    if set(value) == {"Ref"}:
        name = value["Ref"]
        return cfn_eval.PSEUDO.get(name) or resource(name, resources)
    if set(value) == {"Fn::GetAtt"}:
        name, attr = value["Fn::GetAtt"]
        return resource(name, resources, attr)
    if set(value) == {"Fn::Join"} and isinstance(value["Fn::Join"][1], list):
        return value["Fn::Join"][0].join(describe(v, resources) for v in value["Fn::Join"][1])
    if set(value) == {"Fn::Sub"}:
        text, local = (value["Fn::Sub"], {}) if isinstance(value["Fn::Sub"], str) else value["Fn::Sub"]

        def var(m):
            name = m.group(1)
            if name in local:
                return describe(local[name], resources)
            if "." in name and not name.startswith("AWS::"):
                return describe({"Fn::GetAtt": name.split(".", 1)}, resources)
            return describe({"Ref": name}, resources)
        return re.sub(r"\$\{([^}!][^}]*)\}", var, text)
    if set(value) == {"Fn::Select"}:
        index, items = value["Fn::Select"]
        if isinstance(items, dict) and set(items) == {"Fn::Split"}:
            text = describe(items["Fn::Split"][1], resources)
            if "{" not in text:
                return text.split(items["Fn::Split"][0])[int(index)]
    return "{" + json.dumps(value, sort_keys=True) + "}"


# The action prefixes IAM applies to a service's ARNs (MSK's data plane
# is kafka-cluster: on kafka ARNs).
ACTION_PREFIXES = {"kafka": ("kafka", "kafka-cluster")}


def effective(actions, resource_string):
    """The actions IAM can allow on a literal ARN: those of its own service
    (sqs:SendMessage on an SNS topic's ARN allows nothing). Others as they are."""
    service = re.match(r"^arn:aws[a-z-]*:([a-z0-9-]+):", resource_string)
    if not service:
        return set(actions)
    prefixes = ACTION_PREFIXES.get(service.group(1), (service.group(1),))
    return {a for a in actions if a == "*" or a.split(":", 1)[0] in prefixes}


def kind(resource_string):
    """"table {AWS::DynamoDB::Table IdempotencyTable.Arn}", "secret arn:...", "*"."""
    for pattern, name in KINDS:
        if re.search(pattern, resource_string):
            return name if name == "*" else f"{name} {resource_string}"
    return f"other {resource_string}"


def norm(value, resources):
    """A property value, comparable across the sides: numbers as numbers, resources by type."""
    if value is None:
        return None
    if isinstance(value, list):
        return [norm(v, resources) for v in value]
    if isinstance(value, dict) and not cfn_eval.is_symbolic(value):
        return {k: norm(v, resources) for k, v in sorted(value.items())}
    text = describe(value, resources)
    return int(text) if re.fullmatch(r"-?\d+", text) else (text if not isinstance(value, bool) else value)


def facts(template):
    """What is compared, from a template (SAM evaluated, or CDK synthesized)."""
    resources = template.get("Resources", {})
    types = collections.Counter(r["Type"] for r in resources.values()
                                if not any(t == r["Type"] or (t.endswith("*") and r["Type"].startswith(t[:-1]))
                                           for t in IGNORED_TYPES))
    mappings = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::Lambda::EventSourceMapping"]
    out = {"types": types, "mapping": {}, "actions": {}, "managed": set(), "alarms": set(), "timing": {}, "env": {}}
    if len(mappings) != 1:
        return out  # the type multiset tells
    m = mappings[0]
    out["mapping"] = {k: norm(m[k], resources) for k in MAPPING_KEYS if k in m}
    if "SourceAccessConfigurations" in m:  # the types, in any order
        out["mapping"]["SourceAccessConfigurations"] = sorted(s["Type"] for s in m["SourceAccessConfigurations"])
    dest = m.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination")
    if dest is not None:
        out["mapping"]["DestinationConfig"] = kind(describe(dest, resources))
    function = resources[m["FunctionName"]["Ref"]]["Properties"]
    out["env"] = {k: describe(v, resources) for k, v in function.get("Environment", {}).get("Variables", {}).items()}
    role_id = function["Role"]["Fn::GetAtt"][0]
    role = resources[role_id]["Properties"]
    out["managed"] = {describe(a, resources).rsplit("/", 1)[-1] for a in role.get("ManagedPolicyArns", [])}
    documents = [p["PolicyDocument"] for p in role.get("Policies", [])] + [
        r["Properties"]["PolicyDocument"] for r in resources.values()
        if r["Type"] == "AWS::IAM::Policy" and {"Ref": role_id} in r["Properties"].get("Roles", [])]
    for statement in (s for d in documents for s in d["Statement"]):
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        targets = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
        condition = sorted(f"{op} {key}" for op, keys in statement.get("Condition", {}).items() for key in keys)
        for target in targets:
            text = describe(target, resources)
            key = kind(text) + (f" if {', '.join(condition)}" if condition else "")
            key = key if statement.get("Effect", "Allow") == "Allow" else "DENY " + key
            out["actions"].setdefault(key, set()).update(effective(actions, text))
    for r in (r["Properties"] for r in resources.values() if r["Type"] == "AWS::CloudWatch::Alarm"):
        stats = [q["MetricStat"] for q in r.get("Metrics", []) if "MetricStat" in q]
        expressions = [q["Expression"] for q in r.get("Metrics", []) if "Expression" in q]
        if "Metrics" not in r:
            metric = (r.get("Namespace"), r.get("MetricName"), r.get("Statistic") or r.get("ExtendedStatistic"))
            period = r.get("Period")
        elif len(stats) == 1 and not expressions:  # one metric, written as Metrics
            metric = (stats[0]["Metric"]["Namespace"], stats[0]["Metric"]["MetricName"], stats[0]["Stat"])
            period = stats[0]["Period"]
        else:
            metric = ("+".join(sorted({s["Metric"]["Namespace"] for s in stats})), " ".join(expressions),
                      "+".join(sorted({f"{s['Metric']['MetricName']}:{s['Stat']}" for s in stats})))
            period = "+".join(sorted({str(s["Period"]) for s in stats}))
        threshold = norm(r.get("Threshold"), resources)
        out["alarms"].add((metric[0], metric[1], r.get("ComparisonOperator"), threshold, metric[2]))
        out["timing"][metric[1]] = tuple(norm(v, resources) for v in (period, r.get("EvaluationPeriods"),
                                                                       r.get("DatapointsToAlarm")))
    return out


def compare(sam, cdk, handler_variables=()):
    """The differences, as lines. `handler_variables`: a team's own variables
    (its tables and destinations), which the construct sets on the function
    and which template.yaml's function, the demo's, does not read."""
    diffs = []
    for k in handler_variables:
        if k not in cdk["env"]:
            diffs.append(f"(e) the handler's variable {k} is not set by the construct")
        if k in sam["env"]:
            diffs.append(f"(e) the handler's variable {k} is set by template.yaml")
    cdk = {**cdk, "env": {k: v for k, v in cdk["env"].items() if k not in handler_variables}}
    for t in sorted(set(sam["types"]) | set(cdk["types"])):
        if sam["types"][t] != cdk["types"][t]:
            diffs.append(f"(a) {t}: SAM {sam['types'][t]}, CDK {cdk['types'][t]}")
    for k in sorted(set(sam["actions"]) | set(cdk["actions"])):
        s, c = sam["actions"].get(k, set()), cdk["actions"].get(k, set())
        if s != c:
            diffs.append(f"(b) role on {k}: SAM only {sorted(s - c)}, CDK only {sorted(c - s)}")
    if sam["managed"] != cdk["managed"]:
        diffs.append(f"(b) managed policies: SAM only {sorted(sam['managed'] - cdk['managed'])}, "
                     f"CDK only {sorted(cdk['managed'] - sam['managed'])}")
    for k in sorted(set(sam["mapping"]) | set(cdk["mapping"])):
        s, c = sam["mapping"].get(k, "(absent)"), cdk["mapping"].get(k, "(absent)")
        if s != c:
            diffs.append(f"(c) mapping {k}: SAM {json.dumps(s)}, CDK {json.dumps(c)}")
    for a in sorted(sam["alarms"] ^ cdk["alarms"], key=str):
        diffs.append(f"(d) alarm {a} only in {'SAM' if a in sam['alarms'] else 'CDK'}")
    for k in sorted(set(sam["timing"]) & set(cdk["timing"])):
        if sam["timing"][k] != cdk["timing"][k]:
            diffs.append(f"(d) alarm on {k} (Period, EvaluationPeriods, DatapointsToAlarm): "
                         f"SAM {sam['timing'][k]}, CDK {cdk['timing'][k]}")
    for k in sorted(set(sam["env"]) | set(cdk["env"])):
        s, c = sam["env"].get(k), cdk["env"].get(k)
        if s is None or c is None:
            diffs.append(f"(e) variable {k} only in {'SAM' if c is None else 'CDK'}")
        elif s != c:
            diffs.append(f"(e) variable {k}: SAM {s!r}, CDK {c!r}")
    return diffs


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("cdk_dir", type=pathlib.Path, help="the CDK templates, <source>-<store>.json")
    parser.add_argument("--configurations", type=pathlib.Path, default=CONFIGURATIONS)
    parser.add_argument("--template", type=pathlib.Path, default=ROOT / "template.yaml")
    parser.add_argument("--only", nargs="+", metavar="SOURCE-STORE", help="these configurations only")
    parser.add_argument("--verbose", action="store_true", help="also print what was compared")
    args = parser.parse_args()
    started = time.monotonic()
    configurations = json.loads(args.configurations.read_text())
    unknown = set(args.only or []) - set(configurations)
    if unknown:
        parser.error(f"not in {args.configurations}: {', '.join(sorted(unknown))}")
    failed = 0
    for name, configuration in configurations.items():
        if args.only and name not in args.only:
            continue
        path = args.cdk_dir / f"{name}.json"
        try:
            sam = facts(cfn_eval.evaluate(args.template, configuration["sam"]))
            cdk = facts(json.loads(path.read_text())) if path.exists() else None
            diffs = compare(sam, cdk, configuration.get("handler_variables", ())) if cdk else [f"no {path}"]
        except cfn_eval.CfnError as e:
            diffs = [f"SAM template does not evaluate: {e}"]
        failed += bool(diffs)
        print(f"{name}: {'OK' if not diffs else f'{len(diffs)} difference(s)'}")
        for d in diffs:
            print(f"  {d}")
        if args.verbose and not diffs:
            print(json.dumps(sam, default=sorted, indent=2))
    print(f"drift: {failed} of {len(args.only or configurations)} configuration(s) differ "
          f"({time.monotonic() - started:.1f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
