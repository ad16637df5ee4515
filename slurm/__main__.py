"""Submit pretraining, evaluation or a sweep to SLURM through submitit.

    python -m slurm --cfg imagenet100_mioc.yaml --nodes 2 --gpus-per-node 8 --partition P \\
        --time 72:00:00 [--account A --qos Q --constraint C --mem 200G --cpus-per-task 10] \\
        [dotted.key=value ...]
    python -m slurm --cfg digits_mioc.yaml --sweep "seed=1" --sweep "seed=2 negatives.kwargs.nu=0.2"
    python -m slurm linear_eval [SLURM flags] -- --ckpt RUN/checkpoints/last.pt

Each ``--sweep`` is one array task with its own run directory: ``<out_dir>/sweep_<i>`` (here
``runs/digits_mioc/sweep_0`` and ``sweep_1``), or the ``out_dir=`` that the ``--sweep`` names.
Everything is checked before anything is submitted (the config, sbatch on PATH, the partition).
Prints ``job: ID`` for each job, the log folder and the command to follow the log.
Exit status: 0 submitted, 2 bad input (nothing submitted).
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from pathlib import Path

from slurm.submit import EvalTask, PretrainTask, Resources, SlurmError, check_cluster, executor


def slurm_flags() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(add_help=False)
    g = p.add_argument_group("SLURM")
    g.add_argument("--nodes", type=int, default=1)
    g.add_argument("--gpus-per-node", type=int, default=0, help="one task per GPU; 0 = CPU job")
    g.add_argument("--partition", default=None)
    g.add_argument("--time", default="72:00:00", help="[D-]HH:MM:SS")
    g.add_argument("--account", default=None)
    g.add_argument("--qos", default=None)
    g.add_argument("--constraint", default=None)
    g.add_argument("--mem", default=None, help="e.g. 200G")
    g.add_argument("--cpus-per-task", type=int, default=None)
    g.add_argument("--log-dir", default=None, help="submitit folder (default RUN/slurm)")
    g.add_argument("--name", default=None, help="job name (default: the config's stem)")
    return p


def resources(a: argparse.Namespace) -> Resources:
    """The SLURM flags as :class:`Resources`, each checked first (sbatch would take a negative
    count or a misspelt unit, and the job would fail after queueing)."""
    counts = [("--nodes", a.nodes, 1), ("--gpus-per-node", a.gpus_per_node, 0)]
    counts += [("--cpus-per-task", a.cpus_per_task, 1)] if a.cpus_per_task is not None else []
    for flag, value, low in counts:
        if value < low:
            raise SlurmError(
                f"{flag} {value}: give a whole number >= {low}"
                + (" (0 = a CPU job)" if low == 0 else "")
            )
    if a.mem is not None and re.fullmatch(r"0+[KMGT]?", a.mem):
        raise SlurmError(
            f"--mem {a.mem}: SLURM reads 0 as all of each node's memory, which holds the whole "
            "node; give the amount the job needs, e.g. 200G"
        )
    if a.mem is not None and not re.fullmatch(r"[1-9][0-9]*[KMGT]?", a.mem):
        raise SlurmError(
            f"--mem {a.mem!r}: give a whole number with an optional unit K, M, G or T (e.g. 200G; "
            "no unit = megabytes)"
        )
    return Resources(
        a.nodes,
        a.gpus_per_node,
        a.partition,
        a.time,
        a.account,
        a.qos,
        a.constraint,
        a.mem,
        a.cpus_per_task,
    )


def absolute(path: str) -> str:
    """``path`` with ``~`` expanded and made absolute here, on the login node (the job's
    working directory and home may differ, and a literal ``~`` would be a folder named so)."""
    return str(Path(path).expanduser().resolve())


def task_configs(cfg_path: str, overrides: list[str], sweeps: list[list[str]]) -> list[tuple]:
    """One (config, overrides) per task, each with its own absolute ``out_dir``.

    The job's working directory may differ from ours, so every ``out_dir`` and a relative
    ``data.root`` (and the ``plugins`` files) are made absolute (resolved here, on the login
    node). In a sweep, a task whose
    own overrides do not name ``out_dir`` runs in ``<out_dir>/sweep_<i>``; two tasks that would
    still share a directory (and so one lock, one checkpoint) are refused.
    """
    from pretrain import config

    sets = sweeps or [[]]
    out = []
    for i, extra in enumerate(sets):
        cfg = config.load(cfg_path, [*overrides, *extra])
        run_dir = Path(absolute(cfg.out_dir))
        if len(sets) > 1 and not any(o.startswith("out_dir=") for o in extra):
            run_dir = run_dir / f"sweep_{i}"
        extra = [*extra, f"out_dir={run_dir}"]
        if absolute(cfg.data.root) != cfg.data.root:
            extra.append(f"data.root={absolute(cfg.data.root)}")
        if cfg.plugins:  # plugin files as absolute paths (config.load resolved them)
            extra.append(f"plugins={json.dumps(cfg.plugins)}")
        out.append((config.load(cfg_path, [*overrides, *extra]), [*overrides, *extra]))
    dirs = [str(Path(c.out_dir)) for c, _ in out]
    for i, d in enumerate(dirs):
        if d in dirs[:i]:
            raise SlurmError(
                f"sweep tasks {dirs.index(d)} and {i} would share the run directory {d}: give "
                "each --sweep its own out_dir=, or none (each task then gets out_dir/sweep_<i>)"
            )
    return out


def submit_pretrain(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m slurm", parents=[slurm_flags()], description=__doc__.split("\n")[0]
    )
    p.add_argument("--cfg", required=True)
    p.add_argument(
        "--sweep",
        action="append",
        default=[],
        metavar="'k=v k=v'",
        help="one array task per --sweep, each adding these overrides",
    )
    p.add_argument("overrides", nargs="*", metavar="key=value")
    a = p.parse_args(argv)
    res = resources(a)
    from pretrain import config
    from pretrain.config import files as config_files

    # the job reads the config where it runs: a relative path (or ~) is made absolute here
    a.cfg = str(config_files.resolve_path(str(Path(a.cfg).expanduser()), config.CONFIG_DIR))
    a.cfg = absolute(a.cfg)
    cfgs = task_configs(a.cfg, a.overrides, [shlex.split(s) for s in a.sweep])
    res.timeout_min()  # a bad --time is bad input
    check_cluster(a.partition)
    base = cfgs[0][0]
    folder = Path(
        a.log_dir or Path(base.out_dir if len(cfgs) == 1 else Path(base.out_dir).parent) / "slurm"
    ).resolve()
    ex = executor(a.name or Path(a.cfg).stem, folder, res, base.train.max_requeues)
    tasks = [PretrainTask(a.cfg, ov, cfg.train.max_requeues) for cfg, ov in cfgs]
    if len(tasks) == 1:
        jobs = [ex.submit(tasks[0])]
    else:
        with ex.batch():
            jobs = [ex.submit(t) for t in tasks]
    report(jobs, folder, [str(Path(c.out_dir).resolve()) for c, _ in cfgs])
    return 0


def submit_eval(argv: list[str]) -> int:
    head, sep, tail = (
        (argv[: argv.index("--")], "--", argv[argv.index("--") + 1 :])
        if ("--" in argv)
        else (argv, "", [])
    )
    p = argparse.ArgumentParser(prog="python -m slurm linear_eval", parents=[slurm_flags()])
    a, unknown = p.parse_known_args(head)
    if unknown and sep:
        p.error(f"unrecognized arguments: {' '.join(unknown)}")
    tail = eval_paths(tail)
    if not sep or "--ckpt" not in tail or tail.index("--ckpt") + 1 >= len(tail):
        raise SlurmError(
            "give the evaluation's arguments after '--', e.g. -- --ckpt RUN/checkpoints/last.pt"
        )
    res = resources(a)
    ckpt = Path(tail[tail.index("--ckpt") + 1])
    if not ckpt.is_file():
        raise SlurmError(f"checkpoint {ckpt} does not exist")
    res.timeout_min()
    check_cluster(a.partition)
    folder = Path(a.log_dir or ckpt.parent.parent / "slurm").resolve()
    ex = executor(a.name or "linear_eval", folder, res, max_requeues=0)
    report([ex.submit(EvalTask(tail))], folder, [str(ckpt.parent.parent)])
    return 0


#: linear_eval's flags that name a path, made absolute before the job gets them
EVAL_PATHS = ("--ckpt", "--data-root", "--out")


def eval_paths(argv: list[str]) -> list[str]:
    """``argv`` with the value of each of :data:`EVAL_PATHS` made absolute by :func:`absolute`
    (``--flag=V`` becomes ``--flag V``)."""
    out: list[str] = []
    words = iter(argv)
    for word in words:
        flag, eq, value = word.partition("=")
        if flag in EVAL_PATHS and eq:
            out += [flag, absolute(value)]
        elif word in EVAL_PATHS:
            out.append(word)
            value = next(words, None)
            out += [] if value is None else [absolute(value)]
        else:
            out.append(word)
    return out


def report(jobs: list, folder: Path, run_dirs: list[str]) -> None:
    for job, run_dir in zip(jobs, run_dirs):
        print(f"job: {job.job_id}  run: {run_dir}")
    print(f"log folder: {folder}")
    print(f"follow: tail -f {folder}/{jobs[0].job_id}_0_log.out")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    from pretrain.config import ConfigError

    try:
        if argv and argv[0] == "linear_eval":
            return submit_eval(argv[1:])
        return submit_pretrain(argv)
    except (SlurmError, ConfigError) as e:
        print(f"error: {e} (nothing was submitted)", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
