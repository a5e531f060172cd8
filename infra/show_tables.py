#!/usr/bin/env python3
"""Print the demo's DynamoDB tables as readable tables (used by infra/demo.sh).

    infra/show_tables.py --ledger ledger-demo --idempotency idempotency-demo
    infra/show_tables.py --ledger ledger-demo --expect acc-1=3500 --expect acc-7=1800
    infra/show_tables.py --ledger ledger-demo --idempotency idempotency-demo --drop
    infra/show_tables.py --get orders order_id=o-1             # any table, by its key

The ledger: account_id, balance_cents, payment_count. The idempotency store:
pk, status, version, attempts, origin, error (when more than --max-rows items,
the COMPLETED ones are only counted). --expect ACCOUNT=CENTS[|CENTS...] checks
balances (any of the listed values; 0 for an absent account) and exits 1 on a
mismatch. --drop deletes both tables (infra/local_tables.py recreates them).
--get TABLE ATTRIBUTE=VALUE... prints one item of any table, by its whole
key (a number's attribute as it is typed in the table), as JSON with plain
values, or exits 1 when there is none.

The endpoint comes from AWS_ENDPOINT_URL_DYNAMODB; credentials and region from
the environment (infra/local-env.sh). Needs boto3 (in $EXACTLY_ONCE_TOOLS/venv, see
infra/tools.sh); started by another python3 it re-runs itself with the venv's.
"""

import argparse
import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
from tools_home import VENV_PYTHON  # noqa: E402

try:
    import boto3
except ImportError:
    if VENV_PYTHON.exists() and pathlib.Path(sys.executable) != VENV_PYTHON:
        os.execv(VENV_PYTHON, [str(VENV_PYTHON), *sys.argv])
    sys.exit("show_tables: boto3 not found; run infra/tools.sh")


def client():
    endpoint = os.environ.get("AWS_ENDPOINT_URL_DYNAMODB")
    if not endpoint:
        sys.exit("show_tables: AWS_ENDPOINT_URL_DYNAMODB is not set (see infra/dynamodb-local.sh)")
    return boto3.client("dynamodb", endpoint_url=endpoint)


def scan(ddb, table):
    items = []
    for page in ddb.get_paginator("scan").paginate(TableName=table, ConsistentRead=True):
        items.extend(page["Items"])
    return items


def plain(attribute):
    """A DynamoDB attribute value as text."""
    if attribute is None:
        return ""
    (kind, value), = attribute.items()
    if kind in ("S", "N"):
        return value
    if kind == "BOOL":
        return "true" if value else "false"
    if kind == "NULL":
        return ""
    return f"<{kind}>"


def table(rows, headers):
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    out = ["  " + line.rstrip(), "  " + "  ".join("-" * w for w in widths)]
    for row in rows:
        out.append("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return "\n".join(out)


def shorten(text, width):
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."


def show_ledger(ddb, name):
    items = sorted(scan(ddb, name), key=lambda i: plain(i.get("account_id")))
    rows = [[plain(i.get("account_id")), plain(i.get("balance_cents")), plain(i.get("payment_count"))]
            for i in items]
    print(f"ledger {name} ({len(rows)} accounts)")
    print(table(rows, ["account_id", "balance_cents", "payment_count"]) if rows else "  (empty)")
    return {row[0]: int(row[1] or 0) for row in rows}


def show_idempotency(ddb, name, max_rows):
    items = sorted(scan(ddb, name), key=lambda i: plain(i.get("pk")))
    counts = {}
    for item in items:
        status = plain(item.get("status"))
        counts[status] = counts.get(status, 0) + 1
    summary = ", ".join(f"{status}: {n}" for status, n in sorted(counts.items()))
    print(f"idempotency {name} ({len(items)} items{'; ' + summary if summary else ''})")
    if not items:
        print("  (empty)")
        return
    shown = items
    if len(items) > max_rows:
        shown = [i for i in items if plain(i.get("status")) != "COMPLETED"]
    rows = [[plain(i.get("pk")), plain(i.get("status")), plain(i.get("version")), plain(i.get("attempts")),
             plain(i.get("origin")), shorten(plain(i.get("error")), 70)] for i in shown]
    print(table(rows, ["pk", "status", "version", "attempts", "origin", "error"]))
    if len(shown) < len(items):
        print(f"  ... and {len(items) - len(shown)} COMPLETED items not listed (more than {max_rows} items)")


def drop(ddb, names):
    existing = set()
    for page in ddb.get_paginator("list_tables").paginate():
        existing.update(page["TableNames"])
    for name in names:
        if name in existing:
            ddb.delete_table(TableName=name)
            ddb.get_waiter("table_not_exists").wait(TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 60})
            print(f"show_tables: dropped {name}")


