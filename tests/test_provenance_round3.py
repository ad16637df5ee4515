"""Provenance names only this package's own commit: a copy vendored inside
another repository records no commit (not that repository's HEAD), an untracked file in the
packages makes the code dirty, and unknown stays null at the top level too."""

from __future__ import annotations

import subprocess
from pathlib import Path

from pretrain.runtime import provenance


def git(where: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(where), *args], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip


def repo(where: Path) -> None:
    where.mkdir(parents=True, exist_ok=True)
    git(where, "init", "-q")
    (where / "README").write_text("x\n")
    git(where, "add", "README")
    git(where, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")


def as_if_imported_from(monkeypatch, root: Path) -> None:
    (root / "pretrain" / "runtime").mkdir(parents=True, exist_ok=True)
    monkeypatch.setattr(provenance, "__file__", str(root / "pretrain/runtime/provenance.py"))


def test_a_copy_vendored_in_another_repository_records_no_commit(tmp_path, monkeypatch):
    repo(tmp_path / "other")
    as_if_imported_from(monkeypatch, tmp_path / "other" / "third_party" / "negmine")
    got = provenance.code_version()
    assert got["commit"] is None and got["dirty"] is None, got


def test_an_untracked_file_in_the_packages_is_dirty(tmp_path, monkeypatch):
    repo(tmp_path / "own")
    as_if_imported_from(monkeypatch, tmp_path / "own")
    clean = provenance.code_version()
    assert clean["commit"] == git(tmp_path / "own", "rev-parse", "HEAD") and clean["dirty"] is False
    (tmp_path / "own" / "pretrain" / "mine.py").write_text("x = 1\n")
    assert provenance.code_version()["dirty"] is True


def test_unknown_stays_null_at_the_top_level():
    base = {"commit": None, "wall_s": 1.0}
    assert provenance.summarize([{**base, "dirty": None}])["dirty"] is None
    assert provenance.summarize([{**base, "dirty": None}, {**base, "dirty": True}])["dirty"] is True
    assert provenance.summarize([{**base, "dirty": False}])["dirty"] is False
