"""docs/plugins.md tells a plugin author what the source would: the step record's fields (every
field of ``negmine_core.step.Step``), ``moco_logits``' signature as Python reports it, and a loss
skeleton that runs and equals the built-in InfoNCE it abbreviates."""

from __future__ import annotations

import dataclasses
import inspect
import re

import torch

from negmine_core.step import Step
from pretrain import losses
from pretrain.losses import Loss, moco_logits, register
from tests.helpers.paths import ROOT

PAGE = (ROOT / "docs" / "plugins.md").read_text()


def test_the_page_lists_every_field_of_the_step_record_and_moco_logits_signature():
    listed = re.findall(r"^\| `s\.(\w+)` \|", PAGE, re.M)
    assert listed == [f.name for f in dataclasses.fields(Step)]
    assert "`s.detached() -> " in PAGE
    want = "pretrain.losses.moco_logits" + str(inspect.signature(moco_logits)).replace("'", "")
    assert want in PAGE.splitlines()


def test_the_loss_skeleton_runs_and_equals_infonce():
    block = re.search(r"A loss in three lines.*?```python\n(.*?)```", PAGE, re.S)
    assert block, "docs/plugins.md lacks its loss skeleton"
    namespace = {"register": register, "Loss": Loss, "Step": Step, "torch": torch,
                 "moco_logits": moco_logits}  # fmt: skip
    code = block.group(1).replace('@register("mine")', "")  # not registered: no global change
    exec(compile(code, "docs/plugins.md", "exec"), namespace)
    torch.manual_seed(0)
    q, k = (torch.nn.functional.normalize(torch.randn(8, 16), dim=1) for _ in range(2))
    queue = torch.nn.functional.normalize(torch.randn(32, 16), dim=1)
    step = Step.single(q, k, queue=queue)
    mine = namespace["Mine"](temperature=0.2)(step)
    builtin = losses.create("infonce", temperature=0.2)(step)
    torch.testing.assert_close(mine, builtin)
