"""Pretrain with MoCo v2 and a negative strategy.

    python -m pretrain --cfg digits_moco.yaml [dotted.key=value ...]
    python -m pretrain export --ckpt RUN/checkpoints/last.pt --to torchvision --out r50.pth

Re-running the same command on an existing run directory resumes from its last checkpoint.
Exit status: 0 done (or stopped by SIGTERM/SIGUSR2 with a checkpoint), 1 runtime error (corrupt
checkpoint, non-finite loss), 2 config error, 130 Ctrl-C (checkpoint written). A stop signal
after the run's end (its "run complete" line, or its checkpoint after a stop) changes nothing:
the status stays the run's. A multi-rank run
that finished or stopped cleanly destroys its process group and exits through ``os._exit``
(``dist.finish``), so no teardown abort can turn a saved run into a failed job.
"""

from __future__ import annotations

import argparse
import sys

from pretrain import config
from pretrain.config import files
from pretrain.data.datasets import DatasetNotFoundError
from pretrain.data.imagefiles import DatasetError
from pretrain.engine import loop
from pretrain.runtime import dist


def main(argv: list[str] | None = None, *, leaving: bool = False) -> int:
    """``python -m pretrain ARGV``; ``leaving``: the process ends with this status (a stop signal
    after the run's end is then ignored, not fatal)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["export"]:
        from pretrain import export

        return export.main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m pretrain",
        description=__doc__.split("\n")[0],
        epilog=registered(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--cfg", required=True, help="shipped config name or path to a YAML file")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="dotted overrides")
    args = parser.parse_args(argv)
    try:
        cfg = config.load(args.cfg, args.overrides)
        status = loop.main(cfg, files.resolve_path(args.cfg, config.CONFIG_DIR), leaving=leaving)
    except (config.ConfigError, DatasetNotFoundError, DatasetError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if status in (0, 130):  # checkpoint on disk: a multi-rank run leaves with exactly this status
        dist.finish(status)
    return status


def registered() -> str:
    """The names ``negatives.name`` and ``loss.name`` accept, plugins marked with where they came
    from (their entry point), broken plugins with why (for --help)."""
    import negatives
    from pretrain import losses

    lines = []
    for key, registry in (("negatives.name", negatives.strategies), ("loss.name", losses.registry)):
        names = [
            n + (f" [plugin: {registry.origin(n)}]" if registry.origin(n) else "")
            for n in registry.names()
        ]
        lines.append(f"{key}: " + ", ".join(names))
        lines += [f"  broken plugin: {why}" for why in registry.problems().values()]
    lines.append(
        "plugins: a file or module:Class of one's own (config key plugins: [...]); an "
        "installed package's through its entry points (negmine.strategies, negmine.losses)"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main(leaving=True))
