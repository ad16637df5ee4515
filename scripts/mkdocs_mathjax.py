"""MkDocs hook: serve MathJax from the site itself, so the equations render offline.

mkdocs.yml loads ``assets/mathjax/tex-mml-chtml.js`` (after ``javascripts/mathjax.js``, its
configuration); this hook adds that file and the parts it loads at view time (fonts, TeX
extensions, the menu and accessibility modules) to the site from the ``django-static-mathjax``
package (MathJax 3.2.2, installed by ``pip install -e ".[docs]"``), at ``mkdocs build`` and
``mkdocs serve`` alike. Nothing is fetched from the network at build time or at view time, and
nothing of MathJax is committed here.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File, Files

TARGET = "assets/mathjax"  # where the site holds MathJax; mkdocs.yml names TARGET/ENTRY
ENTRY = "tex-mml-chtml.js"
PARTS = ("a11y", "adaptors", "input", "output", "sre", "ui")  # loaded by ENTRY on demand


def mathjax_dir() -> Path:
    """The es5 folder of the installed MathJax, or a PluginError saying what to install."""
    spec = importlib.util.find_spec("mathjax")  # a namespace package up to 3.2.2.0: no origin
    for base in (spec.submodule_search_locations or []) if spec else []:
        root = Path(base) / "static" / "mathjax" / "es5"
        if (root / ENTRY).is_file():
            return root
    raise PluginError(
        "MathJax for the documentation's equations is not installed: "
        'pip install -e ".[docs]" (it brings django-static-mathjax, the MathJax files)'
    )


def on_files(files: Files, config: Any, **kwargs: Any) -> Files:
    root = mathjax_dir()
    paths = [root / ENTRY]
    for part in PARTS:
        paths += sorted(p for p in (root / part).rglob("*") if p.is_file())
    for path in paths:
        uri = f"{TARGET}/{path.relative_to(root).as_posix()}"
        files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files
