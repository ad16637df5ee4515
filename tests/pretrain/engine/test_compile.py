"""train.compile: a few compiled CPU steps equal eager ones within float32 rounding; state dicts
unchanged (resume between compiled and eager runs); refused under DDP with the reason."""

from __future__ import annotations

import pytest
import torch

from pretrain import config
from pretrain.config import ConfigError
from pretrain.engine import checkpoint, loop, setup
from tests.helpers.runs import first_losses

TINY = [
    "model.width=8",
    "train.batch_size=16",
    "moco.queue_size=32",
    "data.num_workers=0",
    "train.progress_bar=false",
    "train.amp='off'",
    "seed=5",
]


def steps(tmp_path, compiled: bool, n: int = 3) -> tuple[list[float], loop.Run]:
    cfg = config.load(
        "digits_moco.yaml",
        [f"out_dir={tmp_path / str(compiled)}", *TINY, f"train.compile={str(compiled).lower()}"],
    )
    run = loop.setup(cfg)
    return first_losses(run, n), run


@pytest.mark.early  # about a minute of inductor compiles on 2 cores (tests/conftest.py)
def test_compiled_steps_match_eager(tmp_path):
    """Inductor fuses and reorders float32 arithmetic: losses agree to 1e-4 relative and the
    weights after 3 steps to 5e-3 absolute (the differences grow through SGD momentum; measured
    up to ~1e-3 with the two-stage pipeline); the state dicts have the same keys."""
    torch._dynamo.reset()
    eager, run_e = steps(tmp_path, False)
    compiled, run_c = steps(tmp_path, True)
    assert compiled == pytest.approx(eager, rel=1e-4)
    se, sc = run_e.moco.state_dict(), run_c.moco.state_dict()
    assert list(se) == list(sc)  # checkpoints are interchangeable
    for key in se:
        assert torch.allclose(se[key].float(), sc[key].float(), atol=5e-3), key
    run_e.moco.load_state_dict(sc)  # a compiled run's state loads into an eager one
    torch._dynamo.reset()


def test_compile_under_ddp_is_refused():
    moco = torch.nn.Module()
    with pytest.raises(ConfigError, match="train.compile"):
        setup.compile_encoders(moco, world_size=2)


def test_compile_is_not_a_resumable_change():
    """A checkpoint moves between compiled and eager runs: the key may change on resume."""
    assert "train.compile" in checkpoint.RESUMABLE_CHANGES