def get_item(ddb, name, key):
    """Prints the item of `name` with `key` (ATTRIBUTE=VALUE texts) as plain JSON."""
    import json

    schema = ddb.describe_table(TableName=name)["Table"]["AttributeDefinitions"]
    types = {a["AttributeName"]: a["AttributeType"] for a in schema}
    wanted = {}
    for text in key:
        attribute, sep, value = text.partition("=")
        if not sep or attribute not in types:
            sys.exit(f"show_tables: {text!r} is not KEY=VALUE of {name}'s key ({', '.join(types)})")
        wanted[attribute] = {types[attribute]: value}
    item = ddb.get_item(TableName=name, Key=wanted, ConsistentRead=True).get("Item")
    if item is None:
        print(f"show_tables: no item of {name} at {' '.join(key)}")
        sys.exit(1)
    print(json.dumps({attribute: plain(value) for attribute, value in sorted(item.items())}))


def parse_expect(text):
    account, sep, values = text.partition("=")
    try:
        allowed = [int(v) for v in values.split("|")]
    except ValueError:
        allowed = []
    if not sep or not account or not allowed:
        raise argparse.ArgumentTypeError(f"expected ACCOUNT=CENTS[|CENTS...], got {text!r}")
    return account, allowed


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ledger", help="ledger table name")
    parser.add_argument("--idempotency", help="idempotency table name")
    parser.add_argument("--max-rows", type=int, default=40,
                        help="above this many idempotency items, list only those not COMPLETED")
    parser.add_argument("--expect", action="append", default=[], type=parse_expect,
                        metavar="ACCOUNT=CENTS[|CENTS]", help="check a balance (repeatable)")
    parser.add_argument("--drop", action="store_true", help="delete the named tables and exit")
    parser.add_argument("--get", nargs="+", metavar=("TABLE", "ATTRIBUTE=VALUE"),
                        help="print one item of any table by its key, as JSON")
    args = parser.parse_args()
    if args.get:
        if len(args.get) < 2:
            parser.error("--get needs a table and its key: --get TABLE ATTRIBUTE=VALUE")
        return get_item(client(), args.get[0], args.get[1:])
    if not args.ledger and not args.idempotency:
        parser.error("give --ledger and/or --idempotency, or --get TABLE KEY=VALUE")
    if args.expect and not args.ledger:
        parser.error("--expect needs --ledger")

    ddb = client()
    if args.drop:
        drop(ddb, [n for n in (args.idempotency, args.ledger) if n])
        return
    balances = show_ledger(ddb, args.ledger) if args.ledger else {}
    if args.idempotency:
        show_idempotency(ddb, args.idempotency, args.max_rows)
    if args.expect:
        wrong = []
        for account, allowed in args.expect:
            actual = balances.get(account, 0)
            if actual not in allowed:
                wrong.append(f"{account}: balance {actual}, expected {' or '.join(map(str, allowed))}")
        if wrong:
            print("BALANCE CHECK FAILED:\n  " + "\n  ".join(wrong))
            sys.exit(1)
        print(f"balance check: all {len(args.expect)} expected balances match")


if __name__ == "__main__":
    main()
