#!/usr/bin/env python3
"""Create the project's DynamoDB tables in DynamoDB Local, derived from template.yaml.

template.yaml is the single source of truth: for each AWS::DynamoDB::Table
named with --table LOGICAL_ID=NAME, the table NAME is created with the
resource's AttributeDefinitions, KeySchema, BillingMode (and
ProvisionedThroughput, GlobalSecondaryIndexes, LocalSecondaryIndexes when
present), then TTL is enabled as in its TimeToLiveSpecification. An existing
table is left alone.

    infra/local_tables.py --table IdempotencyTable=idempotency-local \\
                          --table LedgerTable=ledger-local
    infra/local_tables.py --print          # the derived definitions as JSON
    infra/local_tables.py --create orders=order_id --create lines=order_id,line:N

--create NAME=KEY[,SORT_KEY] makes a table of your own from that one line:
its hash key (and range key), each a string unless `:N` (number) or `:B`
(binary) follows its name, billed per request.

The endpoint comes from AWS_ENDPOINT_URL_DYNAMODB (see infra/dynamodb-local.sh);
credentials and region from the environment (see infra/local-env.sh).
It needs boto3 and PyYAML, both installed with aws-sam-cli in $EXACTLY_ONCE_TOOLS/venv by
infra/tools.sh; started by another python3 it re-runs itself with the venv's.
"""

import argparse
import json
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
from tools_home import VENV_PYTHON  # noqa: E402

try:
    import yaml
except ImportError:  # started by a python3 without the project's venv: use the venv's
    if VENV_PYTHON.exists() and pathlib.Path(sys.executable) != VENV_PYTHON:
        os.execv(VENV_PYTHON, [str(VENV_PYTHON), *sys.argv])
    sys.exit("local_tables: PyYAML not found; run infra/tools.sh")

TEMPLATE = ROOT / "template.yaml"
COPIED = (
    "AttributeDefinitions",
    "KeySchema",
    "BillingMode",
    "ProvisionedThroughput",
    "GlobalSecondaryIndexes",
    "LocalSecondaryIndexes",
)


class CfnLoader(yaml.SafeLoader):
    """A safe YAML loader that reads CloudFormation short tags (!Ref, !Sub, ...)
    as their long form ({"Ref": ...}, {"Fn::Sub": ...})."""


def _short_tag(loader, tag_suffix, node):
    name = "Ref" if tag_suffix == "Ref" else f"Fn::{tag_suffix}"
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
        if tag_suffix == "GetAtt":
            value = value.split(".", 1)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(node, deep=True)
    return {name: value}


CfnLoader.add_multi_constructor("!", _short_tag)


def load_template(path=TEMPLATE):
    """The template at `path`, with the resources of the nested applications
    it references by a local `Location` (sam/*.yaml) beside its own."""
    path = pathlib.Path(path)
    with open(path, encoding="utf-8") as f:
        template = yaml.load(f, Loader=CfnLoader)  # noqa: S506 (a SafeLoader subclass)
    resources = template.get("Resources", {})
    for resource in list(resources.values()):
        location = resource.get("Properties", {}).get("Location")
        if resource.get("Type") == "AWS::Serverless::Application" and isinstance(location, str):
            resources.update(load_template(path.parent / location).get("Resources", {}))
    return template


def table_definitions(template):
    """{logical id: {"create": CreateTable kwargs without TableName, "ttl": spec or None}}"""
    tables = {}
    for logical_id, resource in template.get("Resources", {}).items():
        if resource.get("Type") != "AWS::DynamoDB::Table":
            continue
        props = resource.get("Properties", {})
        create = {key: props[key] for key in COPIED if key in props}
        _reject_intrinsics(logical_id, create)
        ttl = props.get("TimeToLiveSpecification")
        if ttl is not None:
            _reject_intrinsics(logical_id, ttl)
        tables[logical_id] = {"create": create, "ttl": ttl}
    return tables


def _reject_intrinsics(logical_id, value):
    """The copied properties must be literal: DynamoDB Local cannot resolve !Ref."""
    if isinstance(value, dict):
        if any(k == "Ref" or k.startswith("Fn::") for k in value):
            sys.exit(f"local_tables: {logical_id} uses {value} in a copied property; make it literal")
        for v in value.values():
            _reject_intrinsics(logical_id, v)
    elif isinstance(value, list):
        for v in value:
            _reject_intrinsics(logical_id, v)


