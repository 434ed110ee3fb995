"""`testbed matrix` and `testbed noise` resume like a sweep: a rerun skips the
repetitions already recorded ok, counts them in its cells, and runs only what is missing."""

from __future__ import annotations

import pytest

from quiclab.datasets.catalog import Catalog
from quiclab.testbed.errors import TestbedError
from quiclab.testbed.runner import Testbed
from quiclab.testbed.session import Session, matrix, noise

NBYTES = 2_000_000


class NoRuns(Testbed):
    def run(self, *args, **kwargs):
        raise AssertionError("a run started before every stack name was checked")


@pytest.mark.parametrize("measure", [matrix, noise])
def test_unknown_stacks_are_refused_before_the_first_run(paths, builder, measure):
    session = Session(NoRuns(paths, builder=builder), None, log=lambda line: None,
                      cpu_name="host: test")
    with pytest.raises(TestbedError, match=r"^stack='nope' is unknown: allowed "):
        measure(session, ["quic-go", "nope"], repeat=1, transfer_bytes=NBYTES)


def _runs(catalog) -> list[tuple[str, str]]:
    with Catalog(catalog, read_only=True) as cat:
        return cat.con.execute("SELECT run_id, status FROM runs ORDER BY run_id").fetchall()


@pytest.mark.testbed
def test_a_matrix_rerun_adds_nothing_and_a_larger_one_continues(root, quic_go, paths,
                                                                builder, tmp_path):
    catalog = tmp_path / "fresh.duckdb"
    lines: list[str] = []
    session = Session(Testbed(paths, builder=builder, startup_s=5.0), catalog,
                      log=lines.append)
    first = matrix(session, ["quic-go"], repeat=1, transfer_bytes=NBYTES)
    cell = first[("quic-go", "quic-go")]
    assert cell["status"] == "ok" and cell["runs"] == 1 and cell["new_runs"] == 1
    recorded = _runs(catalog)
    assert [status for _, status in recorded] == ["ok"]

    again = matrix(session, ["quic-go"], repeat=1, transfer_bytes=NBYTES)
    cell2 = again[("quic-go", "quic-go")]
    assert cell2["new_runs"] == 0 and cell2["runs"] == 1
    assert cell2["median_mbps"] == cell["median_mbps"]  # read back from the catalog
    assert _runs(catalog) == recorded and len(session.results) == 1
    assert sum("already in the catalog" in line for line in lines) == 1

    # Interrupted at one of two repetitions: the rerun makes only the second.
    more = matrix(session, ["quic-go"], repeat=2, transfer_bytes=NBYTES)
    assert more[("quic-go", "quic-go")]["new_runs"] == 1
    assert more[("quic-go", "quic-go")]["runs"] == 2
    ids = [rid for rid, _ in _runs(catalog)]
    assert len(ids) == 2 and ids[0] == recorded[0][0] and ids[1].endswith("-r1")


@pytest.mark.testbed
def test_a_noise_rerun_adds_nothing(root, quic_go, paths, builder, tmp_path):
    catalog = tmp_path / "fresh.duckdb"
    session = Session(Testbed(paths, builder=builder, startup_s=5.0), catalog,
                      log=lambda line: None)
    [row] = noise(session, ["quic-go"], repeat=1, transfer_bytes=NBYTES)
    assert row["unpinned_runs_ok"] == 1 and row["pinned_runs_ok"] == 1
    recorded = _runs(catalog)
    assert len(recorded) == 2 and len(session.results) == 2

    [again] = noise(session, ["quic-go"], repeat=1, transfer_bytes=NBYTES)
    assert _runs(catalog) == recorded and len(session.results) == 2
    assert again == row  # the rows come back from the catalog
