"""Rules that depend on the number of ranks: the config at start-up and the world size on resume.

BatchNorm statistics are what ties a run to its world size. Without ``model.sync_bn`` every rank
normalises its own images in ``model.bn_splits`` groups, so the global batch is normalised in
``world_size x bn_splits`` groups of ``batch_size / (world_size x bn_splits)`` images; one process
with ``bn_splits=W`` equals W ranks with ``bn_splits=1`` (to 1e-14 in float64,
tests/pretrain/runtime/test_ddp.py). With ``model.sync_bn`` (DDP only) the whole global batch is one
group.

Resume rule: a run may resume at another world size iff the BatchNorm groups stay the same, i.e.
``world_size x model.bn_splits`` is unchanged (``model.bn_splits`` may change with it, e.g. 4 ranks
x 1 split -> 2 ranks x 2 splits -> 1 process x 4 splits); with ``model.sync_bn`` any world size
(its one group is the global batch, as plain BatchNorm in one process). Anything else is refused
like any other config change: it would be a different method mid-run.
"""

from __future__ import annotations

from pretrain.config import Config, ConfigError, rules


def check(cfg: Config, world: int) -> None:
    """Config rules that need the number of ranks: ConfigError (exit 2) on every rank."""
    batch, splits = cfg.train.batch_size, cfg.model.bn_splits
    if batch % world:
        raise ConfigError(
            f"config key 'train.batch_size' = {batch} (the global batch) does not divide by the "
            f"{world} ranks of this job; use a multiple of {world}"
        )
    per_rank = batch // world
    if not rules.bn_splits_fit(per_rank, splits):
        raise ConfigError(
            f"config key 'model.bn_splits' = {splits} must divide the per-rank batch "
            f"({batch} / {world} ranks = {per_rank}) into BatchNorm splits of at least 2 images"
        )


def bn_groups(cfg: Config, world: int) -> int:
    """How many BatchNorm groups the global batch is normalised in."""
    if cfg.model.sync_bn and world > 1:
        return 1
    return world * cfg.model.bn_splits


def resume_problem(saved: Config, saved_world: int | None, cfg: Config, world: int) -> str:
    """Why a checkpoint of ``saved`` at ``saved_world`` ranks cannot resume as ``cfg`` at
    ``world`` ranks ("" if it can). ``saved_world`` None: a checkpoint from before the world
    size was recorded, whose ``model.bn_splits`` must then stay the same."""
    if saved_world is None:
        if saved.model.bn_splits != cfg.model.bn_splits:
            return "model.bn_splits differs (the checkpoint does not record its world size)"
        return ""
    before, now = bn_groups(saved, saved_world), bn_groups(cfg, world)
    if before != now:
        return (
            f"the checkpoint was written at {saved_world} rank(s) x model.bn_splits="
            f"{saved.model.bn_splits} ({before} BatchNorm groups"
            + (", sync_bn" if saved.model.sync_bn else "")
            + f"); this job has {world} rank(s) x model.bn_splits={cfg.model.bn_splits} ({now}). "
            "Resume with world size x model.bn_splits unchanged"
        )
    return ""
