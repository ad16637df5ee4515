"""Where a page's measured figures come from (issue 59: every number has a source).

A page states a figure (a time in ms or µs, a speed in images/s, an "Nx" ratio, a share in %, an
op count, an accuracy) in a *block*: a paragraph, a list item or a table with the paragraph above
it. The figure's *sources* are what that block and its section (up to the next heading) cite:

- ``source: benchmarks/RESULTS.md, TITLE, STAMP[; TITLE, STAMP ...]``: every section of
  benchmarks/RESULTS.md whose heading starts with TITLE and whose stamp starts with STAMP;
- a link to ``performance.md#ANCHOR``: that section of docs/performance.md (a heading's slug or
  an ``<a id>`` inside it; ``gpu-status`` is the generated block there);
- a link to ``results.md`` or to a kept log under ``results/logs/NAME/``: the generated results
  page, resp. that run's kept files;
- a kept curve, ``benchmarks/...csv`` or ``curves/NAME.csv``: that file;

and, on every page, the page's own generated blocks (``<!-- generated: ... -->`` /
``<!-- begin ... -->`` up to their end marker). A figure is sourced when a number of its sources,
written with at least the figure's decimals, rounds to it (``2.12`` is found as 2.12 or 2.1249,
``24,725`` as 24725.3, never ``1.00`` as the integer 1), or a decimal of the source equals it
(``58.20`` as a CSV's 58.2). Figures inside a generated block, a code fence or a table marked
``<!-- not measured: ... -->`` are not checked, nor a threshold or target (``<= 1 ms``, ``at most
3 %``, ``within 5 %``), what a sentence calls an estimate or computes on paper, or a table cell
that begins with something other than a number (a setting such as ``(0.1, 0.1)``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tests.helpers.paths import ROOT

RESULTS = ROOT / "benchmarks" / "RESULTS.md"
PERFORMANCE = ROOT / "docs" / "performance.md"

#: a number as pages write it: 1,024 or 2.12 or 0.099 (a leading sign is not part of it)
NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
#: a measured figure with its unit: one number or a range (1.13-1.24x, 6 to 13 %)
UNIT_FIGURE = re.compile(
    rf"(?<![\w.^/])(?P<a>{NUM})(?:\s*(?:-|–|to)\s*(?P<b>{NUM}))?"
    r"(?:\s*(?:(?P<u>ms|µs|us|images/s|img/s|ops)\b|%)|x(?![\w-]))"
)
#: a bare decimal (an accuracy or a fraction in a table cell): 33.22, 0.966
DECIMAL = re.compile(rf"(?<![\w.^/=])(?P<a>{NUM})(?![\w.])")
#: words that make the next figure a threshold, a target or a tolerance, not a measurement
THRESHOLD = re.compile(
    r"(?:<=|>=|≤|≥|<|>|at most|at least|within|target[s]?:?|under|below|above|up to|"
    r"bound|budget|over)\s*[~≈+]?\s*$",
    re.I,
)
NOT_MEASURED = re.compile(r"\bestimate\b|\bon paper\b|\bpaper(?:'s)? reports?\b", re.I)
GENERATED = re.compile(r"<!-- (?:generated: |begin )[^>]*-->.*?<!-- end[^>]*-->", re.S)
SOURCE_LINE = re.compile(r"source: benchmarks/RESULTS\.md, ", re.I)


@dataclass(frozen=True)
class Figure:
    """One measured figure of a page: its text, the numbers to look up, and its block."""

    text: str
    numbers: tuple[str, ...]
    line: str


# ---------------------------------------------------------------- RESULTS.md entries


@cache
def results_sections() -> tuple[tuple[str, str, str], ...]:
    """(title, stamp, text) of each '## TITLE, STAMP' section of benchmarks/RESULTS.md."""
    out = []
    for part in re.split(r"\n(?=## )", RESULTS.read_text()):
        if not part.startswith("## "):
            continue
        head = part.splitlines()[0][3:]
        suite = re.match(r"GPU suite (\S+) on ", head)
        if suite:
            out.append((f"GPU suite {suite[1]}", suite[1], part))
        elif ", 20" in head:
            title, stamp = head.rsplit(", 20", 1)
            out.append((title, "20" + stamp, part))
    return tuple(out)


def entries() -> list[tuple[str, str]]:
    """(title, stamp) of each section heading of RESULTS.md ('## TITLE, STAMP')."""
    return [(t, s) for t, s, _ in results_sections()]


_ENTRY = re.compile(r"(.+?), (20\d\d-\d\d-\d\d(?:[T ][\d:]+)?)")


def named_entries(text: str) -> list[str]:
    """The RESULTS.md sections that ``text`` (after 'source: benchmarks/RESULTS.md, ') names:
    'TITLE, STAMP' items separated by '; ', each TITLE the start of a heading's title (a long one
    may be cut) and STAMP the start of its stamp; reading stops at the first item that names
    none."""
    found: list[str] = []
    while True:
        m = _ENTRY.match(text)
        if not m:
            return found
        hits = [b for t, s, b in results_sections() if t.startswith(m[1]) and s.startswith(m[2])]
        if not hits:
            return found
        found += hits
        text = text[m.end() :]
        if not text.startswith("; "):
            return found
        text = text[2:]


def names_an_entry(text: str) -> bool:
    """``text`` (after 'source: benchmarks/RESULTS.md, ') starts 'TITLE, STAMP' where TITLE
    begins a heading's title (a long one may be cut) and STAMP begins its stamp."""
    return bool(named_entries(text))


