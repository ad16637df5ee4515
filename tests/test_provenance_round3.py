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


def test_the_config_file_given_to_cfg_is_recorded_resolved_with_its_sha256(tmp_path, monkeypatch):
    """The segment names the file given to ``--cfg`` (a relative path, resolved) and hashlib's
    sha256 of its bytes; a config built in code records null for both."""
    import hashlib
    import json
    import shutil

    from inproc import pretrain
    from test_mutations_round3 import SMALL

    from pretrain import config
    from pretrain.engine import loop

    cfg_file = tmp_path / "mine.yaml"
    shutil.copy(config.CONFIG_DIR / "digits_moco.yaml", cfg_file)
    with cfg_file.open("a") as f:
        f.write("# my own copy\n")
    monkeypatch.chdir(tmp_path)
    done = pretrain("--cfg", "mine.yaml", "out_dir=run", *SMALL, "train.max_steps=1")
    assert done.returncode == 0, done.stderr[-2000:]
    prov = json.loads((tmp_path / "run" / provenance.FILE).read_text())
    (seg,) = prov["segments"]
    assert seg["config_file"] == str(cfg_file.resolve())
    assert seg["config_sha256"] == hashlib.sha256(cfg_file.read_bytes()).hexdigest()
    assert prov["config_sha256"] == seg["config_sha256"]

    built = config.load("digits_moco.yaml", [f"out_dir={tmp_path / 'built'}", *SMALL,
                                             "train.max_steps=1"])  # fmt: skip
    assert loop.main(built) == 0
    seg = json.loads((tmp_path / "built" / provenance.FILE).read_text())["segments"][0]
    assert seg["config_file"] is None and seg["config_sha256"] is None


def test_a_shipped_config_is_recorded_relative_to_the_package_tree():
    """A shipped recipe's path names no directory of the measuring machine (kept logs are
    refused with one); its sha256 is hashlib's of the file."""
    import hashlib

    from pretrain import config

    shipped = config.CONFIG_DIR / "digits_mioc.yaml"
    rec = provenance.config_record(shipped)
    assert rec == {"config_file": "pretrain/configs/digits_mioc.yaml",
                   "config_sha256": hashlib.sha256(shipped.read_bytes()).hexdigest()}  # fmt: skip


def test_outside_any_repository_commit_and_dirty_stay_null(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))  # no enclosing repository
    as_if_imported_from(monkeypatch, tmp_path / "plain")
    got = provenance.code_version()
    assert got["commit"] is None and got["dirty"] is None, got
    base = {"wall_s": 1.0, **got}
    assert provenance.summarize([base])["dirty"] is None
