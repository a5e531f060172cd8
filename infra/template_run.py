#!/usr/bin/env python3
"""A function started with exactly the environment its SAM template gives
it, on local servers, answering an event: what `sam deploy` then the first
invocation would do, without AWS.

    infra/template_run.py --template payments/template.yaml \\
        --bootstrap target/debug/payments --event payments/events/payments.json

The function's `Environment` (the template's `Globals` first) is read from
the template, each value resolved as CloudFormation would with the
parameters' defaults: a literal as it is; `!Ref PARAMETER` as its default;
`!Ref RESOURCE` as a local stand-in made for the run (an
`AWS::DynamoDB::Table` created in DynamoDB Local from its definition, an
`AWS::SQS::Queue` created in moto's SQS, its URL). Any other form, or a
resource of another type, stops the run naming it: the check must see
every variable. The function gets that environment and nothing of the
caller's but `PATH`, `HOME` and what reaches the local servers
(`AWS_ENDPOINT_URL_*`, credentials, region).

It is run once with the defaults, then once more for each other value a
parameter the environment references allows (`AllowedValues`), the other
variables at their defaults. Each run must start and answer the event with
`{"batchItemFailures": []}`; a function that cannot start (a variable its
build has no feature for: `StartError::FeatureOff`) fails the check with
its error. Prints one line per run.
"""

import argparse
import json
import os
import pathlib
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
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


def resolve(template, name, value, stand_ins):
    """(value, parameter or None) of one variable, with the parameters' defaults."""
    if isinstance(value, (str, int, float, bool)):
        return (str(value).lower() if isinstance(value, bool) else str(value)), None
    if isinstance(value, dict) and list(value) == ["Ref"]:
        ref = value["Ref"]
        parameter = template.get("Parameters", {}).get(ref)
        if parameter is not None:
            if "Default" not in parameter:
                sys.exit(f"template_run: {name} refers to {ref}, a parameter with no default")
            return str(parameter["Default"]), ref
        if ref in template.get("Resources", {}):
            return stand_ins(ref), None
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
    args = parser.parse_args()

    template = local_tables.load_template(args.template)
    function = function_resource(template, args.function)
    stamp = time.time_ns()
    made = {}

    def stand_ins(ref):
        if ref not in made:
            made[ref] = stand_in(template, ref, stamp)
        return made[ref]

    defaults, parameters = {}, {}
    for name, value in environment(template, function).items():
        defaults[name], parameter = resolve(template, name, value, stand_ins)
        if parameter is not None:
            parameters[name] = parameter
    local = {name: os.environ[name] for name in os.environ
             if name in PASSED or name.startswith("AWS_ENDPOINT_URL")}
    runs = [("defaults", defaults)]
    for name, parameter in sorted(parameters.items()):
        for allowed in template["Parameters"][parameter].get("AllowedValues", []):
            if str(allowed) != defaults[name]:
                runs.append((f"{parameter}={allowed}", {**defaults, name: str(allowed)}))

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
    print(f"template_run: {len(runs)} runs with the template's environment "
          f"({len(defaults)} variables), each answered")


if __name__ == "__main__":
    main()
