"""Plugins: a strategy or loss of one's own, from an installed package's entry points
(``negmine.strategies`` / ``negmine.losses``) or a file named by the ``plugins:`` config key, is
found by name, gets the built-ins' checks, and a broken one is named, not a traceback. The worked
example, ``examples/plugin``, trains on digits by name, and a checkpoint trained with it evaluates
and exports with the plugin installed and without it (the encoder does not need it).

Plugins are installed for a subprocess only (a ``*.dist-info`` with the example's entry points on
its PYTHONPATH: what ``pip install -e examples/plugin`` gives importlib.metadata), so this test
session's registries stay the built-ins'; where CI installed the example, the "without" runs hide
the entry points.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from negmine_core.registry import PluginError, Registry, import_plugin
from pretrain import config
from pretrain.config import ConfigError
from tests.helpers.compat import tomllib
from tests.helpers.paths import ROOT
from tests.helpers.troubleshooting_quotes import assert_documented

pytestmark = pytest.mark.early  # among the suite's longest files: started first (tests/conftest.py)

EXAMPLE = ROOT / "examples" / "plugin"
HIDE = (  # the entry points of the negmine groups hidden (an installed example included)
    "import importlib.metadata as m; e = m.entry_points; m.entry_points = lambda **k: "
    "[] if str(k.get('group', '')).startswith('negmine.') else e(**k); "
)
TINY = ["model.width=8", "train.max_steps=3", "train.log_every=1", "eval.knn_every=0",
        "train.progress_bar=false", "data.num_workers=0"]  # fmt: skip


def fake_install(tmp: Path) -> Path:
    """A site folder holding the example's dist-info (its entry points, read from its
    pyproject.toml), as ``pip install -e examples/plugin`` leaves for importlib.metadata."""
    meta = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    info = tmp / "site" / f"negmine_example_plugin-{meta['version']}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {meta['name']}\nVersion: {meta['version']}\n"
    )
    groups = meta["entry-points"]
    (info / "entry_points.txt").write_text("".join(
        f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) for g, eps in groups.items()
    ))  # fmt: skip
    return tmp / "site"


def python(code: str, *args: str, site: Path | None, hide: bool = False,
           cwd: Path = ROOT) -> subprocess.CompletedProcess:  # fmt: skip
    paths = [str(site), str(EXAMPLE)] if site else []
    env = {**__import__("os").environ, "PYTHONPATH": ":".join([*paths, str(ROOT)])}
    return subprocess.run([sys.executable, "-c", (HIDE if hide else "") + code, *args], env=env,
                          cwd=cwd, capture_output=True, text=True, timeout=600)  # fmt: skip


def module(name: str) -> str:
    return (f"import runpy, sys; sys.argv[0] = {name!r}; "
            f"runpy.run_module({name!r}, run_name='__main__')")  # fmt: skip


def test_the_example_trains_by_name_then_evaluates_and_exports_with_and_without_it(tmp_path):
    site = fake_install(tmp_path)
    out = tmp_path / "run"
    done = python(module("pretrain"), "--cfg", "digits_moco.yaml", "negatives.name=batch_mix",
                  "loss.name=align_uniform", f"out_dir={out}", *TINY, "model.arch=resnet18",
                  "model.cifar_stem=false", site=site)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()
             if '"kind": "step"' in x]  # fmt: skip
    assert len(steps) == 3 and all(s["loss"] == s["loss"] for s in steps)
    ckpt = str(out / "checkpoints" / "last.pt")
    note = ("negative strategy 'batch_mix' (a plugin not installed here; the run used "
            "negmine-example-plugin 0.1.0)")  # fmt: skip
    for hide in (False, True):
        ev = python(module("linear_eval"), "knn", "--ckpt", ckpt, "--presets", "mioc",
                    site=None if hide else site, hide=hide)  # fmt: skip
        assert ev.returncode == 0, ev.stderr[-3000:]
        assert (note in ev.stderr) is hide, ev.stderr[-2000:]
        dest = tmp_path / f"r{int(hide)}.pth"
        ex = python(module("pretrain"), "export", "--ckpt", ckpt, "--to", "torchvision",
                    "--out", str(dest), site=None if hide else site, hide=hide)  # fmt: skip
        assert ex.returncode == 0 and dest.exists(), ex.stderr[-3000:]
        assert (note in ex.stderr) is hide, ex.stderr[-2000:]
    help_ = python(module("pretrain"), "--help", site=site)
    assert "batch_mix [plugin: entry point 'batch_mix = negmine_example.strategy:BatchMix'" in (
        help_.stdout
    )


def test_the_examples_own_tests_pass(tmp_path):
    done = python("import pytest, sys; sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', "
                  f"{str(EXAMPLE / 'tests')!r}]))", site=fake_install(tmp_path))  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]


def entry_points(monkeypatch: pytest.MonkeyPatch, *eps: tuple[str, str]) -> None:
    fake = [importlib.metadata.EntryPoint(n, v, "test.plugins") for n, v in eps]
    monkeypatch.setattr(importlib.metadata, "entry_points",
                        lambda group=None: [e for e in fake if e.group == group])  # fmt: skip


def test_a_broken_plugin_is_named_with_its_entry_point_and_breaks_nothing_else(monkeypatch):
    entry_points(monkeypatch, ("good", "negmine_example_absent_xyz:Cls"),
                 ("mine", "json:JSONDecoder"))  # fmt: skip
    things = Registry("thing", group="test.plugins")
    assert things.names() == ["mine"]  # listing never raises
    assert things.origin("mine") == (
        "entry point 'mine = json:JSONDecoder' in group test.plugins, unknown package"
    )
    with pytest.raises(ValueError, match=r"thing plugin 'good' \(entry point 'good = "
                       r"negmine_example_absent_xyz:Cls' in group test\.plugins, unknown package\)"
                       r" failed to import: ModuleNotFoundError"):  # fmt: skip
        things.get("good")
    with pytest.raises(ValueError, match=r"unknown thing 'mien' \(did you mean 'mine'\?\)"):
        things.get("mien")


def test_two_plugins_claiming_one_name_are_both_named(monkeypatch):
    entry_points(monkeypatch, ("dec", "json:JSONDecoder"), ("dec", "json:JSONEncoder"))
    things = Registry("thing", group="test.plugins")
    both = (r"thing 'dec' is already registered: claimed by json\.decoder\.JSONDecoder .*entry "
            r"point 'dec = json:JSONDecoder'.* and by json\.encoder\.JSONEncoder .*entry point "
            r"'dec = json:JSONEncoder'")  # fmt: skip
    with pytest.raises(ValueError, match=both):
        things.get("dec")


STRATEGY_FILE = '''
import torch
from negatives import ExtraNegatives, NegativeStrategy, Step, register

@register("file_keys")
class FileKeys(NegativeStrategy):
    """The batch keys as shared negatives (a test plugin file).

    Args:
        weight: scales the keys before normalising.
    """

    def __init__(self, weight: float = 1.0) -> None:
        super().__init__()
        self.weight = weight

    def negatives(self, s: Step) -> ExtraNegatives:
        k = self.weight * s.emb.k.detach()
        return ExtraNegatives(shared=torch.nn.functional.normalize(k, dim=1))
'''


def test_a_plugin_file_named_by_the_config_trains_and_a_broken_one_exits_2(tmp_path):
    (tmp_path / "mine.py").write_text(STRATEGY_FILE)
    (tmp_path / "broken.py").write_text("raise ImportError('no such thing')\n")
    args = ["--cfg", "digits_moco.yaml", "negatives.name=file_keys", "negatives.kwargs.weight=1e-1",
            f"out_dir={tmp_path / 'run'}", *TINY]  # fmt: skip
    done = python(module("pretrain"), *args, f"plugins=[{tmp_path / 'mine.py'}]", site=None,
                  hide=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    bad = python(module("pretrain"), *args, "plugins=[broken.py]", site=None, hide=True,
                 cwd=tmp_path)  # fmt: skip
    assert bad.returncode == 2, bad.stderr
    assert (
        "error: config key 'plugins' in the config: plugin 'broken.py' failed to import: "
        "ImportError: no such thing"
    ) in bad.stderr and "Traceback" not in bad.stderr


LOSS_MODULE = '''
from pretrain.losses import InfoNCE, register


@register("module_nce")
class ModuleNCE(InfoNCE):
    """InfoNCE from a module that the config's plugins name as module:Class (a test plugin)."""


