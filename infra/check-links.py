#!/usr/bin/env python3
"""Checks the relative links of the repository's Markdown pages.

    infra/check-links.py [PAGE.md ...]

Without arguments it checks README.md and every *.md under the repository
(but not under .git/, .cache/, target/, node_modules/, .aws-sam/ or
tests/corpus/). For every link `[text](target)`, image `![alt](target)`,
reference definition `[label]: target` and HTML `href`/`src` whose target is
relative (no scheme such as https: or mailto:):

- the file or directory must exist, relative to the page (a target starting
  with `/` is relative to the repository root, as on GitHub);
- a `#anchor` must name a heading of the target Markdown file (of the page
  itself for a bare `#anchor`; of a directory's README.md), by GitHub's
  slug: the heading's text lowercased, every character that is not a
  letter, a digit, a space, `-` or `_` dropped, spaces turned into `-`; a
  repeated heading gets `-1`, `-2`, ... An `<a name>`/`id` anchor counts
  too, and `#L12` / `#L12-L20` on a file that is not Markdown.

Links inside fenced code blocks and inline code are ignored. A
`[text][label]` whose label has no definition is reported too.

Each broken link is printed as `FILE:LINE: target (why)`; the exit status is
1 if there is one, else 0 with a one-line summary. Python 3.11, standard
library only.
"""

from __future__ import annotations

import os
import re
import sys
from functools import lru_cache
from pathlib import Path
from urllib.parse import unquote

ROOT = Path(__file__).resolve().parent.parent
SKIP_DIRS = {".git", ".cache", "target", "node_modules", ".aws-sam"}
SKIP_PATHS = {Path("tests/corpus")}
MARKDOWN = {".md", ".markdown"}

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
# [text](target "title"): text may hold one level of brackets, the target
# one level of parentheses, or be written <between angle brackets>.
INLINE = re.compile(
    r"!?\[(?P<text>(?:[^\[\]\\]|\\.|\[(?:[^\[\]\\]|\\.)*\])*)\]"
    r"\(\s*(?P<target><[^<>\n]*>|(?:[^\s()\\]|\\.|\((?:[^\s()\\]|\\.)*\))*)"
    r"(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^()]*\)))?\s*\)"
)
FULL_REFERENCE = re.compile(
    r"!?\[(?P<text>(?:[^\[\]\\]|\\.|\[(?:[^\[\]\\]|\\.)*\])*)\]\[(?P<label>[^\[\]]+)\]"
)
DEFINITION = re.compile(
    r"^ {0,3}\[(?P<label>[^\[\]]+)\]:[ \t]*(?P<target><[^<>\n]*>|\S+)", re.MULTILINE
)
HTML_ATTR = re.compile(r"<[A-Za-z][^<>]*?\s(?:href|src)\s*=\s*(\"[^\"]*\"|'[^']*')", re.IGNORECASE)
HTML_ANCHOR = re.compile(r"<[A-Za-z][^<>]*?\s(?:name|id)\s*=\s*(\"[^\"]*\"|'[^']*')", re.IGNORECASE)
LINE_ANCHOR = re.compile(r"^L\d+(?:C\d+)?(?:-L\d+(?:C\d+)?)?$")


def blank(text: str, start: int, end: int) -> str:
    """`text` with [start, end) replaced by spaces, newlines kept."""
    return text[:start] + re.sub(r"[^\n]", " ", text[start:end]) + text[end:]


def without_code(text: str) -> str:
    """The page with fenced code blocks and inline code spans blanked out,
    so that offsets (and line numbers) stay those of the page."""
    lines = text.split("\n")
    fence: str | None = None
    for i, line in enumerate(lines):
        match = FENCE.match(line)
        if fence is None:
            if match:
                fence = match.group(1)
                lines[i] = " " * len(line)
        else:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence) \
                    and line.strip() == match.group(1):
                fence = None
            lines[i] = " " * len(line)
    text = "\n".join(lines)
    # HTML comments.
    for comment in list(re.finditer(r"<!--.*?-->", text, re.DOTALL)):
        text = blank(text, comment.start(), comment.end())
    # Inline code: a run of N backticks up to the next run of exactly N.
    pos = 0
    while True:
        opening = re.compile(r"(?<!`)(`+)(?!`)").search(text, pos)
        if not opening:
            break
        ticks = opening.group(1)
        closing = re.compile(r"(?<!`)" + ticks + r"(?!`)").search(text, opening.end())
        if not closing:
            pos = opening.end()
            continue
        text = blank(text, opening.start(), closing.end())
        pos = closing.end()
    return text


def heading_text(raw: str) -> str:
    """The text GitHub shows for a heading's source."""
    text = re.sub(r"!\[([^\]]*)\]\([^)]*\)", r"\1", raw)  # images: their alt
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # links: their text
    text = re.sub(r"\[([^\]]*)\]\[[^\]]*\]", r"\1", text)
    text = re.sub(r"<[^>]+>", "", text)  # HTML tags
    return text


