"""The performance page's summary of the loss baselines' step speeds states the range of the
table it summarises (the latest "negative baselines" table of benchmarks/RESULTS.md that
``benchmarks/step.py --mode all`` timed without CUDA's sync check), not a rounder one."""

from __future__ import annotations

import re

from tests.helpers.paths import ROOT


def _latest_baselines() -> dict[str, float]:
    """The latest table timed as a benchmark: not the GPU suite's ``sync`` part's (3 steps under
    CUDA's sync check, which its section says)."""
    log = (ROOT / "benchmarks" / "RESULTS.md").read_text()
    timed = [s for s in log.split("\n## ") if "\nnegative baselines, " in s
             and "set_sync_debug_mode('error')" not in s]  # fmt: skip
    section = timed[-1]
    table = section[section.rindex("\nnegative baselines, ") :].split("\n\n")[1]
    speeds = re.findall(r"^\| ([^|]+?) \| [^|]+ \| [^|]+ \| ([\d.]+)x \|", table, re.M)
    return {name: float(x) for name, x in speeds}


def test_the_loss_baselines_range_is_the_tables():
    speeds = _latest_baselines()
    assert "moco" in speeds and "hard" in speeds, speeds
    # the range is of the baselines against MoCo; FNC's step with its support forward is stated
    # on its own
    rest = [x for name, x in speeds.items() if name != "moco" and not name.startswith("fnc (")]
    page = (ROOT / "docs" / "performance.md").read_text()
    line = next(x for x in page.splitlines() if "The loss baselines' steps" in x)
    lo, hi = re.search(r"(\d\.\d+)-(\d\.\d+)x the speed of MoCo", line).groups()
    assert (float(lo), float(hi)) == (min(rest), max(rest)), line
    fnc = re.search(r"`fnc` (\d\.\d+)x", line).group(1)
    assert float(fnc) == speeds["fnc (4 support views)"], line