# ---------------------------------------------------------------- other sources


def slug(heading: str) -> str:
    """Python-Markdown's toc slug of a heading (what mkdocs makes its anchor)."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"[-\s]+", "-", text).strip("-")


@cache
def performance_section(anchor: str) -> str:
    """The text of docs/performance.md's section that ``anchor`` names ('' when none)."""
    text = PERFORMANCE.read_text()
    parts = re.split(r"\n(?=#{2,4} )", text)
    for part in parts:
        head = part.splitlines()[0].lstrip("#").strip()
        if slug(head) == anchor or f'<a id="{anchor}"></a>' in part:
            return part
    return ""


@cache
def kept_log(name: str) -> str:
    """Every file kept for the run ``name`` under docs/results/logs/ (its figures)."""
    folder = ROOT / "docs" / "results" / "logs" / name
    if not folder.is_dir():
        return ""
    return "\n".join(p.read_text() for p in sorted(folder.rglob("*")) if p.is_file())


@cache
def kept_file(path: str) -> str:
    """A kept record named by path: a CSV under benchmarks/ or benchmarks/curves/."""
    for base in (ROOT, ROOT / "benchmarks", ROOT / "benchmarks" / "curves"):
        p = base / path
        if p.is_file():
            return p.read_text()
    p = ROOT / "benchmarks" / "curves" / Path(path).name
    return p.read_text() if p.is_file() else ""


#: the kinds of source a page may cite (the test's table names, per page, the kinds it allows)
KINDS = ("results", "performance", "logs", "curves")


def cited(text: str, kinds: tuple[str, ...] = KINDS) -> list[str]:
    """The source texts of the ``kinds`` that ``text`` (a block or a section) cites."""
    flat = " ".join(text.split())
    out: list[str] = []
    if "results" in kinds:
        for m in SOURCE_LINE.finditer(flat):
            out += named_entries(flat[m.end() :])
    if "performance" in kinds:
        out += [performance_section(a) for a in re.findall(r"performance\.md#([\w-]+)", text)]
    if "logs" in kinds:
        if re.search(r"\(\.?\.?/?results\.md[)#]", text):
            out.append((ROOT / "docs" / "results.md").read_text())
        out += [kept_log(n) for n in re.findall(r"results/logs/([\w-]+)", text)]
    if "curves" in kinds:
        out += [kept_file(p) for p in re.findall(r"[\w/]+\.csv\b", text)]
    return [s for s in out if s]


# ---------------------------------------------------------------- numbers


def _value(num: str) -> float:
    return float(num.replace(",", ""))


def numbers_in(text: str) -> list[str]:
    """Every number written in ``text`` (commas of thousands dropped)."""
    return [m.replace(",", "") for m in re.findall(NUM, text)]


