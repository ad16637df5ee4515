"""The README's commands run as written: the quick start is two commands that bash parses, its
first makes and enters a virtual environment before ``pip install``, and every command of every
code block names a script that exists, a module of ours with flags its own ``--help`` lists, a
shipped config and config keys that ``pretrain.config`` accepts.

The commands are read the way bash reads them (continuation lines joined, comments dropped,
``&&``/``;``/``|`` split), and each flag is looked up in the real command's ``--help`` (modules,
in this process) or in the script's text (``"--flag"`` in an argparse script, ``--flag`` in a
shell script)."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
import subprocess

import pytest

from pretrain import config
from tests.helpers.paths import ROOT

README = ROOT / "README.md"
MODULES = ("pretrain", "linear_eval", "slurm")


def code_blocks(markdown: str) -> list[tuple[str, str]]:
    """(language, text) of every fenced block."""
    return re.findall(r"^```(\w*)\n(.*?)^```", markdown, flags=re.S | re.M)


def commands(block: str) -> list[list[str]]:
    """The simple commands of a block, as bash would split them (continuations joined)."""
    text = re.sub(r"\\\n", " ", block)
    out = []
    for line in text.splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
        lexer.whitespace_split, lexer.commenters = True, "#"
        current: list[str] = []
        for token in lexer:
            if token in ("&&", "||", ";", "|", "&"):
                out.append(current)
                current = []
            else:
                current.append(token)
        out.append(current)
    return [c for c in out if c]


def quick_start() -> str:
    text = README.read_text()
    section = text.split("## Quick start", 1)[1]
    return code_blocks(section)[0][1]


def help_text(module: str, head: list[str]) -> str:
    """``python -m MODULE HEAD --help``, run in this process."""
    if module == "pretrain":
        from pretrain.__main__ import main
    elif module == "linear_eval":
        from linear_eval.cli.main import main
    else:
        from slurm.__main__ import main
    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
        with pytest.raises(SystemExit) as done:
            main([*head, "--help"])
    assert done.value.code == 0, f"python -m {module} {' '.join(head)} --help: {out.getvalue()}"
    return out.getvalue()


def flags(args: list[str]) -> list[str]:
    return [a.split("=", 1)[0] for a in args if a.startswith("--") and len(a) > 2]


def check_module(module: str, args: list[str]) -> list[str]:
    problems = []
    if module == "pytest":
        return []
    if module not in MODULES:
        return [f"python -m {module}: not a module of this project"]
    head = []
    if module == "linear_eval":
        sub = args[0] if args and not args[0].startswith("-") else None
        head = [sub] if sub else ["--ckpt", "X"]
    elif module == "pretrain" and args[:1] == ["export"]:
        head = ["export"]
    elif module == "slurm" and args[:1] == ["linear_eval"]:
        head, args = ["linear_eval"], args[1 : args.index("--")] if "--" in args else args[1:]
    text = help_text(module, head)
    for flag in flags(args):
        if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", text):
            problems.append(f"python -m {module} {' '.join(head)}: no flag {flag}")
    if module in ("pretrain", "slurm") and "--cfg" in args:
        i = args.index("--cfg")
        overrides = [a for a in args[i + 2 :] if "=" in a and not a.startswith("-")]
        try:
            config.load(args[i + 1], overrides)
        except config.ConfigError as e:
            problems.append(f"python -m {module} --cfg {args[i + 1]}: {e}")
    return problems


def check_script(path: str, args: list[str]) -> list[str]:
    file = ROOT / path
    if not file.is_file():
        return [f"{path}: no such file"]
    text = file.read_text()
    quote = '"' if file.suffix == ".py" else ""
    return [f"{path}: no flag {flag}" for flag in flags(args)
            if f"{quote}{flag}{quote}" not in text]  # fmt: skip


def check_command(tokens: list[str]) -> list[str]:
    while tokens and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", tokens[0]):  # VAR=value prefixes
        tokens = tokens[1:]
    if tokens[:1] == ["nice"]:
        tokens = tokens[3:] if tokens[1:2] == ["-n"] else tokens[1:]
    if not tokens:
        return []
    prog, args = tokens[0], tokens[1:]
    if prog in ("python", "python3"):
        if args[:1] == ["-m"]:
            return [] if args[1] in ("venv", "pip") else check_module(args[1], args[2:])
        return check_script(args[0], args[1:]) if args else []
    if prog == "torchrun":
        return check_module(args[args.index("-m") + 1], args[args.index("-m") + 2 :])
    if prog == "bash" and args and not args[0].startswith("-"):
        return check_script(args[0], args[1:])
    if prog in ("pip", "pip3") and "-e" in args:
        extras = re.findall(r"\[([\w,]+)\]", args[args.index("-e") + 1])
        section = (ROOT / "pyproject.toml").read_text().split("[project.optional-dependencies]")[1]
        declared = re.findall(r"^(\w+) = \[", section.split("\n[", 1)[0], flags=re.M)
        return [f"pip install: no extra {e}" for x in extras for e in x.split(",")
                if e not in declared]  # fmt: skip
    return []


def test_quick_start_is_two_commands_that_bash_parses_with_a_venv_step():
    block = quick_start()
    lines = [s for s in re.sub(r"\\\n", " ", block).splitlines() if s.strip()]
    assert len(lines) == 2, lines
    parsed = subprocess.run(["bash", "-n"], input=block, capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stderr
    first = [c[:3] for c in commands(lines[0])]
    venv = next(i for i, c in enumerate(first) if c[1:3] == ["-m", "venv"])
    activate = next(i for i, c in enumerate(first) if c[0] in (".", "source"))
    pip = next(i for i, c in enumerate(first) if "pip" in c[:3] and "install" in lines[0])
    run = next(i for i, c in enumerate(first) if c[1:3] == ["-m", "pretrain"])
    assert venv < activate < pip < run  # the environment exists and is active before pip
    assert commands(lines[1])[0][:3] == ["python", "-m", "pytest"]


def test_every_readme_command_names_what_exists():
    problems = []
    for lang, block in code_blocks(README.read_text()):
        if lang not in ("bash", "sh", "shell", ""):
            continue
        for tokens in commands(block):
            problems += check_command(tokens)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("command", "problem"),
    [
        ("python benchmarks/ocsvm.py --device cuda --no-triton", "no flag --no-triton"),
        ("python benchmarks/nope.py", "no such file"),
        ("python -m linear_eval table runs/* --baselines X", "no flag --baselines"),
        ("python -m pretrain --cfg digits_moco.yaml train.epoch=3", "train.epochs"),
        ("python -m pretrain --cfg nope.yaml", "not found"),
        ("bash benchmarks/gpu_suite.sh --quick-report D", "no flag --quick-report"),
        ('pip install -e ".[dev,gpu]"', "no extra gpu"),
        ("torchrun --nproc_per_node 2 -m pretrain --cfg x.yaml", "not found"),
    ],
)
def test_the_check_finds_a_wrong_command(command, problem):
    found = [p for tokens in commands(command) for p in check_command(tokens)]
    assert any(problem in p for p in found), found
