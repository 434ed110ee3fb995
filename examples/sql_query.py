"""Notebook-style SQL over the catalog: three questions, three DuckDB queries.

Opens the catalog read-only (the one named on the command line, else the default
`<data dir>/catalog.duckdb` that `quiclab data ingest` builds) and asks:

1. which implementation pairs are fastest in the default-buffer baseline
   (seed 002 Fig. 6, medians of the raw QIR-10G runs);
2. what one data packet costs each server in CPU time (the number the cost
   models start from);
3. how each stated goodput of seed 002 Fig. 6 compares with the median of the
   raw runs of the same cell.

    python examples/sql_query.py [CATALOG]

Expected output: examples/sql_query.out (tests/test_examples.py: numbers within
0.1 %, relative, on a catalog ingested from the shared data).
"""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb

from quiclab.paths import Paths

QUERIES = {
    "Fastest pairs of the default-buffer baseline (Mbit/s)": """
        SELECT server_impl, client_impl, count(*) AS runs,
               round(median(goodput_mbps), 1) AS goodput_mbps
        FROM runs WHERE experiment = 'baseline' AND status = 'ok'
        GROUP BY ALL ORDER BY goodput_mbps DESC LIMIT 5""",
    "Server CPU per data packet, buffer and crypto runs (µs)": """
        SELECT server_impl, count(*) AS runs,
               round(median(server_cpu_s / data_packets) * 1e6, 3) AS us_per_packet
        FROM runs WHERE experiment IN ('buffer', 'crypto') AND status = 'ok'
          AND server_impl IN ('lsquic', 'quiche')
        GROUP BY 1 ORDER BY 1""",
    "Seed 002 Fig. 6: stated against measured (Mbit/s)": """
        SELECT p.point_id, p.server, p.client, p.value AS stated,
               round(median(r.goodput_mbps), 1) AS measured
        FROM published_points p JOIN runs r
          ON r.server_impl = p.server AND r.client_impl = p.client
         AND r.experiment = 'baseline' AND r.status = 'ok'
        WHERE p.document = '002' AND p.locator = 'Fig. 6' AND p.quantity = 'goodput'
        GROUP BY ALL ORDER BY 1""",
}


def main(catalog: Path) -> None:
    con = duckdb.connect(str(catalog), read_only=True)
    for title, sql in QUERIES.items():
        print(f"-- {title}")
        print(con.execute(sql).df().to_string(index=False))
        print()
    con.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Paths.resolve().catalog)
