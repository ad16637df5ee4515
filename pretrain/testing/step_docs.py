"""What a plugin author reads instead of the source: the fields of the step record
(:class:`negmine_core.step.Step`, each with the comment beside it in the class body), its
:meth:`~negmine_core.step.Step.detached`, the signature of :func:`pretrain.losses.moco_logits`,
and how many real training steps and hook calls the contract kit runs (its constants:
:data:`pretrain.testing.steps.WARM`, ``COUNTED``, :data:`pretrain.testing.behaviour.CALLS`).
``scripts/gen_plugin_docs.py`` writes them into docs/plugins.md (the block ``step``)."""

from __future__ import annotations

import dataclasses
import inspect
import re
import textwrap

from negmine_core.step import Step


def field_comments() -> dict[str, str]:
    """Each field of :class:`Step` and the ``#`` comment on its line (and the comment lines right
    below it that continue it)."""
    lines = textwrap.dedent(inspect.getsource(Step)).splitlines()
    out: dict[str, str] = {}
    last = ""
    for line in lines:
        field = re.match(r"    (\w+): [^#]*?(?:#\s*(.*))?$", line)
        if field and field[1] in {f.name for f in dataclasses.fields(Step)}:
            last = field[1]
            out[last] = (field[2] or "").strip()
        elif last and re.match(r"    #", line):
            out[last] += " " + line.strip()[1:].strip()
        else:
            last = ""
    return out


def rows() -> list[str]:
    """The block's lines: the fields' table, ``detached()``, ``moco_logits``, the kit's runs."""
    from pretrain.losses import moco_logits
    from pretrain.testing import steps
    from pretrain.testing.behaviour import CALLS

    comments = field_comments()
    out = ["<!-- not measured: definitions -->", "| field | type | what it holds |",
           "|---|---|---|"]  # fmt: skip
    for f in dataclasses.fields(Step):
        kind = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
        kind = kind.replace("|", "\\|")  # a union's bar is no column
        out.append(f"| `s.{f.name}` | `{kind}` | {comments.get(f.name, '')} |")
    detached = (inspect.getdoc(Step.detached) or "").split("\n\n")[0].replace("\n", " ")
    detached = detached.replace("``", "`")  # reST's literals in Markdown
    sig = str(inspect.signature(moco_logits)).replace("'", "")  # the annotations unquoted
    summary = (inspect.getdoc(moco_logits) or "").split("\n")[0].rstrip(".")
    out += [
        "",
        f"`s.detached() -> {inspect.signature(Step.detached).return_annotation}`: {detached}",
        "",
        "```python",
        f"pretrain.losses.moco_logits{sig}",
        "```",
        "",
        f"{summary} (`pretrain/losses/infonce.py`).",
        "",
        f"The kit runs, per class: the hooks alone on {len(CALLS)} calls (values checked on every "
        f"call), and {steps.WARM + steps.COUNTED} real training steps of `{steps.RECIPE}.yaml` for "
        f"the host syncs (the first included; {steps.COUNTED} counted after {steps.WARM} warm "
        f"ones), and {steps.WARM + 1} for the aten ops ({steps.WARM} warm, 1 counted) at batch 16 "
        "and again at batch 32, each beside plain MoCo's.",
    ]
    return out
