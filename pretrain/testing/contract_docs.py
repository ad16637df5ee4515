"""The contract documented whole, from the code: every class attribute and hook a strategy or a
loss can declare or override, read from the base classes (:class:`negmine_core.contract.Contract`,
:class:`negatives.base.NegativeStrategy`, :class:`pretrain.losses.Loss`): an attribute's meaning
is its ``#:`` comment (the lines right above it), a hook's is its docstring's first paragraph,
its default the class's value. ``scripts/gen_plugin_docs.py`` writes the tables into
docs/plugins.md (``--check``: whether the page is current) and ``tests/docs/test_contract_docs.py``
fails when a member has no comment or docstring (:func:`undocumented`), so a new attribute cannot
go undocumented."""

from __future__ import annotations

import ast
import inspect
import textwrap
from dataclasses import dataclass

from negmine_core.contract import FLAGS
from negmine_core.step import ONE_PROCESS

#: Hooks and attributes of the bases that are no part of the contract (Python's and torch's).
SKIP = {"__init__", "__init_subclass__"}


@dataclass(frozen=True)
class Member:
    """One attribute or hook of a base class."""

    name: str
    kind: str  # "attribute" or "hook"
    default: str  # the value (attribute) or the signature (hook)
    doc: str  # the meaning: the #: comment or the docstring's first paragraph, one line


def _comment_above(lines: list[str], lineno: int) -> str:
    """The ``#:`` lines right above line ``lineno`` (1-based), joined."""
    out: list[str] = []
    i = lineno - 2
    while i >= 0 and lines[i].strip().startswith("#:"):
        out.insert(0, lines[i].strip()[2:].strip())
        i -= 1
    return " ".join(out)


def members(cls: type) -> list[Member]:
    """The attributes (annotated or assigned in the class body) and public hooks (methods with
    their signature) that ``cls`` itself defines, in source order."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    body = ast.parse(source).body[0].body  # type: ignore[attr-defined]
    out = []
    for node in body:
        if isinstance(node, (ast.AnnAssign, ast.Assign)):
            targets = [node.target] if isinstance(node, ast.AnnAssign) else node.targets
            for target in targets:
                if isinstance(target, ast.Name) and not target.id.startswith("_"):
                    value = vars(cls).get(target.id)
                    if isinstance(value, property):
                        continue
                    doc = _comment_above(lines, node.lineno)
                    out.append(Member(target.id, "attribute", repr(value), doc))
        elif isinstance(node, ast.FunctionDef) and node.name not in SKIP:
            if node.name.startswith("_"):
                continue
            doc = (ast.get_docstring(node) or "").split("\n\n")[0]
            sig = str(inspect.signature(getattr(cls, node.name))).replace("'", "")
            sig = sig.replace(repr(ONE_PROCESS), "ONE_PROCESS")
            out.append(Member(node.name, "hook", f"{node.name}{sig}", " ".join(doc.split())))
    return out


def bases() -> dict[str, type]:
    """The three bases, by the heading their table gets."""
    from negatives.base import NegativeStrategy
    from negmine_core.contract import Contract
    from pretrain.losses import Loss

    return {
        "both (negmine_core.contract.Contract)": Contract,
        "a strategy (negatives.NegativeStrategy)": NegativeStrategy,
        "a loss (pretrain.losses.Loss)": Loss,
    }


def undocumented(cls: type) -> list[str]:
    """``Class.member`` for each member of ``cls`` without a comment or docstring."""
    return [f"{cls.__name__}.{m.name}" for m in members(cls) if not m.doc]


def checked_by(name: str) -> str:
    """What the contract kit checks of an attribute (the flag table's type, :data:`FLAGS`)."""
    return next((f"type: {flag.holds}" for flag in FLAGS if flag.attribute == name), "")


def rows(cls: type) -> list[str]:
    """The markdown table of ``cls``'s members."""
    out = [
        "<!-- not measured: definitions -->",
        "| attribute or hook | default | meaning (from the code) | declaration check |",
        "|---|---|---|---|",
    ]
    for m in members(cls):
        name = f"`{m.name}`" if m.kind == "attribute" else f"`{m.default}`".replace("|", "\\|")
        default = f"`{m.default}`" if m.kind == "attribute" else "(hook)"
        doc = m.doc.replace("|", "\\|")
        out.append(f"| {name} | {default} | {doc} | {checked_by(m.name)} |")
    return out


def page_block() -> list[str]:
    """The generated part of docs/plugins.md: one table per base."""
    out: list[str] = []
    for heading, cls in bases().items():
        out += [f"**{heading}**", "", *rows(cls), ""]
    return out[:-1]
