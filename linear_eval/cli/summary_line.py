"""The one readable line every subcommand prints to stderr before its JSON line: the headline
numbers of the record (accuracies, AUROCs, AULC), found by key name, at most ``limit`` of them."""

from __future__ import annotations

from typing import Any

HEADLINE = ("top1", "auroc", "aulc", "near_auroc", "far_auroc", "id_acc", "spearman", "u_auroc")


def _walk(obj: Any, path: tuple[str, ...], out: list[tuple[str, float]]) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k in ("protocol", "points", "per_class", "train", "per_draw", "per_set"):
                continue
            _walk(v, path + (str(k),), out)
    elif isinstance(obj, (int, float)) and not isinstance(obj, bool) and path:
        if path[-1].lower() in HEADLINE or path[-1].endswith("_top1"):
            out.append((".".join(path), float(obj)))


def line(command: str, record: dict[str, Any], limit: int = 8) -> str:
    """``"<command>: a.top1 91.20, b.auroc 88.10, ... (+N more in the JSON)"``."""
    found: list[tuple[str, float]] = []
    _walk(record, (), found)
    shown = ", ".join(f"{k} {v:.2f}" for k, v in found[:limit])
    more = f" (+{len(found) - limit} more in the JSON)" if len(found) > limit else ""
    return f"{command}: {shown or 'done'}{more}"


def compare(record: dict[str, Any]) -> str:
    """``compare``'s line: A, B and B - A with its interval for each metric, the probe, the
    file."""
    parts = []
    names = {
        "knn_top1": f"kNN ({record['knn']['preset']}) top-1",
        "linear_top1": f"linear ({record['linear_probe']['name']}) top-1",
        "oneclass_s_con": "one-class s_con AUROC",
    }
    for key, name in names.items():
        r = record[key]
        low, high = r["ci"]
        mark = " *" if r["excludes_zero"] else ""
        parts.append(
            f"{name}: A {r['a']:.2f}, B {r['b']:.2f}, B-A {r['b_minus_a']:+.2f} "
            f"[{low:+.2f}, {high:+.2f}]{mark}"
        )
    return (
        "compare (B-A, A the reference; paired bootstrap 95% interval, * excludes 0): "
        + "; ".join(parts)
        + f"; written to {record['written_to']}"
    )
