"""iter_files on a hand-made tree, as a folder and as a tarball with directory entries:
which paths come out under each filter, listed by hand."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import pytest

from quiclab.datasets.sources.files import iter_files

#: (path, content) in the order a tarball lists them; "/" at the end: a directory entry.
MEMBERS = [("wrap/", b""), ("wrap/README.md", b"outside the dataset's folders"),
           ("wrap/results/", b""), ("wrap/results/a.txt", b"a"),
           ("wrap/results/out.perf", b"perf"), ("wrap/results/r.json", b"{}"),
           ("wrap/configs/", b""), ("wrap/configs/c.json", b"[]")]


def _tarball(path: Path) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in MEMBERS:
            info = tarfile.TarInfo(name.rstrip("/"))
            if name.endswith("/"):
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def _folder(root: Path) -> Path:
    for name, data in MEMBERS:
        if name.endswith("/"):
            (root / name).mkdir(parents=True, exist_ok=True)
        else:
            (root / name).write_bytes(data)
    return root / "wrap"


@pytest.mark.parametrize(("filters", "expected"), [
    ({}, {"results/a.txt", "results/out.perf", "results/r.json", "configs/c.json"}),
    ({"suffixes": (".json",)}, {"results/r.json", "configs/c.json"}),
    ({"skip": ("out.perf",)}, {"results/a.txt", "results/r.json", "configs/c.json"}),
    ({"suffixes": (".json", ".perf"), "skip": ("configs/",)},
     {"results/out.perf", "results/r.json"}),
])
def test_each_filter_keeps_exactly_these_paths(tmp_path, filters, expected):
    tar = dict(iter_files(_tarball(tmp_path / "t.tar.gz"), **filters))
    folder = dict(iter_files(_folder(tmp_path / "f"), **filters))
    assert set(tar) == set(folder) == expected
    assert tar == folder
    assert tar.get("results/r.json", b"{}") == b"{}"
