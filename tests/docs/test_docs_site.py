"""The documentation site works offline: ``mkdocs build --strict`` (as CI runs it) succeeds with
no network, the built pages load no script, style or font from another host, and the methods
page's equations come with the MathJax that typesets them, served from the site itself
(scripts/mkdocs_mathjax.py copies it from the installed django-static-mathjax)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.paths import ROOT

pytest.importorskip("mkdocs", reason='the docs extra is not installed (pip install -e ".[docs]")')
pytest.importorskip("material", reason='the docs extra is not installed (pip install -e ".[docs]")')
pytest.importorskip("mathjax", reason='the docs extra is not installed (pip install -e ".[docs]")')

# a tag that makes the browser fetch something: a script, a stylesheet/preload/font link, an image
FETCHING = re.compile(
    r"<script\b[^>]*\bsrc=\"([^\"]*)\"|<link\b[^>]*\bhref=\"([^\"]*)\"|<img\b[^>]*\bsrc=\"([^\"]*)\""
)


def _offline() -> list[str]:
    """``unshare -n`` (a new network namespace: no route anywhere) where it works, as root has it
    on CI's machine; else nothing (the build then runs with whatever network there is)."""
    try:
        ok = subprocess.run(["unshare", "-n", "true"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return []
    return ["unshare", "-n"] if ok.returncode == 0 else []


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built as CI builds it, with no network where the machine allows that."""
    out = tmp_path_factory.mktemp("site")
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(out)]
    run = subprocess.run(
        _offline() + cmd, cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    return out


def test_no_page_loads_anything_from_another_host(site):
    pages = sorted(site.rglob("*.html"))
    assert len(pages) >= 15
    remote = []
    for page in pages:
        for m in FETCHING.finditer(page.read_text()):
            url = next(g for g in m.groups() if g is not None)
            if re.match(r"(?i)(https?:)?//", url):
                remote.append(f"{page.relative_to(site)}: {url}")
    assert not remote, remote
    config = (ROOT / "mkdocs.yml").read_text()
    assert not re.search(r"^\s*-\s*(https?:)?//", config, re.M), "a remote asset in mkdocs.yml"


def test_the_methods_page_has_its_equations_and_a_local_mathjax(site):
    page = (site / "methods" / "index.html").read_text()
    blocks = re.findall(r'<div class="arithmatex">\\\[(.*?)\\\]</div>', page, re.S)
    source = (ROOT / "docs" / "methods.md").read_text()
    assert len(blocks) == source.count("$$") // 2 >= 9
    assert any(r"\frac" in b for b in blocks)
    scripts = re.findall(r'<script\b[^>]*\bsrc="([^"]*)"', page)
    mathjax = [s for s in scripts if s.endswith("tex-mml-chtml.js")]
    assert mathjax == ["../assets/mathjax/tex-mml-chtml.js"], scripts
    # its configuration first, then MathJax itself, then (at view time) what it loads on demand
    assert scripts.index("../javascripts/mathjax.js") < scripts.index(mathjax[0])
    local = site / "assets" / "mathjax"
    assert (local / "tex-mml-chtml.js").stat().st_size > 500_000
    fonts = list((local / "output" / "chtml" / "fonts" / "woff-v2").glob("MathJax_*.woff"))
    assert len(fonts) >= 20
    assert (local / "input" / "tex" / "extensions" / "ams.js").is_file()
