#!/usr/bin/env python3
"""The README's quick start as a new crate: the ```toml and ```rust blocks
under "## Your own handler" (the second ```rust block, under "**Test it**:",
its src/tests.rs), with `exactly-once` pointed at this checkout by
path, its features kept (infra/quickstart.sh, infra/measure-build.sh). With
TOML_DOC, the ```toml block under that page's "## The crate" instead
(infra/cdk-team-check.sh: docs/deploy-cdk.md's). With --section, the crate
NAME of the ```toml and ```rust blocks under that heading of PAGE
(docs/local.md's "Your own messages", infra/quickstart.sh).

    infra/quickstart_crate.py README.md DIR ROOT [TOML_DOC]
    infra/quickstart_crate.py --section HEADING PAGE DIR ROOT NAME
"""
import pathlib, re, sys


def section_of(page, heading):
    parts = pathlib.Path(page).read_text().split(f"\n## {heading}\n", 1)
    if len(parts) < 2:
        sys.exit(f"quickstart: {page} has no '## {heading}'")
    return parts[1].split("\n## ", 1)[0]


def block(lang, section, heading):
    # ```rust,no_run too (a page compiled as a doctest).
    found = re.search(r"^```" + lang + r"(?:,[a-z_]+)*\n(.*?)^```$", section, re.S | re.M)
    if not found:
        sys.exit(f"quickstart: no ```{lang} block under '{heading}'")
    return found.group(1)


def write_crate(crate, name, toml, root, sources):
    """The crate `name` in `crate`: `toml`'s `exactly-once` pointed at `root`
    by path (its features kept), and `sources` ({file under src/: text})."""
    line = re.search(r'^exactly-once = .*$', toml, re.M)
    if not line:
        sys.exit("quickstart: the toml block has no `exactly-once = ...` line")
    features = re.search(r'features = \[[^\]]*\]', line.group(0))
    toml = toml.replace(line.group(0), f'exactly-once = {{ path = "{root}"'
                        + (f", {features.group(0)}" if features else "") + " }")
    (crate / "src").mkdir(parents=True)
    (crate / "Cargo.toml").write_text(
        f'[package]\nname = "{name}"\nversion = "0.1.0"\nedition = "2024"\n\n' + toml)
    for file, text in sources.items():
        (crate / "src" / file).write_text(text)


if sys.argv[1] == "--section":
    heading, page, crate, root, name = sys.argv[2:7]
    section = section_of(page, heading)
    write_crate(pathlib.Path(crate), name, block("toml", section, heading), root,
                {"main.rs": block("rust", section, heading)})
    sys.exit(0)

readme, crate, root = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3]
heading = "Your own handler"
section = section_of(readme, heading)
toml, rust = block("toml", section, heading), block("rust", section, heading)
# Its test (`mod tests;` at the end of main.rs): the ```rust block of "**Test it**:".
if "**Test it**:" not in section:
    sys.exit("quickstart: no '**Test it**:' under 'Your own handler'")
tests = block("rust", section.split("**Test it**:", 1)[1], "**Test it**:")
if len(sys.argv) > 4:
    toml = block("toml", section_of(sys.argv[4], "The crate"), "The crate")
write_crate(crate, "payments", toml, root, {"main.rs": rust, "tests.rs": tests})
