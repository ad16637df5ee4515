"""Generate the tables of docs/step_counts.md from the code: the host syncs per step that every
registered loss and strategy of this tree declares (``syncs_per_step``, ``syncs_why``: the
contract ``negmine_core.contract.Contract`` that strategies and losses share, which
``tests/pretrain/engine/test_step_syncs.py`` measures), and the pinned aten ops per step of the
built-ins (``pretrain.testing.pins``, which ``tests/pretrain/engine/test_step_ops.py`` measures).

    python scripts/gen_step_counts.py            # rewrite the tables of docs/step_counts.md
    python scripts/gen_step_counts.py --check    # exit 1 if they are stale (CI, tests)

Only the tables between the ``<!-- generated: NAME -->`` / ``<!-- end: NAME -->`` markers are
written; the prose around them is the page's own. An installed plugin (an entry point) is left
out, so the page is the same with or without plugins installed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))  # pages.py, when loaded by path (the tests)
import pages  # noqa: E402  (the generators' shared blocks and --check)

PAGE = ROOT / "docs" / "step_counts.md"
COMMAND = "python scripts/gen_step_counts.py"


def in_tree(registry: object) -> list[str]:
    return [n for n in registry.names() if not registry.origin(n)]


def sync_rows() -> list[str]:
    import negatives
    from pretrain import losses
    from pretrain.testing import pins

    rows = ["| name | syncs per step (CPU-measured) | why |", "|---|---|---|"]
    for registry in (losses.registry,):
        for name in in_tree(registry):
            cls = registry.get(name)
            rows.append(f"| `{name}` | {cls.syncs_per_step} | {cls.syncs_why} |")
    rows.append(f"| `kappa` | {pins.KAPPA_SYNCS[0]} | the kappa head "
                "(`kappa.hidden`), any loss |")  # fmt: skip
    rows.append(f"| `split_bn` | {pins.SPLIT_BN_SYNCS[0]} | `model.split_bn=triton`, any "
                "loss: the kernels read (eps, momentum) from a float64 buffer built with the "
                "layer and moved by `.to()` |")  # fmt: skip
    for name in in_tree(negatives.strategies):
        cls = negatives.strategies.get(name)
        rows.append(f"| `{name}` | {cls.syncs_per_step} | {cls.syncs_why} |")
    return rows


def strategy_op_rows() -> list[str]:
    from pretrain.testing import pins

    rows = ["| recipe | strategy | ops per step | added vs `none` |", "|---|---|---|---|"]
    for recipe, counts in pins.DEVICE_OPS.items():
        for strategy, n in sorted(counts.items()):
            base = counts["none"]
            rows.append(f"| {recipe} | {strategy} | {n} | {100 * (n - base) / base:+.1f} % |")
    return rows


def loss_op_rows() -> list[str]:
    from pretrain.testing import pins

    base = pins.LOSS_OPS["infonce"]
    rows = ["| loss (digits_moco, strategy none) | ops per step | added vs `infonce` |",
            "|---|---|---|"]  # fmt: skip
    for loss, n in sorted(pins.LOSS_OPS.items()):
        rows.append(f"| {loss} | {n} | {100 * (n - base) / base:+.1f} % |")
    return rows


def path_op_rows() -> list[str]:
    from pretrain.testing import pins

    names = {"triton": "device (Triton)", "triton_onepass": "Triton one-pass (opt-in)",
             "fused": "aten fused", "per_split": "CPU (per split)"}  # fmt: skip
    rows = ["| recipe | split BN path | ops per step | of them batch_norm |", "|---|---|---|---|"]
    for recipe in pins.DEVICE_OPS:
        for path, name in names.items():
            n, bn = pins.PATH_OPS[path][recipe]
            rows.append(f"| {recipe} | {name} | {n} | {bn} |")
    return rows


TABLES = {"syncs": sync_rows, "strategy-ops": strategy_op_rows, "loss-ops": loss_op_rows,
          "path-ops": path_op_rows}  # fmt: skip


def render(text: str) -> str:
    """``text`` with every generated table rewritten."""
    sys.path.insert(0, str(ROOT))
    for name, rows in TABLES.items():
        text = pages.replace_block(text, name, COMMAND, rows(), PAGE)
    return text


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = p.parse_args(argv)
    return pages.write_or_check(PAGE, render(PAGE.read_text()), COMMAND, args.check)


if __name__ == "__main__":
    sys.exit(main())
