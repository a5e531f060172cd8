#!/usr/bin/env python3
"""The README's quick start as a new crate: the ```toml and ```rust blocks
under "## Your own handler" (the second ```rust block, under "**Test it**",
its src/tests.rs), with `exactly-once` pointed at this checkout by
path, its features kept (infra/quickstart.sh, infra/measure-build.sh). With
TOML_DOC, the ```toml block under that page's "## The crate" instead
(infra/cdk-team-check.sh: docs/deploy-cdk.md's).

    infra/quickstart_crate.py README.md DIR ROOT [TOML_DOC]
"""
import pathlib, re, sys
readme, crate, root = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3]
text = pathlib.Path(readme).read_text()
section = text.split("\n## Your own handler\n", 1)[1].split("\n## ", 1)[0]
def block(lang, section=section, heading="Your own handler"):
    found = re.search(r"^```" + lang + r"\n(.*?)^```$", section, re.S | re.M)
    if not found:
        sys.exit(f"quickstart: no ```{lang} block under '{heading}'")
    return found.group(1)
toml, rust = block("toml"), block("rust")
# Its test (`mod tests;` at the end of main.rs): the ```rust block of "**Test it**".
if "**Test it**:" not in section:
    sys.exit("quickstart: no '**Test it**:' under 'Your own handler'")
tests = block("rust", section.split("**Test it**:", 1)[1], "**Test it**:")
if len(sys.argv) > 4:
    page = pathlib.Path(sys.argv[4]).read_text().split("\n## The crate\n", 1)
    if len(page) < 2:
        sys.exit(f"quickstart: {sys.argv[4]} has no '## The crate'")
    toml = block("toml", page[1].split("\n## ", 1)[0], "The crate")
line = re.search(r'^exactly-once = .*$', toml, re.M)
if not line:
    sys.exit("quickstart: the toml block has no `exactly-once = ...` line")
features = re.search(r'features = \[[^\]]*\]', line.group(0))
toml = toml.replace(line.group(0), f'exactly-once = {{ path = "{root}"'
                    + (f", {features.group(0)}" if features else "") + " }")
(crate / "src").mkdir(parents=True)
(crate / "Cargo.toml").write_text(
    '[package]\nname = "payments"\nversion = "0.1.0"\nedition = "2024"\n\n' + toml)
(crate / "src" / "main.rs").write_text(rust)
(crate / "src" / "tests.rs").write_text(tests)
