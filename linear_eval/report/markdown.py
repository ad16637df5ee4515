"""``report.md`` as text: markdown tables of result rows and the section layout that links the
figures drawn by :mod:`linear_eval.report.figures`."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pretrain.runtime import run_folder


def format_value(v: Any) -> str:
    """A table cell: 4 significant digits, plain integers, exponents only for tiny or huge."""
    if isinstance(v, (bool, np.bool_)) or v is None:
        return "" if v is None else str(v)
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        if not math.isfinite(v) or v == 0:
            return str(float(v)).replace("0.0", "0")
        return f"{v:.0f}" if 1e4 <= abs(v) < 1e15 else f"{v:.4g}"
    return str(v).replace("|", "\\|").replace("\n", " ")


def markdown_table(rows: Sequence[Mapping[str, Any]]) -> str:
    """Rows (dicts, columns in first-seen order) as a markdown table with padded columns;
    numeric columns are right-aligned."""
    cols = list(dict.fromkeys(k for r in rows for k in r))
    cells = [[format_value(r.get(c)) for c in cols] for r in rows]
    num = [
        all(isinstance(r.get(c), (int, float, np.number)) or r.get(c) is None for r in rows)
        for c in cols
    ]
    w = [max(3, len(str(c)), *(len(row[j]) for row in cells)) for j, c in enumerate(cols)]

    def line(vals: list[str]) -> str:
        padded = (s.rjust(w[j]) if num[j] else s.ljust(w[j]) for j, s in enumerate(vals))
        return "| " + " | ".join(padded) + " |"

    rule = "| " + " | ".join("-" * (w[j] - 1) + (":" if num[j] else "-") for j in range(len(w)))
    return "\n".join([line([format_value(c) for c in cols]), rule + " |", *map(line, cells)])


def write_report(report_dir: str | Path, title: str, sections: Sequence[Mapping[str, Any]]) -> Path:
    """Write ``report_dir/report.md``: a title, then per section its heading, text, table and
    figure (``![title](file)``, ``file`` relative to ``report_dir``), in the given order."""
    d = Path(report_dir)
    parts = [f"# {title}\n"]
    for i, sec in enumerate(sections):
        if "title" not in sec:
            raise ValueError(f"section {i} has no title: {sorted(sec)}")
        parts.append(f"## {sec['title']}\n")
        if sec.get("text"):
            parts.append(f"{sec['text'].strip()}\n")
        if sec.get("table"):
            parts.append(markdown_table(sec["table"]) + "\n")
        if sec.get("figure"):
            fig = Path(sec["figure"])
            if fig.is_absolute() or not (d / fig).is_file():
                raise ValueError(
                    f"section {sec['title']!r}: figure {fig} must be a file relative to {d}; "
                    "write the figure into the report directory first"
                )
            link = f"<{fig.as_posix()}>" if " " in fig.as_posix() else fig.as_posix()
            parts.append(f"![{sec['title']}]({link})\n")
    d.mkdir(parents=True, exist_ok=True)
    return run_folder.write_text(d / "report.md", "\n".join(parts))
