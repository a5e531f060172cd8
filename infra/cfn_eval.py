#!/usr/bin/env python3
"""Evaluate a CloudFormation (SAM) template for parameter values: the template
as it would be deployed, without deploying it. Prints JSON {"Parameters",
"Conditions", "Resources", "Outputs", "Applications"}:

    infra/cfn_eval.py template.yaml EventSource=sqs SubnetIds=subnet-1,subnet-2 ...

- Parameters default to their Default, are checked (AllowedValues,
  AllowedPattern, Min/MaxValue, Min/MaxLength) and are strings, lists for
  CommaDelimitedList / List<...>; the Rules are checked.
- Conditions are evaluated: a resource or output whose Condition is false is
  gone, Fn::If keeps its taken branch, AWS::NoValue drops its key or item.
- Ref to a parameter or pseudo parameter (PSEUDO) is its value; Fn::Sub,
  Join, Select, Split and FindInMap of known values are computed. What refers
  to a resource stays symbolic: {"Ref": id}, {"Fn::GetAtt": [id, attr]},
  {"Fn::Sub": "..${id.Attr}.."}, a Join/Select/Split over such a value.
- An AWS::Serverless::Application with a local Location is evaluated with the
  parameters it is passed; its resources are merged in under their logical
  ids (a clash is an error), replacing it; !GetAtt App.Outputs.X is its
  evaluated output; "Applications" holds its Parameters, Conditions, Outputs.
A Ref to a removed resource, an unknown name or parameter, or a condition on
an unresolved value is a CfnError. Library: evaluate(path, {name: value}).
Needs PyYAML (infra/tools.sh's venv; local_tables re-runs with it).
"""

import functools
import json
import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import local_tables  # noqa: E402  (CfnLoader: the short tags as {"Ref": ..}, {"Fn::X": ..})
import yaml  # noqa: E402  (importable once local_tables has run)

PSEUDO = {"AWS::Region": "us-east-1", "AWS::AccountId": "123456789012", "AWS::Partition": "aws",
          "AWS::StackName": "stack", "AWS::URLSuffix": "amazonaws.com"}
NO_VALUE = object()  # what !Ref AWS::NoValue evaluates to: its key or item is dropped


class CfnError(Exception):
    """The template cannot be evaluated (or deployed) with these parameters."""


def is_symbolic(value):
    """A value left for CloudFormation to resolve: {"Ref": ..} or {"Fn::...": ..}."""
    if not isinstance(value, dict) or len(value) != 1:
        return False
    key = next(iter(value))
    return key == "Ref" or key.startswith("Fn::")


