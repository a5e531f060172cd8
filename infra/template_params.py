#!/usr/bin/env python3
"""A generated template's parameters are those templates/README.md lists
for its source ("The generated template's parameters"), with the same
defaults: no parameter undocumented, no documented one missing.

    infra/template_params.py templates/README.md PROJECT/template.yaml SOURCE
"""

import pathlib
import re
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import local_tables  # noqa: E402

HEADING = "## The generated template's parameters"


def documented(readme, source):
    """{parameter: default as text, or None when required} for `source`."""
    section = readme.split(HEADING + "\n", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith("`"):
            continue
        name, sources, default = cells[0].strip("`"), cells[1], cells[2]
        if sources != "all" and source not in [s.strip() for s in sources.split(",")]:
            continue
        override = re.search(r"\(([a-z, -]+): `([^`]*)`\)", default)
        if override and source in [s.strip() for s in override.group(1).split(",")]:
            rows[name] = override.group(2)
        elif default == "the `event_source` chosen":
            rows[name] = source
        elif default == "(required)":
            rows[name] = None
        elif default == "empty":
            rows[name] = ""
        else:
            rows[name] = re.match(r"`([^`]*)`", default).group(1)
    return rows


def main():
    readme, template, source = sys.argv[1:4]
    rows = documented(pathlib.Path(readme).read_text(), source)
    parameters = local_tables.load_template(template)["Parameters"]
    actual = {name: (None if "Default" not in p else str(p["Default"]).lower()
                     if isinstance(p["Default"], bool) else str(p["Default"]))
              for name, p in parameters.items()}
    problems = [f"{name}: in the template, not in templates/README.md"
                for name in actual if name not in rows]
    problems += [f"{name}: in templates/README.md, not in the template"
                 for name in rows if name not in actual]
    problems += [f"{name}: default {actual[name]!r} in the template, {rows[name]!r} in templates/README.md"
                 for name in rows if name in actual and rows[name] != actual[name]]
    if problems:
        sys.exit(f"template_params ({source}):\n  " + "\n  ".join(problems))
    print(f"template_params ({source}): {len(actual)} parameters, as documented")


if __name__ == "__main__":
    main()
