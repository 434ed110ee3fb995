"""Reading a dataset the same way from a folder, a clone or a tarball."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from quiclab.datasets.sources.files import iter_files, sha256_file
from quiclab.errors import DataError

from .fixtures import QirTree, pack_tarball


def test_folder_and_tarball_give_the_same_files(qir_tree: QirTree, tmp_path: Path):
    tarball = pack_tarball(qir_tree, tmp_path / "qir.tar.xz")
    from_dir = dict(iter_files(qir_tree.root))
    from_tar = dict(iter_files(tarball))
    assert from_dir == from_tar
    # Paths start at the dataset root whatever wraps it (the tarball's wrapper folder).
    assert set(from_dir) == {qir_tree.rel(p) for p in qir_tree.files()}
    assert all(rel.startswith(("results/", "analysis-pipeline/")) for rel in from_dir)


def test_a_clone_with_git_and_stray_files_reads_the_same(qir_tree: QirTree, tmp_path: Path):
    (qir_tree.root / ".git").mkdir()
    (qir_tree.root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (qir_tree.root / "README.md").write_text("not under a dataset folder\n")
    rels = [rel for rel, _ in iter_files(qir_tree.root)]
    assert not any(".git" in r or r == "README.md" for r in rels)


def test_suffix_and_skip_filters(qir_tree: QirTree):
    only_json = [rel for rel, _ in iter_files(qir_tree.root, suffixes=(".json",))]
    assert only_json and all(r.endswith(".json") for r in only_json)
    no_perf = [rel for rel, _ in iter_files(qir_tree.root, skip=("out.perf",))]
    assert not any("out.perf" in r for r in no_perf)


def test_missing_source(tmp_path: Path):
    with pytest.raises(DataError, match="does not exist"):
        list(iter_files(tmp_path / "nowhere.tar.xz"))


def test_not_a_tarball_is_refused(tmp_path: Path):
    bogus = tmp_path / "bogus.tar.xz"
    bogus.write_bytes(b"\x00this is no archive" * 100)
    with pytest.raises(DataError) as err:
        list(iter_files(bogus))
    assert err.value.path == str(bogus) and "not a readable tar archive" in err.value.reason


def test_truncated_tarball_is_refused(qir_tree: QirTree, tmp_path: Path):
    tarball = pack_tarball(qir_tree, tmp_path / "qir.tar.xz")
    cut = tmp_path / "cut.tar.xz"
    cut.write_bytes(tarball.read_bytes()[: tarball.stat().st_size // 2])
    with pytest.raises(DataError) as err:
        list(iter_files(cut))
    assert err.value.path == str(cut)
    assert "truncated or corrupt archive" in err.value.reason


def test_sha256_of_a_file_and_of_a_folder(qir_tree: QirTree, tmp_path: Path):
    tarball = pack_tarball(qir_tree, tmp_path / "qir.tar.xz")
    assert sha256_file(tarball) == hashlib.sha256(tarball.read_bytes()).hexdigest()
    before = sha256_file(qir_tree.root)
    assert before == sha256_file(qir_tree.root)  # stable
    (qir_tree.buffer_rep(1) / "output.txt").write_text("changed\n")
    assert sha256_file(qir_tree.root) != before