def found_in(number: str, source_numbers: list[str]) -> bool:
    """A number of the source, written with at least ``number``'s decimals, equals ``number``
    when rounded to them (2.1 is found as 2.1 or 2.12, never as 2), or a decimal of the source
    equals it (58.20 is found as 58.2; 1.00 never as the integer 1)."""
    places = len(number.split(".")[1]) if "." in number else 0
    want = _value(number)
    for s in source_numbers:
        has = len(s.split(".")[1]) if "." in s else 0
        if has >= places and abs(round(float(s), places) - want) < 10 ** (-places) / 2:
            return True
        if has and float(s) == want:  # a CSV's 58.2 is the page's 58.20
            return True
    return False


# ---------------------------------------------------------------- the page's figures


def _strip_fences(text: str) -> str:
    out, fence = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fence = not fence
            out.append("")
        elif fence or line.startswith("    ") and not line.lstrip().startswith(("-", "|")):
            out.append("")
        else:
            out.append(line)
    return "\n".join(out)


def blocks(text: str) -> list[tuple[str, str]]:
    """(section, block) pairs: paragraphs, list items and tables (with the paragraph above a
    table), code fences and generated blocks blanked, tables marked 'not measured' dropped; the
    section as written (its code included: a command names the file it reads)."""
    out = []
    for raw in re.split(r"\n(?=#{1,6} )", GENERATED.sub("", text)):
        section = _strip_fences(raw)
        section = re.sub(r"<!-- not measured:[^>]*-->\n(\|.*\n?)+", "", section)
        paras = [p for p in re.split(r"\n\s*\n", section) if p.strip()]
        prev = ""
        for para in paras:
            if para.lstrip().startswith("|"):
                out.append((raw, prev + "\n" + para))
            else:
                for item in re.split(r"\n(?=\s*(?:[-*]|\d+\.) )", para):
                    out.append((raw, item))
            prev = para
    return out


def _table_cells(line: str) -> list[str]:
    """The cells of a table row after its first (the row's label) that begin with a number: a
    measured value (a setting such as ``(0.1, 0.1)`` or a bound ``<= 1e-6`` begins otherwise)."""
    cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))][1:]
    return [c for c in cells if re.match(r"[*~+\-−]*\d", c)]


def figures(block: str) -> list[Figure]:
    """The measured figures of ``block``: every number with a unit of UNIT_FIGURE, and every
    decimal number of a table cell that begins with a number; less thresholds, estimates and a
    table whose caption says it is on paper or an estimate."""
    found = []
    table = [ln for ln in block.splitlines() if ln.startswith("|")]
    caption = "\n".join(ln for ln in block.splitlines() if not ln.startswith("|"))
    if table and NOT_MEASURED.search(caption):
        block = caption
    for line in block.splitlines():
        if line.startswith("#") or re.match(r"\|[-| :]+\|$", line):
            continue
        if line.startswith("|"):
            for cell in _table_cells(line):
                if not NOT_MEASURED.search(cell):
                    for m in DECIMAL.finditer(cell):
                        if "." in m["a"]:
                            found.append(Figure(m[0], (m["a"].replace(",", ""),), line))
        for sentence in re.split(r"(?<=[.;:])\s+(?=[A-Z(])", line):
            if NOT_MEASURED.search(sentence):
                continue
            for m in UNIT_FIGURE.finditer(sentence):
                if THRESHOLD.search(sentence[: m.start()]):
                    continue
                nums = tuple(n.replace(",", "") for n in (m["a"], m["b"]) if n)
                found.append(Figure(m[0], nums, line))
    return found


def unsourced(text: str, kinds: tuple[str, ...] = KINDS) -> list[str]:
    """'figure  <-  line' for every measured figure of the page ``text`` that no source it cites
    (of the ``kinds`` allowed) and none of its generated blocks holds."""
    own = "\n".join(m[0] for m in GENERATED.finditer(text))
    problems = []
    for section, block in blocks(text):
        pool = numbers_in("\n".join([own, *cited(section, kinds)]))
        for fig in figures(block):
            if not all(found_in(n, pool) for n in fig.numbers):
                problems.append(f"{fig.text!r}  <-  {fig.line.strip()[:160]}")
    return problems