def _scalar(value):
    """CloudFormation compares and substitutes strings: 100 -> "100", True -> "true"."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value) if isinstance(value, (int, float)) else value


@functools.lru_cache(maxsize=16)
def _load(path, _mtime):
    """The parsed template (cached while the file is unchanged; never modified)."""
    with open(path, encoding="utf-8") as f:
        return yaml.load(f, Loader=local_tables.CfnLoader) or {}  # noqa: S506 (a SafeLoader)


def evaluate(path, parameters=None):
    """The template at `path` as deployed with `parameters` ({name: str or list})."""
    return _Stack(pathlib.Path(path), dict(parameters or {})).result


class _Stack:
    def __init__(self, path, given, trail=()):
        self.path, self.trail = path, trail + (path.name,)
        self.t = _load(path.resolve(), path.stat().st_mtime_ns)
        self.params = self._parameters(given)
        self.conditions, self.apps, self._pending = {}, {}, set()
        self.resources = self.t.get("Resources") or {}
        self._check_rules()
        self.active = {n for n, r in self.resources.items() if "Condition" not in r or self.condition(r["Condition"])}
        merged = {}
        for name, res in self.resources.items():
            if name not in self.active:
                continue
            if self._local_app(res):  # merged in place of the application
                for child_name, child_res in self.app(name).result["Resources"].items():
                    if child_name in merged or child_name in self.resources:
                        raise self.error(f"resource {child_name} of {name} clashes with another of that name")
                    merged[child_name] = child_res
                continue
            for dep in [res["DependsOn"]] if isinstance(res.get("DependsOn"), str) else res.get("DependsOn", []):
                if dep not in self.active:
                    raise self.error(f"{name} DependsOn {dep}, which is not in the template for these parameters")
            merged[name] = {k: v for k, v in self.ev(res).items() if k != "Condition"}
        outputs = {}
        for name, out in (self.t.get("Outputs") or {}).items():
            if "Condition" in out and not self.condition(out["Condition"]):
                continue
            value = {k: v for k, v in self.ev(out).items() if k != "Condition"}
            if "Value" in value:
                outputs[name] = value
        for name in self.t.get("Conditions") or {}:
            self.condition(name)
        self.result = {"Parameters": self.params, "Conditions": self.conditions, "Resources": merged,
                       "Outputs": outputs,
                       "Applications": {n: {k: v for k, v in a.result.items() if k != "Resources"}
                                        for n, a in self.apps.items()}}

    def error(self, message):
        return CfnError(f"{' > '.join(self.trail)}: {message}")

    # -- parameters, rules, conditions ---------------------------------------
    def _parameters(self, given):
        declared = self.t.get("Parameters") or {}
        unknown = sorted(set(given) - set(declared))
        if unknown:
            raise self.error(f"unknown parameter(s) {', '.join(unknown)}")
        values = {}
        for name, d in declared.items():
            if name not in given and "Default" not in d:
                raise self.error(f"parameter {name} has no Default and no value")
            v, kind = given.get(name, d.get("Default")), d.get("Type", "String")
            if is_symbolic(v):  # a resource of the parent stack, passed to an application
                values[name] = v
            elif kind == "CommaDelimitedList" or kind.startswith("List<"):
                values[name] = [_scalar(x) for x in v] if isinstance(v, list) else _scalar(v).split(",")
            else:
                values[name] = v = _scalar(v)
                number = float(v) if kind == "Number" and re.fullmatch(r"-?[0-9.]+(e-?[0-9]+)?", v) else None
                if ("AllowedValues" in d and v not in map(_scalar, d["AllowedValues"])
                        or "AllowedPattern" in d and not re.fullmatch(d["AllowedPattern"], v)
                        or not d.get("MinLength", 0) <= len(v) <= d.get("MaxLength", len(v))
                        or kind == "Number" and (number is None or not float(d.get("MinValue", number))
                                                 <= number <= float(d.get("MaxValue", number)))):
                    raise self.error(f"parameter {name}={v!r} is not allowed: {json.dumps(d)[:300]}")
        return values

    def _check_rules(self):
        for name, rule in (self.t.get("Rules") or {}).items():
            if "RuleCondition" in rule and not self._truth(rule["RuleCondition"], f"rule {name}"):
                continue
            for assertion in rule.get("Assertions", []):
                if not self._truth(assertion["Assert"], f"rule {name}"):
                    raise self.error(f"rule {name} fails: {assertion.get('AssertDescription', '')}")

    def _truth(self, node, what):
        value = self.ev(node)
        if not isinstance(value, bool):
            raise self.error(f"{what} is not a boolean for these parameters: {value!r}")
        return value

    def condition(self, name):
        if name not in self.conditions:
            body = (self.t.get("Conditions") or {}).get(name)
            if body is None or name in self._pending:
                raise self.error(f"condition {name} is {'circular' if body is not None else 'not defined'}")
            self._pending.add(name)
            self.conditions[name] = self._truth(body, f"condition {name}")
        return self.conditions[name]

    # -- nested applications -------------------------------------------------
    @staticmethod
    def _local_app(res):
        loc = (res.get("Properties") or {}).get("Location")
        return res.get("Type") == "AWS::Serverless::Application" and isinstance(loc, str) and "://" not in loc

    def app(self, name):
        """The application `name` evaluated with what this stack passes it (once)."""
        if name not in self.apps:
            props = self.resources[name]["Properties"]
            passed = self.ev(props.get("Parameters") or {})
            if any(isinstance(v, list) for v in passed.values()):
                raise self.error(f"{name} is passed a list: pass !Join [\",\", !Ref List]")
            self.apps[name] = _Stack(self.path.parent / props["Location"], passed, self.trail)
        return self.apps[name]

    # -- intrinsic functions -------------------------------------------------
    def ev(self, node):
        """`node` with every intrinsic function evaluated as far as values are known."""
        if isinstance(node, list):
            return [x for x in map(self.ev, node) if x is not NO_VALUE]
        if not isinstance(node, dict):
            return node
        if len(node) == 1:
            (key, arg), = node.items()
            fn = getattr(self, "fn_" + key.replace("Fn::", ""), None) if key == "Ref" or key.startswith("Fn::") else None
            # !Condition (local_tables reads it as Fn::Condition); the long form
            # Condition only with a string, not as an IAM statement's key.
            if key in ("Condition", "Fn::Condition") and isinstance(arg, str):
                return self.condition(arg)
            if fn:
                return fn(arg)
        evaluated = {k: self.ev(v) for k, v in node.items()}
        return {k: v for k, v in evaluated.items() if v is not NO_VALUE}

    def _resource(self, name, symbolic):
        """`symbolic`, if `name` is a resource of this template for these parameters."""
        if name not in self.resources:
            raise self.error(f"{name} is neither a parameter nor a resource")
        if name not in self.active:
            raise self.error(f"{name} is referred to but its condition removed it")
        return symbolic

    def fn_Ref(self, name):
        if name == "AWS::NoValue":
            return NO_VALUE
        if name in self.params:
            return self.params[name]
        if name in PSEUDO:
            return PSEUDO[name]
        return self._resource(name, {"Ref": name})

    def fn_GetAtt(self, arg):
        name, attr = arg if isinstance(arg, list) else arg.split(".", 1)
        if name in self.resources and self._local_app(self.resources[name]) and attr.startswith("Outputs."):
            self._resource(name, None)
            outputs = self.app(name).result["Outputs"]
            if attr[8:] not in outputs:
                raise self.error(f"{name} has no output {attr[8:]} for these parameters")
            return outputs[attr[8:]]["Value"]
        return self._resource(name, {"Fn::GetAtt": [name, attr]})

    def fn_If(self, arg):
        return self.ev(arg[1] if self.condition(arg[0]) else arg[2])

    def _known(self, args, fn):
        """The arguments evaluated, as strings (lists of strings); an unknown value is an error."""
        values = [self.ev(a) for a in args]
        if any(is_symbolic(v) for v in values):
            raise self.error(f"{fn} of a value unknown before deployment: {values!r}")
        return [[_scalar(x) for x in v] if isinstance(v, list) else _scalar(v) for v in values]

    # The condition functions (in Conditions, Rules and Fn::If's first item).
    def fn_Equals(self, arg):
        a, b = self._known(arg, "Fn::Equals")
        return a == b

    def fn_Contains(self, arg):  # Rules only
        values, value = self._known(arg, "Fn::Contains")
        return value in values

    def fn_Not(self, arg):
        return not self._truth(arg[0], "Fn::Not")

    def fn_And(self, arg):
        return all([self._truth(a, "Fn::And") for a in arg])

    def fn_Or(self, arg):
        return any([self._truth(a, "Fn::Or") for a in arg])

    def fn_FindInMap(self, arg):
        m, k1, k2 = self._known(arg, "Fn::FindInMap")
        try:
            return self.t["Mappings"][m][k1][k2]
        except KeyError:
            raise self.error(f"Fn::FindInMap {[m, k1, k2]} is not in Mappings") from None

    def fn_Join(self, arg):
        items = self.ev(arg[1])
        if isinstance(items, list) and not any(is_symbolic(x) for x in items):
            return arg[0].join(_scalar(x) for x in items)
        return {"Fn::Join": [arg[0], items]}

    def fn_Split(self, arg):
        text = self.ev(arg[1])
        return text.split(arg[0]) if isinstance(text, str) else {"Fn::Split": [arg[0], text]}

    def fn_Select(self, arg):
        index, items = self.ev(arg[0]), self.ev(arg[1])
        if is_symbolic(items) or is_symbolic(index):
            return {"Fn::Select": [index, items]}
        if not 0 <= int(index) < len(items):
            raise self.error(f"Fn::Select {index} out of range of {items!r}")
        return items[int(index)]

    def fn_Sub(self, arg):
        text, local = (arg, {}) if isinstance(arg, str) else (arg[0], self.ev(arg[1]))
        left = {}  # variables that stay symbolic and cannot be written as ${id} or ${id.Attr}

        def substitute(match):
            name = match.group(1)
            if name.startswith("!"):
                return "${" + name + "}"  # ${!Literal}: kept for CloudFormation, which writes ${Literal}
            if name in local:
                value = local[name]
            elif "." in name and not name.startswith("AWS::"):
                value = self.fn_GetAtt(name)
            else:
                value = self.fn_Ref(name)
            if isinstance(value, dict) and set(value) == {"Ref"}:
                return "${" + value["Ref"] + "}"
            if isinstance(value, dict) and set(value) == {"Fn::GetAtt"}:
                return "${" + ".".join(value["Fn::GetAtt"]) + "}"
            if is_symbolic(value):
                left[name] = value
                return "${" + name + "}"
            if isinstance(value, (list, dict)) or value is NO_VALUE:
                raise self.error(f"Fn::Sub variable {name} is not a string: {value!r}")
            return _scalar(value)

        out = re.sub(r"\$\{([^}]*)\}", substitute, text)
        if left:
            return {"Fn::Sub": [out, left]}
        # The unresolved ${...} still left are resources' (and ${!Literal}s').
        return {"Fn::Sub": out} if re.search(r"\$\{(?!!)", out) else out.replace("${!", "${")


def main(argv):
    if not argv or argv[0].startswith("-") or not all("=" in a for a in argv[1:]):
        sys.exit("usage: cfn_eval.py TEMPLATE [Name=Value ...]\n\n" + __doc__)
    try:
        print(json.dumps(evaluate(argv[0], dict(a.split("=", 1) for a in argv[1:])), indent=2))
    except CfnError as e:
        sys.exit(f"cfn_eval: {e}")


if __name__ == "__main__":
    main(sys.argv[1:])
