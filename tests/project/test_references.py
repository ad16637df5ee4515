"""negmine is licensed, citable, and cites from one BibTeX file: LICENSE is the MIT text that
pyproject.toml declares; CITATION.cff is CFF 1.2.0 with the package's version and license;
docs/references.bib (read by scripts/gen_references.py, which writes docs/references.md) has an
entry with every author for each method, protocol and solver used; every page that dates a cited
paper in prose ("Feeney & Hughes 2023") gives the year of its entry; the README ends with how to
cite."""

from __future__ import annotations

import html
import re
import sys

import pytest
import yaml

from tests.helpers.paths import ROOT

sys.path.insert(0, str(ROOT / "scripts"))
import gen_references  # noqa: E402

ENTRIES = gen_references.parse(gen_references.BIB.read_text(encoding="utf-8"))
# pyproject's [project] version and license, read by line (tomllib is Python 3.11+)
PYPROJECT = dict(
    re.findall(r'^(version|license) = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M)
)
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
#: the library's docstrings and the shipped configs' comments cite papers too
SOURCES = [p for room in ("pretrain", "negatives", "linear_eval", "slurm", "negmine_core")
           for p in sorted((ROOT / room).rglob("*")) if p.suffix in (".py", ".yaml")]  # fmt: skip

# every method, protocol and solver the toolkit implements or follows -> its entry
NEEDED = {
    "MoCo v1": "he2020moco", "MoCo v2": "chen2020mocov2", "SimCLR / NT-Xent": "chen2020simclr",
    "MiOC": "jain2025mioc", "MoCHi": "kalantidis2020mochi", "SupCon": "khosla2020supcon",
    "SINCERE": "feeney2023sincere", "FIRM": "lunardi2025firm", "CIDER": "ming2023cider",
    "debiased": "chuang2020debiased", "hard negatives": "robinson2021hard",
    "ring": "wu2021ring", "decoupled": "yeh2022decoupled", "i-Mix": "lee2021imix",
    "AdCo": "hu2021adco", "FNC": "huynh2022fnc", "CutPaste": "li2021cutpaste",
    "outlier exposure": "hendrycks2019oe", "rotations": "gidaris2018rotations",
    "kNN protocol (InstDisc)": "wu2018instdisc", "ImageNet-100 list (CMC)": "tian2020cmc",
    "OpenOOD v1.5": "zhang2023openood", "Mahalanobis": "lee2018mahalanobis",
    "libsvm": "chang2011libsvm", "WSS2": "fan2005wss2", "vMF-kappa": "li2024vmf",
    "one-class SVM": "scholkopf2001ocsvm",
}  # fmt: skip


def test_every_method_protocol_and_solver_has_an_entry_with_every_author():
    keys = {e["key"]: e for e in ENTRIES}
    assert len(keys) == len(ENTRIES), "a key appears twice"
    missing = {what: key for what, key in NEEDED.items() if key not in keys}
    assert not missing, missing
    for e in ENTRIES:
        assert not re.search(r"\bet al\b|\bothers\b", e["author"]), e["key"]
        assert re.fullmatch(r"(19|20)\d\d", e["year"]), e["key"]
        assert e["type"] in ("software", "book") or e.get("url"), f"{e['key']}: no url"


def test_the_parser_reads_nested_braces_and_refuses_an_entry_without_a_year():
    text = "% ---- g ----\n@misc{k1,\n  author = {A, B. and {van C}, D.},\n  title = {{X}: y},\n"
    (e,) = gen_references.parse(text + "  year = {2020}\n}\n")
    assert (e["key"], e["group"], e["title"]) == ("k1", "g", "{X}: y")
    assert gen_references.short(e) == "A & van C"
    with pytest.raises(ValueError, match="k1: no year"):
        gen_references.parse(text + "}\n")


def _dated_mentions(text: str) -> list[tuple[str, str]]:
    """("Label", "YEAR") for every "Label YEAR" or "Label, YEAR" in prose."""
    labels = sorted({gen_references.short(e) for e in ENTRIES}, key=len, reverse=True)
    pattern = "|".join(re.escape(label) for label in labels)
    return re.findall(rf"(?<![\w&] )\b({pattern}),? \(?((?:19|20)\d\d)\b", text)


def test_every_page_dates_a_cited_paper_as_its_entry_does():
    years: dict[str, set[str]] = {}
    for e in ENTRIES:
        years.setdefault(gen_references.short(e), set()).add(e["year"])
    wrong = []
    for page in PAGES + SOURCES:
        if "results/logs" in str(page):
            continue
        text = html.unescape(page.read_text(encoding="utf-8"))  # the generated pages escape &
        for label, year in _dated_mentions(text):
            if year not in years[label]:
                wrong.append(f"{page.relative_to(ROOT)}: {label} {year} (bib: {years[label]})")
    assert not wrong, "\n".join(wrong)
    # the check finds a wrong year
    found = _dated_mentions("SINCERE (Feeney & Hughes 2024, eq. 12)")
    assert found == [("Feeney & Hughes", "2024")]


def test_license_and_citation_match_pyproject():
    text = (ROOT / "LICENSE").read_text()
    assert PYPROJECT["license"] == "MIT" and text.startswith("MIT License\n")
    assert "Copyright (c) 2026 the negmine authors" in text
    assert 'THE SOFTWARE IS PROVIDED "AS IS"' in text
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0"
    assert {"cff-version", "message", "title", "authors"} <= cff.keys()
    assert str(cff["version"]) == PYPROJECT["version"] and cff["license"] == PYPROJECT["license"]
    for author in cff["authors"] + [a for r in cff.get("references", []) for a in r["authors"]]:
        assert "name" in author or {"family-names", "given-names"} <= author.keys(), author
    for ref in cff.get("references", []):
        assert {"type", "title", "authors"} <= ref.keys(), ref


def test_the_readme_ends_with_how_to_cite():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    last = text.rsplit("\n## ", 1)[1]
    assert last.startswith("How to cite"), last[:40]
    assert "CITATION.cff" in last and "docs/references.bib" in last


def test_the_code_cites_papers_not_a_missing_notes_file():
    """SEMANTICS.md is not in the repository: a library module or shipped config cites the
    paper and equation instead."""
    packages = ("pretrain", "negatives", "linear_eval", "negmine_core", "slurm")
    cited = [
        str(path.relative_to(ROOT))
        for package in packages
        for path in sorted((ROOT / package).rglob("*"))
        if path.suffix in (".py", ".yaml") and "SEMANTICS" in path.read_text(encoding="utf-8")
    ]
    assert cited == []