def _parse_table_arg(text):
    logical_id, sep, name = text.partition("=")
    if not sep or not logical_id or not name:
        raise argparse.ArgumentTypeError(f"expected LOGICAL_ID=NAME, got {text!r}")
    if not 3 <= len(name) <= 255:
        raise argparse.ArgumentTypeError(f"table name {name!r} must be 3 to 255 characters")
    return logical_id, name


def _parse_create_arg(text):
    """NAME=KEY[:S|N|B][,SORT_KEY[:S|N|B]] as a table definition: (name, definition)."""
    name, sep, keys = text.partition("=")
    parts = [part.strip() for part in keys.split(",")] if sep else []
    if not name or not 1 <= len(parts) <= 2 or not all(parts):
        raise argparse.ArgumentTypeError(f"expected NAME=KEY[,SORT_KEY], got {text!r}")
    if not 3 <= len(name) <= 255:
        raise argparse.ArgumentTypeError(f"table name {name!r} must be 3 to 255 characters")
    attributes, schema = [], []
    for part, kind in zip(parts, ("HASH", "RANGE")):
        attribute, _, type_ = part.partition(":")
        if type_ not in ("", "S", "N", "B"):
            raise argparse.ArgumentTypeError(f"{part!r}: a key's type is S, N or B")
        attributes.append({"AttributeName": attribute, "AttributeType": type_ or "S"})
        schema.append({"AttributeName": attribute, "KeyType": kind})
    create = {"AttributeDefinitions": attributes, "KeySchema": schema, "BillingMode": "PAY_PER_REQUEST"}
    return name, {"create": create, "ttl": None}


def create_tables(definitions, wanted):
    import boto3  # only needed here, not for --print

    endpoint = os.environ.get("AWS_ENDPOINT_URL_DYNAMODB")
    if not endpoint:
        sys.exit("local_tables: AWS_ENDPOINT_URL_DYNAMODB is not set (see infra/dynamodb-local.sh)")
    client = boto3.client("dynamodb", endpoint_url=endpoint)
    existing = set()
    for page in client.get_paginator("list_tables").paginate():
        existing.update(page["TableNames"])

    for logical_id, name in wanted:
        definition = definitions[logical_id]
        if name in existing:
            print(f"local_tables: {name} ({logical_id}) exists, left alone")
            continue
        client.create_table(TableName=name, **definition["create"])
        client.get_waiter("table_exists").wait(
            TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60}
        )
        ttl = definition["ttl"]
        if ttl and ttl.get("Enabled"):
            client.update_time_to_live(
                TableName=name,
                TimeToLiveSpecification={"AttributeName": ttl["AttributeName"], "Enabled": True},
            )
        ttl_note = f", TTL on {ttl['AttributeName']}" if ttl and ttl.get("Enabled") else ""
        print(f"local_tables: created {name} ({logical_id}{ttl_note})")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--table",
        action="append",
        default=[],
        type=_parse_table_arg,
        metavar="LOGICAL_ID=NAME",
        help="create the template's table LOGICAL_ID under NAME (repeatable)",
    )
    parser.add_argument(
        "--create",
        action="append",
        default=[],
        type=_parse_create_arg,
        metavar="NAME=KEY[,SORT_KEY]",
        help="create a table of your own: its hash key (and range key), `:N` or `:B` after a "
        "number's or bytes' (repeatable)",
    )
    parser.add_argument("--print", action="store_true", help="print the derived definitions as JSON and exit")
    parser.add_argument("--template", default=str(TEMPLATE), help="path of the SAM template")
    args = parser.parse_args()

    definitions = table_definitions(load_template(args.template))
    if args.print:
        json.dump(definitions, sys.stdout, indent=2)
        print()
        return
    if not args.table and not args.create:
        parser.error("give at least one --table LOGICAL_ID=NAME or --create NAME=KEY, or --print")
    unknown = [logical_id for logical_id, _ in args.table if logical_id not in definitions]
    if unknown:
        parser.error(f"not an AWS::DynamoDB::Table in the template: {', '.join(unknown)} "
                     f"(known: {', '.join(sorted(definitions))})")
    own = {f"--create {name}": definition for name, definition in args.create}
    create_tables({**definitions, **own},
                  args.table + [(f"--create {name}", name) for name, _ in args.create])


if __name__ == "__main__":
    main()