def slug(text: str) -> str:
    text = heading_text(text).strip().lower()
    kept = "".join(c for c in text if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


@lru_cache(maxsize=None)
def anchors(path: Path) -> frozenset[str]:
    """Every anchor GitHub makes for the Markdown file at `path`."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return frozenset()
    lines = without_code_keep_headings(text)
    found: set[str] = set()
    seen: dict[str, int] = {}
    previous = ""
    for line in lines:
        title = None
        match = ATX.match(line)
        if match:
            title = re.sub(r"[ \t]+#+$", "", match.group(2) or "")
        elif SETEXT.match(line) and previous.strip() and not ATX.match(previous) \
                and not previous.lstrip().startswith(("-", "*", "+", ">", "|")):
            title = previous.strip()
        if title is not None:
            base = slug(title)
            count = seen.get(base, 0)
            found.add(base if count == 0 else f"{base}-{count}")
            seen[base] = count + 1
        previous = line
    for match in HTML_ANCHOR.finditer(without_code(text)):
        found.add(match.group(1)[1:-1])
    return frozenset(found)


def without_code_keep_headings(text: str) -> list[str]:
    """The page's lines, those of fenced code blocks emptied (a `#` line
    there is no heading); inline code is kept, since headings show it."""
    lines = text.split("\n")
    fence: str | None = None
    for i, line in enumerate(lines):
        match = FENCE.match(line)
        if fence is None:
            if match:
                fence = match.group(1)
                lines[i] = ""
        else:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence) \
                    and line.strip() == match.group(1):
                fence = None
            lines[i] = ""
    return lines


def check_target(page: Path, target: str) -> str | None:
    """Why `target`, linked from `page`, is broken; None if it resolves
    (or is not relative)."""
    target = target.strip()
    if target.startswith("<") and target.endswith(">"):
        target = target[1:-1].strip()
    if not target or SCHEME.match(target) or target.startswith("//"):
        return None
    path_part, _, fragment = target.partition("#")
    path_part = unquote(path_part.split("?", 1)[0])
    if path_part.startswith("/"):
        resolved = ROOT / path_part.lstrip("/")
    elif path_part:
        resolved = page.parent / path_part
    else:
        resolved = page
    if not resolved.exists():
        return "no such file or directory"
    if page.resolve().is_relative_to(ROOT) and not resolved.resolve().is_relative_to(ROOT):
        return "outside the repository"
    if not fragment:
        return None
    fragment = unquote(fragment)
    if resolved.is_dir():
        readme = next((resolved / name for name in ("README.md", "readme.md", "Readme.md")
                       if (resolved / name).is_file()), None)
        if readme is None:
            return f"anchor #{fragment} on a directory without README.md"
        resolved = readme
    if resolved.suffix.lower() not in MARKDOWN:
        if LINE_ANCHOR.match(fragment):
            return None
        return f"anchor #{fragment} on a file that is not Markdown"
    if fragment in anchors(resolved.resolve()):
        return None
    where = "this page" if resolved == page else os.path.relpath(resolved, page.parent)
    return f"no heading with anchor #{fragment} in {where}"


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def check_page(page: Path) -> tuple[list[str], int]:
    """The page's broken links as `FILE:LINE: target (why)`, and how many
    links it has."""
    text = page.read_text(encoding="utf-8")
    plain = without_code(text)
    shown = os.path.relpath(page, Path.cwd())
    problems: list[tuple[int, str]] = []
    links = 0
    definitions = {m.group("label").strip().lower(): m for m in DEFINITION.finditer(plain)}

    def report(offset: int, target: str, why: str) -> None:
        line = line_of(text, offset)
        problems.append((line, f"{shown}:{line}: {target} ({why})"))

    for match in INLINE.finditer(plain):
        # Keep the original spelling (the blanked copy only locates it).
        target = text[match.start("target"):match.end("target")]
        links += 1
        why = check_target(page, target)
        if why:
            report(match.start("target"), target, why)
    for match in definitions.values():
        target = text[match.start("target"):match.end("target")]
        links += 1
        why = check_target(page, target)
        if why:
            report(match.start("target"), target, why)
    for match in FULL_REFERENCE.finditer(plain):
        label = match.group("label").strip().lower()
        if label not in definitions:
            links += 1
            report(match.start(), f"[{match.group('label')}]", "no definition of this reference")
    for match in HTML_ATTR.finditer(plain):
        target = match.group(1)[1:-1]
        links += 1
        why = check_target(page, target)
        if why:
            report(match.start(1), target, why)
    problems.sort(key=lambda problem: problem[0])
    return [message for _, message in problems], links


def pages() -> list[Path]:
    found = []
    for directory, subdirs, files in os.walk(ROOT):
        here = Path(directory)
        relative = here.relative_to(ROOT)
        subdirs[:] = sorted(
            d for d in subdirs
            if d not in SKIP_DIRS and relative / d not in SKIP_PATHS
        )
        found.extend(here / f for f in sorted(files) if Path(f).suffix.lower() in MARKDOWN)
    return found


def main(argv: list[str]) -> int:
    if any(arg in ("-h", "--help") for arg in argv):
        print(__doc__.strip())
        return 0
    targets = [Path(arg).resolve() for arg in argv] if argv else pages()
    problems: list[str] = []
    links = 0
    for page in targets:
        if not page.is_file():
            problems.append(f"{page}: no such page")
            continue
        found, counted = check_page(page)
        problems.extend(found)
        links += counted
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} broken link(s) in {len(targets)} page(s)")
        return 1
    print(f"{len(targets)} page(s), {links} link(s): every relative link resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
