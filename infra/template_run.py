#!/usr/bin/env python3
"""A function started with exactly the environment its SAM template gives
it, on local servers, answering an event: what `sam deploy` then the first
invocation would do, without AWS.

    infra/template_run.py --template payments/template.yaml \\
        --bootstrap target/debug/payments --event payments/events/payments.json \\
        --parameter TopicName=payments ...

The template is evaluated as CloudFormation would deploy it
(infra/cfn_eval.py: the parameters' defaults but those given, its conditions,
the nested applications of sam/ merged in, their outputs wired), and the
function's `Environment` (the template's `Globals` first) is taken from the
result: a literal as it is; `!Ref RESOURCE` as a local stand-in made for the
run (an `AWS::DynamoDB::Table` created in DynamoDB Local from its
definition, an `AWS::SQS::Queue` created in moto's SQS, its URL). Any other
form, or a resource of another type, stops the run naming it: the check must
see every variable. The function gets that environment and nothing of the
caller's but `PATH`, `HOME` and what reaches the local servers
(`AWS_ENDPOINT_URL_*`, credentials, region), and must start and answer the
event with `{"batchItemFailures": []}`; a function that cannot start (a
variable its build has no feature for: `StartError::FeatureOff`) fails the
check with its error.
"""

import argparse
import json
import os
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import cfn_eval  # noqa: E402
import local_tables  # noqa: E402 (re-runs itself with the venv's python if needed)
from runtime_api import Function, Gone  # noqa: E402

PASSED = ("PATH", "HOME", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION",
          "AWS_DEFAULT_REGION")


def function_resource(template, name):
    resource = template.get("Resources", {}).get(name)
    if not resource:
        sys.exit(f"template_run: no resource {name} in the template")
    return resource


def environment(template, function):
    """The function's variables as written: Globals' first, its own over them."""
    variables = dict(template.get("Globals", {}).get("Function", {})
                     .get("Environment", {}).get("Variables", {}))
    variables.update(function.get("Properties", {}).get("Environment", {}).get("Variables", {}))
    return variables


def stand_in(template, name, stamp):
    """The local value of `!Ref name` for a resource, made now."""
    resource = template["Resources"][name]
    kind = resource.get("Type")
    local = f"{name.lower()}-{stamp}"
    if kind == "AWS::DynamoDB::Table":
        local_tables.create_tables(local_tables.table_definitions(template), [(name, local)])
        return local
    if kind == "AWS::SQS::Queue":
        import boto3
        fifo = resource.get("Properties", {}).get("FifoQueue") is True
        sqs = boto3.client("sqs", endpoint_url=os.environ.get("AWS_ENDPOINT_URL_SQS"))
        queue = sqs.create_queue(
            QueueName=local + (".fifo" if fifo else ""),
            Attributes={"FifoQueue": "true"} if fifo else {})
        return queue["QueueUrl"]
    sys.exit(f"template_run: the environment refers to {name} ({kind}), which has no local stand-in")


def resolve(name, value, stand_ins):
    """The local value of one variable of the evaluated template."""
    if isinstance(value, (str, int, float, bool)):
        return str(value).lower() if isinstance(value, bool) else str(value)
    if isinstance(value, dict) and list(value) == ["Ref"]:
        return stand_ins(value["Ref"])
    sys.exit(f"template_run: {name}: {value!r} is neither a literal nor a !Ref to resolve")


def run(bootstrap, env, event, log, timeout):
    function = Function(bootstrap, "template-check", env=env, output=log)
    try:
        return function.invoke(event, timeout)
    except Gone as gone:
        return "gone", gone.detail
    finally:
        function.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--template", required=True)
    parser.add_argument("--function", default="Function", help="the function's logical id")
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--event", required=True)
    parser.add_argument("--log", required=True, help="where the function's log lines go")
    parser.add_argument("--timeout", type=float, default=60)
    parser.add_argument("--parameter", action="append", default=[], metavar="NAME=VALUE",
                        help="a template parameter's value (repeatable; the others: their defaults)")
    args = parser.parse_args()

    parameters = dict(p.split("=", 1) for p in args.parameter)
    template = cfn_eval.evaluate(args.template, parameters)
    function = function_resource(template, args.function)
    stamp = time.time_ns()
    made = {}

    def stand_ins(ref):
        if ref not in made:
            made[ref] = stand_in(template, ref, stamp)
        return made[ref]

    variables = {name: resolve(name, value, stand_ins)
                 for name, value in environment(template, function).items()}
    local = {name: os.environ[name] for name in os.environ
             if name in PASSED or name.startswith("AWS_ENDPOINT_URL")}
    label = " ".join(args.parameter) or "defaults"
    runs = [(label, variables)]

    event = pathlib.Path(args.event).read_bytes()
    failed = False
    with open(args.log, "ab") as log:
        for label, env in runs:
            kind, answer = run(args.bootstrap, {**env, **local}, event, log, args.timeout)
            ok = kind == "response" and answer == {"batchItemFailures": []}
            failed |= not ok
            print(json.dumps({"run": label, "variables": len(env), kind: answer}), flush=True)
    if failed:
        sys.exit(f"template_run: a run did not answer {{\"batchItemFailures\": []}} (log: {args.log})")
    print(f"template_run: {len(runs)} run(s) with the template's environment "
          f"({len(variables)} variables), each answered")


if __name__ == "__main__":
    main()