class Unregistered(InfoNCE):
    """Never registered: a module:Class naming it is refused."""
'''


def test_a_module_class_naming_a_loss_in_plugins_trains_and_is_recorded(tmp_path):
    """``plugins: [module:Class]`` naming a loss (the other spelling than a file): it is imported,
    found registered as a loss, trains by name and is recorded in provenance with its file."""
    (tmp_path / "negmine_test_losses.py").write_text(LOSS_MODULE)
    out = tmp_path / "run"
    args = ["--cfg", "digits_moco.yaml", "loss.name=module_nce", f"out_dir={out}", *TINY]
    done = python(module("pretrain"), *args, "plugins=[negmine_test_losses:ModuleNCE]",
                  site=None, hide=True, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    steps = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()
             if '"kind": "step"' in x]  # fmt: skip
    assert len(steps) == 3 and all(math.isfinite(s["loss"]) for s in steps), steps
    records = json.loads((out / "provenance.json").read_text())["plugins"]
    digest = hashlib.sha256((tmp_path / "negmine_test_losses.py").read_bytes()).hexdigest()
    assert records == [{"kind": "loss", "name": "module_nce",
                        "class": "negmine_test_losses.ModuleNCE",
                        "file": str((tmp_path / "negmine_test_losses.py").resolve()),
                        "sha256": digest}], records  # fmt: skip
    wrong = python(module("pretrain"), *args, "plugins=[negmine_test_losses:Unregistered]",
                   site=None, hide=True, cwd=tmp_path)  # fmt: skip
    assert wrong.returncode == 2 and "Traceback" not in wrong.stderr, wrong.stderr[-3000:]
    assert ("plugin 'negmine_test_losses:Unregistered' is not a registered strategy or loss"
            in wrong.stderr), wrong.stderr[-3000:]  # fmt: skip


LIAR_FILE = '''
import torch
from negatives import ExtraNegatives, NegativeStrategy, Step, register

