"""Properties of every dataset parser — the raw QIR-10G files and the published CSVs —
fed random bytes, truncations and mutations of small synthetic files in the real
formats (tests/datasets/fixtures.py): each returns values or raises DataError (one
bounded line naming the file); an ingest never loses the rows already in the catalog.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from quiclab.datasets.catalog import Catalog
from quiclab.datasets.sources import published, qir10g
from quiclab.datasets.sources import qir_parsers as qp
from quiclab.datasets.sources.files import iter_files
from quiclab.datasets.sources.perf import fold, fold_zstd
from quiclab.errors import DataError
from tests.datasets import fixtures as fx

from .conftest import examples
from .harness import assert_one_line
from .strategies import damaged

pytestmark = pytest.mark.properties

#: Each text parser with a well-formed synthetic file of its format.
TEXT_PARSERS: dict[str, tuple[Callable[[str, str], Any], str]] = {
    "pidstat.txt": (qp.parse_pidstat, fx.pidstat_text("goracle", "http_server",
                                                      [30.0, 90.0, 100.0, 40.0], True)),
    "netstat.txt": (qp.parse_netstat, fx.netstat_text(1000, 2000, 5)),
    "ethtool.txt": (qp.parse_ethtool, fx.ethtool_text(10, 20, 30, 40)),
    "time.json": (qp.parse_time_json, fx.time_json(fx.START_NS, 12.0)),
    "result.json": (qp.parse_result_json,
                    fx.result_json({("lsquic", "lsquic"): [fx.goodput_mbps(23.0)]})),
    "out.perf": (lambda text, path: fold(text.splitlines(), path), fx.perf_script_text()),
}


def _decoded(data: bytes) -> str:
    return data.decode("utf-8", errors="replace")


def _refused_in_one_line(err: DataError, path: str) -> None:
    assert err.path.startswith(path), (err.path, path)
    assert_one_line(str(err), (path,))


@settings(max_examples=examples(300))
@given(name=st.sampled_from(sorted(TEXT_PARSERS)), data=st.data())
def test_every_raw_parser_reads_or_refuses_a_damaged_file(name, data):
    parse, good = TEXT_PARSERS[name]
    text = _decoded(data.draw(damaged(good.encode())))
    try:
        parse(text, name)
    except DataError as err:
        _refused_in_one_line(err, name)


JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=3),
                            st.dictionaries(st.sampled_from(
                                ["measurements", "server", "client", "filesize", "details",
                                 "start", "end", "server_implementations", "args",
                                 "bandwidth_limit"]), inner, max_size=4)), max_leaves=15)


@settings(max_examples=examples(300))
@given(value=JSONISH, name=st.sampled_from(["result.json", "time.json"]))
def test_json_parsers_read_or_refuse_any_json(value, name):
    parse = TEXT_PARSERS[name][0]
    try:
        parse(json.dumps(value), name)
    except DataError as err:
        _refused_in_one_line(err, name)


PERF = zstandard.ZstdCompressor().compress(fx.perf_script_text().encode())


@settings(max_examples=examples(200))
@given(data=st.data())
def test_a_damaged_perf_trace_folds_or_is_refused(data):
    blob = data.draw(damaged(PERF))
    try:
        stacks = fold_zstd(blob, "out.perf.zst")
    except DataError as err:
        _refused_in_one_line(err, "out.perf.zst")
        return
    assert stacks and all(s.samples > 0 for s in stacks)


def _published_csv() -> bytes:
    header = fx.PUBLISHED_HEADER + ",mtu_bytes,link_gbps,rcvbuf_bytes"
    rows = [r + ",1500,10,212992" for r in fx.PUBLISHED_ROWS]
    return ("\n".join([header, *rows]) + "\n").encode()


@settings(max_examples=examples(200))
@given(data=st.data(), strict=st.booleans())
def test_a_damaged_published_csv_reads_or_is_refused(tmp_path_factory, data, strict):
    folder = tmp_path_factory.mktemp("pub")
    path = folder / "p.csv"
    path.write_bytes(data.draw(damaged(_published_csv())))
    skipped: list[DataError] = []
    try:
        rows = published.read_csv(path, on_error=None if strict else skipped.append)
    except DataError as err:
        _refused_in_one_line(err, str(path))
        return
    for err in skipped:
        _refused_in_one_line(err, str(path))
    assert all(r["point_id"] and r["value"] is not None for r in rows)


@pytest.fixture(scope="module")
def qir_tree(tmp_path_factory: pytest.TempPathFactory) -> fx.QirTree:
    return fx.build_qir_tree(tmp_path_factory.mktemp("qir") / "tree")


def _ingest_damaged(tmp_path_factory, qir_tree, data, strict: bool) -> None:
    """Ingest a copy of the synthetic tree with one file damaged into a catalog that
    already holds the intact tree's rows: a summary, or a refusal that leaves the
    catalog's file as it was."""
    import shutil

    root = tmp_path_factory.mktemp("damaged") / "tree"
    shutil.copytree(qir_tree.root, root)
    files = sorted(p for p in root.rglob("*") if p.is_file())
    victim = data.draw(st.sampled_from(files))
    victim.write_bytes(data.draw(damaged(victim.read_bytes())))
    catalog_path = root.parent / "catalog.duckdb"
    with Catalog(catalog_path) as catalog:
        qir10g.load(catalog, qir_tree.root, with_perf=True)
        before = _contents(catalog)
        try:
            summary = qir10g.load(catalog, root, strict=strict)
        except DataError as err:
            assert_one_line(str(err))
            assert _contents(catalog) == before  # a refusal replaces nothing
            return
        assert summary.runs == catalog.count("runs")
        for path, reason in summary.skipped:
            assert_one_line(f"{path}: {reason}")


def _contents(catalog: Catalog) -> dict[str, list[tuple[Any, ...]]]:
    """The rows a dataset ingest writes, sorted (what "unchanged" means)."""
    return {table: sorted(map(tuple, catalog.con.execute(
        f"SELECT * EXCLUDE (extra) FROM {table}" if table == "runs"
        else f"SELECT * FROM {table}").fetchall()), key=repr)
        for table in ("runs", "cpu_samples", "perf_stacks", "files", "ingest_issues")}


@settings(max_examples=examples(6))
@given(data=st.data(), strict=st.booleans())
def test_ingesting_a_tree_with_a_damaged_file_loses_nothing(tmp_path_factory, qir_tree,
                                                             data, strict):
    _ingest_damaged(tmp_path_factory, qir_tree, data, strict)


@pytest.mark.slow
@settings(max_examples=examples(6, 100))
@given(data=st.data(), strict=st.booleans())
def test_ingesting_a_tree_with_a_damaged_file_loses_nothing_long(tmp_path_factory, qir_tree,
                                                                  data, strict):
    _ingest_damaged(tmp_path_factory, qir_tree, data, strict)


@pytest.fixture(scope="module")
def tarball(tmp_path_factory: pytest.TempPathFactory, qir_tree: fx.QirTree) -> bytes:
    dest = tmp_path_factory.mktemp("tar") / "qir.tar.xz"
    return fx.pack_tarball(qir_tree, dest).read_bytes()


@settings(max_examples=examples(40))
@given(data=st.data())
def test_a_damaged_tarball_is_read_or_refused(tmp_path_factory, tarball, data):
    path = tmp_path_factory.mktemp("tar") / "qir.tar.xz"
    path.write_bytes(data.draw(damaged(tarball)))
    try:
        for _rel, _bytes in iter_files(path):
            pass
    except DataError as err:
        _refused_in_one_line(err, str(path))
