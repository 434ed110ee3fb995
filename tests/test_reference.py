"""docs/reference/ is generated from the code and the catalog's schema: these tests fail
when a page drifts from what it documents, or when a Scenario or Prediction field, a
limit, or a catalog table or column has no meaning written for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from quiclab import reference

DOCS = Path(__file__).resolve().parent.parent / "docs" / "reference"


def test_every_field_limit_table_and_column_has_a_meaning() -> None:
    assert reference.undocumented() == []


@pytest.mark.parametrize("page", sorted(reference.PAGES))
def test_the_committed_page_is_what_the_code_generates(page: str) -> None:
    committed = (DOCS / page).read_text()
    assert committed == reference.PAGES[page](), (
        f"docs/reference/{page} is out of date: run `make docs` and commit it")


def test_a_new_column_without_a_meaning_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    schema = reference._catalog_schema()
    schema["runs"].append(("brand_new_column", "DOUBLE"))
    monkeypatch.setattr(reference, "_catalog_schema", lambda: schema)
    assert "catalog column runs.brand_new_column" in reference.undocumented()
