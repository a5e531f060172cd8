#!/usr/bin/env python3
"""The README's quick start as a new crate: the ```toml and ```rust blocks
under "## Your own handler", with `exactly-once` pointed at this checkout by
path (infra/quickstart.sh, infra/measure-build.sh).

    infra/quickstart_crate.py README.md DIR ROOT
"""
import pathlib, re, sys
readme, crate, root = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3]
text = pathlib.Path(readme).read_text()
section = text.split("\n## Your own handler\n", 1)[1].split("\n## ", 1)[0]
def block(lang):
    found = re.search(r"^```" + lang + r"\n(.*?)^```$", section, re.S | re.M)
    if not found:
        sys.exit(f"quickstart: no ```{lang} block under 'Your own handler'")
    return found.group(1)
toml, rust = block("toml"), block("rust")
line = re.search(r'^exactly-once = .*$', toml, re.M)
if not line:
    sys.exit("quickstart: the toml block has no `exactly-once = ...` line")
toml = toml.replace(line.group(0), f'exactly-once = {{ path = "{root}" }}')
(crate / "src").mkdir(parents=True)
(crate / "Cargo.toml").write_text(
    '[package]\nname = "payments"\nversion = "0.1.0"\nedition = "2024"\n\n' + toml)
(crate / "src" / "main.rs").write_text(rust)
