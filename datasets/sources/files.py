"""Read a dataset from a tarball, an extracted folder or a repository clone, the same way.

``iter_files(source)`` yields ``(relative_path, data_bytes)`` for every regular
file, streaming through a ``.tar``/``.tar.xz``/``.tar.gz`` once (xz cannot seek)
or walking a directory. Relative paths always start at the dataset's own root
(``results/…``, ``analysis-pipeline/…``), whatever wraps them; with
``markers=None`` they are the paths inside the archive or folder as they are
(a leading ``./`` removed), for a dataset whose root has no marker folder.
"""

from __future__ import annotations

import hashlib
import lzma
import os
import tarfile
import zlib
from collections.abc import Iterator
from pathlib import Path

from quiclab.errors import DataError

#: Top-level folders of the tumi8/quic-10g-paper layout; used to find the root.
ROOT_MARKERS = ("results", "analysis-pipeline", "configs")


def _strip_to_root(parts: list[str],
                   markers: tuple[str, ...] | None = ROOT_MARKERS) -> list[str] | None:
    if markers is None:
        kept = [p for p in parts if p not in ("", ".")]
        return kept or None
    for i, part in enumerate(parts):
        if part in markers:
            return parts[i:]
    return None


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())


def iter_files(source: Path, suffixes: tuple[str, ...] | None = None,
               skip: tuple[str, ...] = (),
               markers: tuple[str, ...] | None = ROOT_MARKERS) -> Iterator[tuple[str, bytes]]:
    """Yield (relative path, bytes) for each file under the dataset root.

    ``suffixes`` keeps only files whose name ends with one of them; ``skip``
    drops paths containing any of those substrings (e.g. perf traces for a
    quick ingest); ``markers`` names the dataset's top-level folders (files
    outside them are not yielded), or None for every file, path as stored.
    """
    source = Path(source)
    if not source.exists():
        raise DataError(source, "dataset source does not exist")
    if source.is_file():
        try:
            tar = tarfile.open(source, mode="r:*")  # noqa: SIM115 — closed by `with tar` below
        except (tarfile.ReadError, lzma.LZMAError, zlib.error, EOFError):
            # tarfile lists each method it tried, one per line: one line is enough.
            raise DataError(source, "not a readable tar archive (neither a plain tar nor "
                                    "a gzip, bzip2 or xz-compressed one)") from None
        except (tarfile.TarError, OSError) as err:
            raise DataError(source, f"not a readable tar archive ({_one_line(err)})") from None
        with tar:
            try:
                for member in tar:
                    if not member.isfile():
                        continue
                    parts = _strip_to_root(member.name.split("/"), markers)
                    if parts is None:
                        continue
                    rel = "/".join(parts)
                    if suffixes and not rel.endswith(suffixes):
                        continue
                    if any(s in rel for s in skip):
                        continue
                    handle = tar.extractfile(member)
                    if handle is None:
                        continue
                    yield rel, handle.read()
            except (tarfile.TarError, EOFError, OSError, lzma.LZMAError, zlib.error) as err:
                # A damaged xz or gzip stream fails in its decompressor, not in tarfile.
                raise DataError(source, f"truncated or corrupt archive ({_one_line(err)})"
                                ) from None
        return
    for dirpath, dirnames, filenames in os.walk(source):
        dirnames.sort()
        if ".git" in dirnames:
            dirnames.remove(".git")
        for name in sorted(filenames):
            full = Path(dirpath) / name
            parts = _strip_to_root(list(full.relative_to(source).parts), markers)
            if parts is None:
                continue
            rel = "/".join(parts)
            if suffixes and not rel.endswith(suffixes):
                continue
            if any(s in rel for s in skip):
                continue
            yield rel, full.read_bytes()


def sha256_file(path: Path, markers: tuple[str, ...] | None = ROOT_MARKERS) -> str:
    """Hex SHA-256 of a file or, for a directory, of its sorted (path, content) pairs
    (the files ``iter_files`` yields with these ``markers``)."""
    digest = hashlib.sha256()
    path = Path(path)
    if path.is_file():
        with path.open("rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        return digest.hexdigest()
    for rel, data in iter_files(path, markers=markers):
        digest.update(rel.encode())
        digest.update(hashlib.sha256(data).digest())
    return digest.hexdigest()
