#!/usr/bin/env python3
"""Every figure the README quotes is on a page it links: each bullet, table row and
paragraph of README.md that gives a measured figure (a percentage, joules, watts, bytes,
a time) and links pages must find that figure on one of them. A figure whose block links
no page must be on one of the pages that hold the project's measurements (FALLBACK). Run
by CI (ci/test.sh); exits 1 naming each figure and where it was looked for."""

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FALLBACK = ["docs/accuracy.md", "BENCHMARKS.md", "docs/testing.md", "docs/plugins.md"]
# a measured figure: a number with a unit or a percent sign
FIGURE = re.compile(
    r"(?<![\w.])[+−-]?\d[\d  ]*(?:[.,]\d+)?(?:e\d+)?\s?"
    r"(?:%|J\b|W\b|KB\b|KiB\b|MB\b|MiB\b|bytes\b|B\b|ms\b|µs\b|ns\b|min\b)"
    # a ratio: "×185 000 000", "0.07×"
    r"|×\s?\d[\d  ]*(?:\.\d+)?|(?<![\w.])\d+(?:\.\d+)?×"
)
# a period that is set, not measured: "stepping every 10 ms", "read every 0.25 s"
SETTING = re.compile(r"\bevery\s*$")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def normal(text: str) -> str:
    """Figures as written anywhere: thin and no-break spaces as spaces, − as -."""
    return (
        text.replace("\u202f", " ")
        .replace("\u00a0", " ")
        .replace("\u2009", " ")
        .replace("−", "-")
    )


def blocks(text: str):
    """Bullets (with their continuation lines), table rows and paragraphs, outside code."""
    block, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
            if block:
                yield " ".join(block)
                block = []
            continue
        if fenced:
            continue
        starts = line.startswith(("- ", "* ", "|", "#")) or not line.strip()
        if starts and block:
            yield " ".join(block)
            block = []
        if line.strip():
            block.append(line.strip())
        if line.startswith("|") or line.startswith("#"):
            yield " ".join(block)
            block = []
    if block:
        yield " ".join(block)


def figures(block: str):
    text = normal(block)
    for m in FIGURE.finditer(text):
        if SETTING.search(text[: m.start()]):
            continue
        yield m.group(0).strip().lstrip("+-")


def squeeze(s: str) -> str:
    """Spaces out, and a thousands comma too: "1 187%" and "+1,187%" are one figure."""
    return re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", re.sub(r"\s+", "", s))


def main() -> int:
    readme = (ROOT / "README.md").read_text()
    pages = {}

    def page(rel: str) -> str:
        if rel not in pages:
            path = ROOT / rel
            pages[rel] = squeeze(normal(path.read_text())) if path.is_file() else ""
        return pages[rel]

    failures = []
    for block in blocks(readme):
        links = [
            l for l in LINK.findall(block) if not l.startswith("http") and l.endswith(".md")
        ]
        where = links or FALLBACK
        for fig in figures(block):
            if not any(squeeze(fig) in page(rel) for rel in where):
                failures.append(f"{fig!r} (looked in {', '.join(where)}): {block[:90]}...")
    for f in failures:
        print(f"README figure not on its page: {f}")
    print(f"check-figures: {len(failures)} README figure(s) not found on the pages they link")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
