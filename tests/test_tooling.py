"""The tools tell the truth: the type check resolves ``quiclab.*`` and fails on a
deliberate error, the version has one source, and CI runs lint before the tests."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tomllib
from pathlib import Path

import quiclab

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures" / "typecheck"


def _typecheck(*files: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / ".ci" / "typecheck.py"),
                           *(str(f.relative_to(ROOT)) for f in files)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_typecheck_catches_a_deliberate_type_error() -> None:
    done = _typecheck(FIXTURES / "bad_types.py")
    assert done.returncode == 1, done.stdout + done.stderr
    report = done.stdout
    # Both errors need Scenario's real type: an unresolved import would be Any.
    assert ('bad_types.py:8: error: Incompatible types in assignment (expression has type '
            '"Scenario", variable has type "int")') in report, report
    assert 'bad_types.py:9: error: "Scenario" has no attribute "rtt_msec"' in report, report
    assert "Found 2 errors in 1 file" in report, report


def test_typecheck_passes_well_typed_use_of_the_same_names() -> None:
    done = _typecheck(FIXTURES / "good_types.py")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "Success: no issues found in 1 source file" in done.stdout


def test_typecheck_ignores_missing_imports_only_for_third_party_modules() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert "ignore_missing_imports" not in config
    for override in config.get("overrides", []):
        if override.get("ignore_missing_imports"):
            modules = override["module"]
            assert not [m for m in modules if m.split(".")[0] == "quiclab"], modules


def test_the_version_has_one_source() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "version" not in project and "version" in project["dynamic"]
    assert importlib.metadata.version("quiclab") == quiclab.__version__


def test_ci_runs_lint_and_types_before_the_tests() -> None:
    lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    lint = next(i for i, line in enumerate(lines) if "make lint" in line)
    test = next(i for i, line in enumerate(lines) if "make test" in line)
    assert lint < test
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("\nlint:", 1)[1].split("\n\n", 1)[0]
    assert "ruff check" in recipe and ".ci/typecheck.py" in recipe


def test_no_issue_numbers_outside_the_changelog() -> None:
    """Comments and docs explain and cite sources; which issue asked for what is history
    (CHANGELOG.md and the git log). The pre-commit hook applies the same pattern."""
    import re

    pattern = re.compile(r"\b[Ii]ssues? [0-9]+\b")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others",
                             "--exclude-standard"], cwd=ROOT, capture_output=True,
                            text=True, check=False)
    if listed.returncode != 0:
        import pytest

        pytest.skip("not a git checkout")
    hits = []
    for name in listed.stdout.split("\0"):
        path = ROOT / name
        if (name == "CHANGELOG.md" or not path.is_file()
                or not (name.endswith((".py", ".md", ".yaml", ".yml"))
                        or path.name == "Makefile")):
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if pattern.search(line):
                hits.append(f"{name}:{number}: {line.strip()}")
    assert not hits, "\n".join(hits)
