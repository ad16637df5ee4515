"""``benchmarks/seeds.py``: a plugin's strategy named in a ``--plugins`` file runs over seeds on
digits, each seed's ``pretrain`` and ``linear_eval`` commands with the plugin in the config, then
the table of the runs; ``--dry-run`` prints them. An unknown name exits 2 listing both kinds."""

from __future__ import annotations

import shlex
import subprocess
import sys

from tests.helpers.paths import ROOT

SCRIPT = ROOT / "benchmarks" / "seeds.py"
PLUGIN = '''from negatives import ExtraNegatives, NegativeStrategy, Step, register


@register("seeds_mine")
class Mine(NegativeStrategy):
    """A test strategy: no extra negatives."""

    def negatives(self, s: Step) -> ExtraNegatives:
        return ExtraNegatives()
'''


def test_a_plugin_files_strategy_gets_each_seeds_commands_and_the_table(tmp_path):
    plugin = tmp_path / "mine.py"
    plugin.write_text(PLUGIN)
    out = tmp_path / "runs"
    (out / "seeds_mine_s1" / "eval").mkdir(parents=True)  # seed 1 finished: skipped
    (out / "seeds_mine_s1" / "eval" / "linear_eval.json").write_text("{}")
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "seeds_mine", "--plugins", str(plugin), "--seeds", "0", "1",
         "--out", str(out), "--dry-run"],
        capture_output=True, text=True, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = [shlex.split(x) for x in done.stdout.splitlines()]
    assert len(lines) == 3  # seed 0's two commands, then the table
    train, evaluate, table = lines
    assert train[1:5] == ["-m", "pretrain", "--cfg", "digits_moco.yaml"]
    assert {"negatives.name=seeds_mine", f"plugins=[{plugin}]", "seed=0",
            f"out_dir={out / 'seeds_mine_s0'}"} <= set(train)  # fmt: skip
    assert evaluate[1:] == ["-m", "linear_eval", "--ckpt",
                            f"{out / 'seeds_mine_s0'}/checkpoints/last.pt"]  # fmt: skip
    assert table[1:4] == ["-m", "linear_eval", "table"]
    assert table[4:6] == [str(out / "seeds_mine_s0"), str(out / "seeds_mine_s1")]
    assert not (out / "seeds_mine_s0").exists()  # a dry run runs nothing


def test_an_unknown_name_exits_2_naming_both_kinds(capsys):
    from benchmarks import seeds

    assert seeds.main(["no_such_method", "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "'no_such_method' is neither a strategy nor a loss here" in err
    assert "negatives.name" in err and "loss.name" in err