@register("liar")
class Liar(NegativeStrategy):
    """Declares no host sync (the default) but reads the device every step, and adds far more
    ops than the bound (a test plugin file)."""

    def negatives(self, s: Step) -> ExtraNegatives:
        if float(s.emb.k.sum()) > 1e9:  # a host sync
            pass
        x = s.emb.k.detach()
        for _ in range(60):  # ~120 ops: far above +15 %
            x = torch.nn.functional.normalize(x + 0.0, dim=1)
        return ExtraNegatives(shared=x)
'''
COUNT_LIAR = """
import sys
from pathlib import Path
from negmine_core.registry import import_plugin
import_plugin(sys.argv[1])
import negatives
from tests.helpers import count_ops, count_steps, op_table, sync_table
for check in (
    lambda: sync_table.check("infonce/liar", count_steps.count_pair(
        Path(sys.argv[2]), "infonce", "liar", "")),
    lambda: op_table.check_bound("strategy", "liar", negatives.strategies.get("liar"),
        "digits_moco", count_ops.count("digits_moco", "liar").count, 271),
):
    try:
        check()
        print("PASSED")
    except AssertionError as e:
        print("FAILED:", str(e).splitlines()[0])
"""


def test_a_plugin_that_syncs_or_adds_far_too_many_ops_fails_naming_itself(tmp_path):
    """What test_step_syncs.py and test_step_ops.py assert of every registered strategy, on a
    plugin that declares 0 syncs but syncs and adds ~120 ops: both name the class and what to
    fix (syncs_per_step; the hook adding the ops)."""
    (tmp_path / "liar.py").write_text(LIAR_FILE)
    done = python(COUNT_LIAR, str(tmp_path / "liar.py"), str(tmp_path / "run"), site=None,
                  hide=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    syncs, ops = [x for x in done.stdout.splitlines() if x.startswith(("PASSED", "FAILED"))]
    assert syncs.startswith("FAILED: infonce/liar: 1 host syncs per step, declared 0: "), syncs
    assert "negmine_plugin_liar_" in syncs and ".Liar.syncs_per_step = 0 (strategy 'liar')" in syncs
    assert ops.startswith("FAILED: strategy 'liar' (negmine_plugin_liar_"), ops
    assert ".Liar.negatives()): " in ops and "more than +15% over plain MoCo's 271" in ops, ops


def test_the_plugin_messages_are_quoted_in_troubleshooting(tmp_path, monkeypatch):
    """The plugin errors and warnings, word for word in docs/troubleshooting.md (the parts a
    message shares with every case; the quoted examples' own names and files differ)."""
    page = (ROOT / "docs" / "troubleshooting.md").read_text()
    (tmp_path / "broken.py").write_text("raise ImportError('no such thing')\n")
    monkeypatch.chdir(tmp_path)

    with pytest.raises(ConfigError) as e:
        config.load("digits_moco.yaml", ["plugins=[broken.py]"])
    assert f"`{e.value}`" in page, e.value
    entry_points(monkeypatch, ("mine", "negmine_absent_pkg_xyz.mod:Mine"))
    things = Registry("negative strategy", group="test.plugins")
    with pytest.raises(ValueError) as e:
        things.get("mine")
    head = str(e.value).split(" (entry point")[0]
    assert f"`config key 'negatives.name': {head} (entry point 'mine = " in page, head
    assert "failed to import: ModuleNotFoundError: ...`" in page


def test_python_m_slurm_passes_a_plugin_file_on_as_an_absolute_path(tmp_path):
    """The SLURM job may start elsewhere: task_configs gives it the plugin file's absolute path
    (an installed plugin needs nothing: the job finds its entry points)."""
    (tmp_path / "mine.py").write_text(STRATEGY_FILE)
    code = ("import sys; from slurm.__main__ import task_configs; "
            "[(cfg, ov)] = task_configs('digits_moco.yaml', sys.argv[1:], []); "
            "print(cfg.plugins, [o for o in ov if o.startswith('plugins=')][-1])")  # fmt: skip
    done = python(code, "plugins=[mine.py]", "negatives.name=file_keys", "out_dir=run",
                  site=None, hide=True, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    path = str(tmp_path.resolve() / "mine.py")
    assert done.stdout.strip() == f'[{path!r}] plugins=["{path}"]', done.stdout  # the last wins


def test_a_folder_named_like_a_plugin_file_is_called_a_folder(tmp_path):
    (tmp_path / "x.py").mkdir()
    with pytest.raises(PluginError) as info:
        import_plugin(str(tmp_path / "x.py"))
    message = str(info.value)
    assert message == (
        f"plugin {str(tmp_path / 'x.py')!r} is a folder, not a Python file: name the .py file (or "
        "give a package as a module name, without .py)"
    )
    assert_documented(f"config key 'plugins' in the config: {message}")


TWO_OF_ONE_NAME = """
from negatives import ExtraNegatives, NegativeStrategy, Step, register


@register("twice_in_one_file")
class Mine(NegativeStrategy):
    def negatives(self, s: Step) -> ExtraNegatives:
        return ExtraNegatives()


@register("twice_in_one_file")
class Mine(NegativeStrategy):  # noqa: F811
    def negatives(self, s: Step) -> ExtraNegatives:
        return ExtraNegatives(shared=s.k.detach())
"""


def test_two_classes_of_one_qualname_in_one_file_are_a_duplicate(tmp_path, monkeypatch):
    """N02: ``same_class`` compared ``inspect.getsourcelines``, which (Python < 3.13) finds the
    first class of that name for both, so the second registered silently."""
    from negatives.base import strategies
    from negmine_core.registry import PluginError, import_plugin

    strategies.names()  # scanned, then the registry put back after the test
    monkeypatch.setattr(strategies, "_classes", dict(strategies._classes))

    (tmp_path / "two.py").write_text(TWO_OF_ONE_NAME)
    with pytest.raises(PluginError, match="negative strategy 'twice_in_one_file' is already "):
        import_plugin(str(tmp_path / "two.py"))
