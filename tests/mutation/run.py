"""Mutation testing of the modules whose bugs change answers (``make mutation``).

Cosmic Ray (pinned in pyproject's ``dev`` extra) enumerates the mutants of each
module named in ``targets.toml``, applies one at a time to the file on disk,
runs that module's covering tests, and puts the file back. Cosmic Ray mutates
files in place, so it works with this repository's layout, where packages are
mapped from top-level folders (``quiclab.sim`` → ``sim/``) by ``package-dir``
and imported through the editable install: the tests import the mutated file
itself, as they would any edit (mutmut 3 instead copies the code to a
``mutants/`` tree and reaches it through ``sys.path``, which this layout's
imports never look at).

A session per module (``build/mutation/<module>.sqlite``, Cosmic Ray's own
work database) keeps every result, so an interrupted run resumes where it
stopped; a module whose source, tests or settings changed starts afresh. The
report (``docs/results/mutation.md``) is regenerated from all sessions at the
end of every run, finished or not.

What runs (``targets.toml`` says why): one mutant per site for each operator
kept, a deterministic sample of each module's mutants (the mutants whose
hash is smallest, so the same mutants run every time), minus functions
left out with a reason and mutants listed as equivalent with a reason.

Usage::

    python tests/mutation/run.py [--module PATH ...] [--fresh] [--budget-minutes N]
                                 [--report-only] [--planted | --no-planted]

Exit status: 0 when every module ran and the score is at least ``[run].goal``,
1 when it is below, 2 for bad input (one line naming the file and field).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import time
import tomllib
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
TARGETS = Path(__file__).with_name("targets.toml")
PLANTED = Path(__file__).with_name("planted.toml")
SESSIONS = ROOT / "build" / "mutation"
REPORT = ROOT / "docs" / "results" / "mutation.md"


class BadInput(Exception):
    """One line naming the file, the field and the value."""


# ----------------------------------------------------------------------------- settings
@dataclass
class Module:
    path: str
    tests: list[str]
    env: dict[str, str] = field(default_factory=dict)
    #: Functions (Cosmic Ray's ``definition_name``) left out, with the reason.
    skip_definitions: dict[str, str] = field(default_factory=dict)
    sample: float | None = None

    @property
    def slug(self) -> str:
        return self.path.replace("/", ".").removesuffix(".py")


@dataclass
class Settings:
    sample: float
    min_mutants: int
    goal: float
    timeout_factor: float
    timeout_extra_s: float
    operators: list[str]
    number_offsets: str
    modules: list[Module]
    equivalents: list[dict[str, str]]


def load_settings(path: Path = TARGETS) -> Settings:
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise BadInput(f"{path}: {err}") from None
    run = data.get("run", {})
    modules = []
    for i, m in enumerate(data.get("module", [])):
        where = f"{path}: module[{i}]"
        if not isinstance(m.get("path"), str) or not (ROOT / m["path"]).is_file():
            raise BadInput(f"{where}.path = {m.get('path')!r}: no such file")
        tests = m.get("tests")
        if not tests or not all(isinstance(t, str) for t in tests):
            raise BadInput(f"{where}.tests = {tests!r}: a list of test paths is required")
        for t in tests:
            if not (ROOT / t.split("::")[0]).exists():
                raise BadInput(f"{where}.tests: {t!r} does not exist")
        sample = m.get("sample")
        if sample is not None and not 0 < float(sample) <= 1:
            raise BadInput(f"{where}.sample = {sample!r}: allowed 0 < sample ≤ 1")
        modules.append(Module(m["path"], list(tests), dict(m.get("env", {})),
                              dict(m.get("skip_definitions", {})),
                              None if sample is None else float(sample)))
    sample = float(run.get("sample", 1.0))
    if not 0 < sample <= 1:
        raise BadInput(f"{path}: run.sample = {sample!r}: allowed 0 < sample ≤ 1")
    equivalents = data.get("equivalent", [])
    for i, e in enumerate(equivalents):
        missing = [k for k in ("path", "operator", "code", "reason") if not e.get(k)]
        if missing:
            raise BadInput(f"{path}: equivalent[{i}] lacks {', '.join(missing)}")
    return Settings(sample=sample, min_mutants=int(run.get("min_mutants", 0)),
                    goal=float(run.get("goal", 85.0)),
                    timeout_factor=float(run.get("timeout_factor", 4.0)),
                    timeout_extra_s=float(run.get("timeout_extra_s", 30.0)),
                    operators=list(run.get("operators", [])),
                    number_offsets=str(run.get("number_offsets", "plus-one")),
                    modules=modules, equivalents=equivalents)


# ----------------------------------------------------------------------------- mutants
def _line(source_lines: list[str], pos: tuple[int, int]) -> str:
    return source_lines[pos[0] - 1].strip() if 0 < pos[0] <= len(source_lines) else ""


def mutant_key(path: str, operator: str, code: str, nth: int) -> str:
    """A mutant's identity that survives edits elsewhere in the file: module,
    operator, the text of its line and its place among that operator's
    mutants on that line."""
    return f"{path}|{operator}|{code}|{nth}"


def _rank(key: str) -> float:
    return int(hashlib.sha256(key.encode()).hexdigest()[:12], 16) / 16**12


def command_for(module: Module) -> str:
    env = [f"{k}={v}" for k, v in sorted(module.env.items())]
    pytest = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
              "-m", "not slow", *module.tests]
    return shlex.join(["env", *env, *pytest] if env else pytest)


def _fingerprints(module: Module, settings: Settings) -> tuple[str, str]:
    """(mutants, tests): what the set of mutants depends on — the module's source, the
    selection rules, the tool's version — and what their outcomes depend on besides:
    the tests (their files and every conftest) and the equivalent-mutant list."""
    mutants = hashlib.sha256()
    mutants.update(_code_digest(ROOT / module.path).encode())
    mutants.update(json.dumps([module.skip_definitions, module.sample, settings.sample,
                               settings.min_mutants, settings.operators,
                               settings.number_offsets, _tool_version()],
                              sort_keys=True).encode())
    tests = hashlib.sha256()
    files = []
    for t in module.tests:
        p = ROOT / t.split("::")[0]
        files += sorted(p.rglob("*.py")) if p.is_dir() else [p]
    files += sorted((ROOT / "tests").rglob("conftest.py"))
    for f in files:
        tests.update(str(f.relative_to(ROOT)).encode())
        tests.update(f.read_bytes())
    tests.update(json.dumps([module.tests, module.env,
                             [e for e in settings.equivalents if e["path"] == module.path]],
                            sort_keys=True).encode())
    return mutants.hexdigest(), tests.hexdigest()


def _code_digest(path: Path) -> str:
    """The module's code without its comments and docstrings, with every node's position:
    an edit of a comment or a docstring that moves no line keeps the mutants (and their
    line numbers) as they were."""
    import ast

    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body[0].value.value = ""
    return hashlib.sha256(ast.dump(tree, include_attributes=True).encode()).hexdigest()


def _tool_version() -> str:
    from importlib.metadata import version

    return version("cosmic-ray")


@dataclass
class Session:
    module: Module
    db_path: Path
    meta_path: Path
    meta: dict[str, Any]

    def save(self) -> None:
        tmp = self.meta_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.meta, indent=1, sort_keys=True))
        tmp.replace(self.meta_path)


def _select(module: Module, settings: Settings, work_db: Any) -> dict[str, Any]:
    """Mark every mutant outside the run as skipped, with the reason; returns counts and
    each sampled mutant's key (see :func:`mutant_key`)."""
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    source = (ROOT / module.path).read_text().splitlines()
    keep_ops = [re.compile(p) for p in settings.operators]
    seen: dict[tuple[str, str], int] = {}
    candidates: list[tuple[float, str, str]] = []
    reasons: dict[str, str] = {}
    items = sorted(work_db.work_items, key=lambda w: (w.mutations[0].operator_name,
                                                      w.mutations[0].occurrence))
    enumerated = 0
    for item in items:
        m = item.mutations[0]
        op = m.operator_name
        if not any(r.fullmatch(op) for r in keep_ops):
            reasons[item.job_id] = "operator not in the set"
            continue
        if op == "core/NumberReplacer" and settings.number_offsets == "plus-one" \
                and m.occurrence % 2:
            reasons[item.job_id] = "number −1 (one offset per literal: +1)"
            continue
        enumerated += 1
        code = _line(source, m.start_pos)
        nth = seen.get((op, code), 0)
        seen[(op, code)] = nth + 1
        if m.definition_name in module.skip_definitions:
            reasons[item.job_id] = f"left out: {module.skip_definitions[m.definition_name]}"
            continue
        key = mutant_key(module.path, op, code, nth)
        candidates.append((_rank(key), item.job_id, key))
    rate = module.sample if module.sample is not None else settings.sample
    candidates.sort()
    n = max(math.ceil(rate * len(candidates)), min(settings.min_mutants, len(candidates)))
    for _, job, _key in candidates[n:]:
        reasons[job] = "not in the sample"
    for job, why in reasons.items():
        work_db.set_result(job, WorkResult(worker_outcome=WorkerOutcome.SKIPPED, output=why))
    return {"enumerated": enumerated, "candidates": len(candidates), "sampled": n,
            "rate": rate, "keys": {job: key for _, job, key in candidates[:n]},
            "left_out": sum(r.startswith("left out") for r in reasons.values())}


def _retest(module: Module, settings: Settings, db_path: Path, keys: dict[str, str]) -> int:
    """After the tests or the equivalent list changed: survivors (and incompetent runs)
    run again, and mutants now listed as equivalent are set aside with the reason.
    Killed mutants stay killed (tests are added to kill survivors; ``--fresh`` re-runs
    everything). Returns how many are pending again."""
    import sqlite3

    from cosmic_ray.work_db import WorkDB, use_db
    from cosmic_ray.work_item import WorkerOutcome, WorkResult

    equivalents = {mutant_key(e["path"], e["operator"], e["code"].strip(), int(e.get("nth", 0))):
                   e["reason"] for e in settings.equivalents if e["path"] == module.path}
    with sqlite3.connect(db_path) as con:
        again = [job for (job,) in con.execute(
            "SELECT job_id FROM work_results WHERE test_outcome IS NOT 'KILLED' AND "
            "(worker_outcome IS NOT 'SKIPPED' OR output LIKE 'equivalent: %')")]
        con.executemany("DELETE FROM work_results WHERE job_id = ?", [(j,) for j in again])
    with use_db(str(db_path), WorkDB.Mode.open) as db:
        for job, key in keys.items():
            if key in equivalents and job in again:
                db.set_result(job, WorkResult(worker_outcome=WorkerOutcome.SKIPPED,
                                              output=f"equivalent: {equivalents[key]}"))
    return len(again)


# ----------------------------------------------------------------------------- running
def _restore_leftover(module: Module) -> None:
    """A run killed hard (SIGKILL) mid-mutant leaves the mutant on disk: put the
    pristine copy back (it was saved, with a marker, before the first mutant)."""
    marker = SESSIONS / f"{module.slug}.running"
    pristine = SESSIONS / f"{module.slug}.pristine"
    if marker.exists() and pristine.exists():
        target = ROOT / module.path
        if target.read_bytes() != pristine.read_bytes():
            target.write_bytes(pristine.read_bytes())
            print(f"mutation: {module.path} restored from an interrupted run", flush=True)
        marker.unlink()


def _restore_planted() -> None:
    """The same for a planted bug (``planted-<n>.pristine`` holds the file's text)."""
    for marker in sorted(SESSIONS.glob("planted-*.pristine")):
        saved = json.loads(marker.read_text())
        target = ROOT / saved["path"]
        if target.read_text() != saved["text"]:
            target.write_text(saved["text"])
            print(f"mutation: {saved['path']} restored from an interrupted run", flush=True)
        marker.unlink()


def _baseline(module: Module) -> float:
    started = time.perf_counter()
    proc = subprocess.run(shlex.split(command_for(module)), cwd=ROOT, capture_output=True,
                          text=True)
    seconds = time.perf_counter() - started
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-5:]
        raise BadInput(f"{TARGETS}: the tests of {module.path} fail without any mutant "
                       f"({command_for(module)}): {' | '.join(tail)}")
    return seconds


def open_session(module: Module, settings: Settings, fresh: bool) -> Session:
    from cosmic_ray.commands.init import init
    from cosmic_ray.work_db import WorkDB, use_db

    SESSIONS.mkdir(parents=True, exist_ok=True)
    db_path = SESSIONS / f"{module.slug}.sqlite"
    meta_path = SESSIONS / f"{module.slug}.json"
    mutants_fp, tests_fp = _fingerprints(module, settings)
    meta: dict[str, Any] = {}
    if meta_path.exists() and db_path.exists() and not fresh:
        meta = json.loads(meta_path.read_text())
    if meta.get("mutants_fingerprint") != mutants_fp:
        db_path.unlink(missing_ok=True)
        with use_db(str(db_path), WorkDB.Mode.create) as db:
            init([ROOT / module.path], db, {})
            counts = _select(module, settings, db)
        meta = {"mutants_fingerprint": mutants_fp, "module": module.path, **counts,
                "seconds": {}, "started": datetime.now(UTC).isoformat(timespec="seconds")}
    if meta.get("tests_fingerprint") != tests_fp:
        again = _retest(module, settings, db_path, meta["keys"])
        if "tests_fingerprint" in meta:
            print(f"mutation: {module.path}: tests changed; {again} survivors run again",
                  flush=True)
        meta.update({"tests_fingerprint": tests_fp, "tests": module.tests,
                     "command": command_for(module)})
        meta.pop("baseline_s", None)
    return Session(module, db_path, meta_path, meta)


def run_session(session: Session, settings: Settings, deadline: float) -> bool:
    """Run the pending mutants of one module; False if the deadline stopped it."""
    from cosmic_ray.mutating import mutate_and_test
    from cosmic_ray.work_db import WorkDB, use_db

    module = session.module
    with use_db(str(session.db_path), WorkDB.Mode.open) as db:
        pending = sorted(db.pending_work_items,
                         key=lambda w: session.meta["keys"].get(w.job_id, ""))
        if not pending:
            return True
        if "baseline_s" not in session.meta:
            session.meta["baseline_s"] = _baseline(module)
            session.save()
        timeout = (settings.timeout_factor * session.meta["baseline_s"]
                   + settings.timeout_extra_s)
        total = session.meta["sampled"]
        print(f"mutation: {module.path}: {len(pending)} of {total} mutants to run "
              f"(tests {session.meta['baseline_s']:.0f} s unmutated, timeout {timeout:.0f} s)",
              flush=True)
        pristine = SESSIONS / f"{module.slug}.pristine"
        marker = SESSIONS / f"{module.slug}.running"
        pristine.write_bytes((ROOT / module.path).read_bytes())
        marker.touch()
        try:
            for i, item in enumerate(pending, 1):
                if time.monotonic() > deadline:
                    print("mutation: time budget spent; run again to resume", flush=True)
                    return False
                started, cpu0 = time.perf_counter(), os.times()
                result = mutate_and_test(item.mutations, session.meta["command"], timeout)
                seconds, cpu1 = time.perf_counter() - started, os.times()
                cpu = (cpu1.children_user - cpu0.children_user
                       + cpu1.children_system - cpu0.children_system)
                db.set_result(item.job_id, result)
                session.meta["seconds"][item.job_id] = round(seconds, 2)
                session.meta.setdefault("cpu_seconds", {})[item.job_id] = round(cpu, 2)
                session.save()
                m = item.mutations[0]
                outcome = str((result.test_outcome or result.worker_outcome).value)
                done = total - len(pending) + i
                print(f"  [{done}/{total}] {outcome:11s} {seconds:5.1f} s ({cpu:4.1f} s CPU)"
                      f"  line {m.start_pos[0]:4d}  {m.operator_name.removeprefix('core/')}",
                      flush=True)
        finally:
            if (ROOT / module.path).read_bytes() != pristine.read_bytes():
                (ROOT / module.path).write_bytes(pristine.read_bytes())
            marker.unlink(missing_ok=True)
    return True


# ----------------------------------------------------------------------------- planted bugs
def run_planted(path: Path = PLANTED) -> list[dict[str, Any]]:
    """Plant each bug of ``planted.toml`` alone, run the tests said to kill it, put the
    file back: a row per bug with whether they did."""
    try:
        bugs = tomllib.loads(path.read_text()).get("bug", [])
    except (OSError, tomllib.TOMLDecodeError) as err:
        raise BadInput(f"{path}: {err}") from None
    rows = []
    for i, bug in enumerate(bugs):
        target = ROOT / bug["path"]
        original = target.read_text()
        if original.count(bug["find"]) != 1:
            rows.append({**bug, "outcome": "not planted: the line to change is not found once "
                                           "(the code moved on; update planted.toml)"})
            continue
        marker = SESSIONS / f"planted-{i}.pristine"
        SESSIONS.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({"path": bug["path"], "text": original}))
        try:
            target.write_text(original.replace(bug["find"], bug["replace"]))
            cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                   "-m", "not slow", *bug["tests"]]
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True,
                                  env={**os.environ, **bug.get("env", {})})
        finally:
            target.write_text(original)
            marker.unlink(missing_ok=True)
        failed = re.findall(r"^FAILED (\S+)", proc.stdout, flags=re.M)
        outcome = "killed" if proc.returncode != 0 and failed else (
            "survived" if proc.returncode == 0 else f"error (exit {proc.returncode})")
        rows.append({**bug, "outcome": outcome, "failed": failed})
        print(f"mutation: planted {bug['path']}: {outcome} ({len(failed)} tests failed)",
              flush=True)
    return rows


# ----------------------------------------------------------------------------- report
def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _host() -> str:
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{platform.node()} ({cpu}, {os.cpu_count()} cores, {platform.system()})"


def _diff_line(diff: str) -> str:
    minus = [ln[1:].strip() for ln in diff.splitlines()
             if ln.startswith("-") and not ln.startswith("---")]
    plus = [ln[1:].strip() for ln in diff.splitlines()
            if ln.startswith("+") and not ln.startswith("+++")]
    return f"`{' '.join(minus)}` → `{' '.join(plus)}`".replace("|", "\\|")


def write_report(settings: Settings, planted: list[dict[str, Any]] | None) -> dict[str, Any]:
    from cosmic_ray.work_db import WorkDB, use_db

    rows, survivors, equivalents, left_out = [], [], [], []
    totals = {"killed": 0, "survived": 0, "timeout": 0, "incompetent": 0, "pending": 0,
              "seconds": 0.0, "cpu_seconds": 0.0}
    for module in settings.modules:
        meta_path = SESSIONS / f"{module.slug}.json"
        db_path = SESSIONS / f"{module.slug}.sqlite"
        if not (meta_path.exists() and db_path.exists()):
            rows.append(f"| `{module.path}` | not run | | | | | | |")
            continue
        meta = json.loads(meta_path.read_text())
        stale = (meta.get("mutants_fingerprint"), meta.get("tests_fingerprint")) \
            != _fingerprints(module, settings)
        c = {"killed": 0, "survived": 0, "timeout": 0, "incompetent": 0}
        with use_db(str(db_path), WorkDB.Mode.open) as db:
            done = db.completed_work_items
            pending = db.num_work_items - db.num_results
        for item, result in done:
            m = item.mutations[0]
            if result.worker_outcome == "skipped":
                why = result.output or ""
                if why.startswith("equivalent: "):
                    equivalents.append((module.path, m, why.removeprefix("equivalent: ")))
                elif why.startswith("left out: "):
                    left_out.append((module.path, m.definition_name,
                                     why.removeprefix("left out: ")))
                continue
            if result.test_outcome == "survived":
                c["survived"] += 1
                survivors.append((module.path, m, result.diff or ""))
            elif result.test_outcome == "killed":
                c["timeout" if (result.output or "") == "timeout" else "killed"] += 1
            else:
                c["incompetent"] += 1
        seconds = sum(meta.get("seconds", {}).values())
        cpu_seconds = sum(meta.get("cpu_seconds", {}).values())
        killed = c["killed"] + c["timeout"]
        ran = killed + c["survived"]
        score = 100.0 * killed / ran if ran else math.nan
        for k in c:
            totals[k] += c[k]
        totals["pending"] += pending
        totals["seconds"] += seconds
        totals["cpu_seconds"] += cpu_seconds
        state = " (stale: code or tests changed since)" if stale else (
            f" ({pending} pending)" if pending else "")
        rows.append(f"| `{module.path}` | {meta['enumerated']} | {meta['sampled']}"
                    f" ({meta['rate']:.0%}) | {killed} ({c['timeout']} by timeout) |"
                    f" {c['survived']} | {c['incompetent']} | {score:.1f} %{state} |"
                    f" {seconds / 60:.1f} min ({cpu_seconds / 60:.1f} min CPU) |")
    killed = totals["killed"] + totals["timeout"]
    ran = killed + totals["survived"]
    score = 100.0 * killed / ran if ran else math.nan
    # Wilson interval of the sampled score (the sample is a draw from each module's mutants).
    z = 1.96
    if ran:
        p = killed / ran
        centre = (p + z * z / (2 * ran)) / (1 + z * z / ran)
        half = z * math.sqrt(p * (1 - p) / ran + z * z / (4 * ran * ran)) / (1 + z * z / ran)
        interval = f"{100 * (centre - half):.1f}–{100 * (centre + half):.1f} %"
    else:
        interval = "n/a"
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    lines = [
        "# Mutation testing: score and survivors",
        "",
        "Generated by `make mutation` (`tests/mutation/run.py`); do not edit by hand.",
        "How to run it and read it: [docs/how-to/mutation-testing.md]"
        "(../how-to/mutation-testing.md).",
        "",
        f"- date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- host: {_host()}",
        f"- code: {_git('rev-parse', 'HEAD')}{' (uncommitted changes)' if dirty else ''}",
        f"- tool: Cosmic Ray {_tool_version()}, Python "
        f"{platform.python_version()}",
        f"- operators: one mutant per site — {', '.join(f'`{o}`' for o in settings.operators)}"
        "; numbers +1 only",
        f"- sample: {settings.sample:.0%} of each module's mutants (at least "
        f"{settings.min_mutants}), the same mutants every run (smallest hash of module, "
        "operator, line text and place on the line)",
        "",
        f"**Score: {score:.1f} %** ({killed} killed of {ran} run; 95 % interval of the "
        f"sampled score {interval}); goal {settings.goal:.0f} %. Mutant test time "
        f"{totals['seconds'] / 60:.0f} min wall, {totals['cpu_seconds'] / 60:.0f} min CPU "
        f"(load average at the end {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores).",
        "",
        "| module | mutants | run (sample) | killed | survived | incompetent | score | time |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
        *rows,
        "",
        "## Covering tests",
        "",
        *[f"- `{m.path}`: {', '.join(f'`{t}`' for t in m.tests)}"
          + (f" (env {', '.join(f'{k}={v}' for k, v in m.env.items())})" if m.env else "")
          for m in settings.modules],
        "",
        f"## Survivors ({len(survivors)})",
        "",
        "| module | line | operator | change |",
        "| --- | --- | --- | --- |",
        *[f"| `{path}` | {m.start_pos[0]} | {m.operator_name.removeprefix('core/')} |"
          f" {_diff_line(diff)} |" for path, m, diff in sorted(
              survivors, key=lambda s: (s[0], s[1].start_pos))],
        "",
        f"## Equivalent mutants excluded ({len(equivalents)})",
        "",
        "| module | line | operator | why it is equivalent |",
        "| --- | --- | --- | --- |",
        *[f"| `{path}` | {m.start_pos[0]} | {m.operator_name.removeprefix('core/')} |"
          f" {why} |" for path, m, why in sorted(equivalents,
                                                 key=lambda s: (s[0], s[1].start_pos))],
        "",
        "## Left out",
        "",
        *sorted({f"- `{path}` `{name}`: {why}" for path, name, why in left_out}),
    ]
    if planted is not None:
        lines += ["", "## Planted bugs", "",
                  "Each planted alone, the named tests run, the file put back "
                  "(`tests/mutation/planted.toml`).", "",
                  "| module | bug | outcome | failing tests |", "| --- | --- | --- | --- |"]
        for row in planted:
            failed = ", ".join(f"`{f}`" for f in row.get("failed", [])[:3])
            more = len(row.get("failed", [])) - 3
            lines.append(f"| `{row['path']}` | {row['what']} | {row['outcome']} |"
                         f" {failed}{f' (+{more})' if more > 0 else ''} |")
    REPORT.parent.mkdir(parents=True, exist_ok=True)
    REPORT.write_text("\n".join(lines) + "\n")
    return {"score": score, "ran": ran, "pending": totals["pending"]}


# ----------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--module", action="append", metavar="PATH",
                        help="only this module of targets.toml (repeatable)")
    parser.add_argument("--fresh", action="store_true", help="start the sessions afresh")
    parser.add_argument("--budget-minutes", type=float, default=math.inf,
                        help="stop starting mutants after this long (resume later)")
    parser.add_argument("--report-only", action="store_true",
                        help="regenerate the report from the sessions, run nothing")
    parser.add_argument("--no-planted", action="store_true",
                        help="skip the planted bugs of planted.toml")
    parser.add_argument("--planted-only", action="store_true",
                        help="run only the planted bugs (and rewrite the report)")
    args = parser.parse_args(argv)
    try:
        settings = load_settings()
        chosen = settings.modules
        if args.module:
            known = {m.path for m in settings.modules}
            for path in args.module:
                if path not in known:
                    raise BadInput(f"--module {path!r}: not in {TARGETS.relative_to(ROOT)} "
                                   f"(known: {', '.join(sorted(known))})")
            chosen = [m for m in settings.modules if m.path in args.module]
        for module in settings.modules:
            _restore_leftover(module)
        if SESSIONS.is_dir():
            _restore_planted()
        # SIGTERM unwinds like Ctrl-C, so the mutated file is put back.
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        planted = None
        finished = True
        if args.planted_only:
            planted = run_planted()
        elif not args.report_only:
            deadline = time.monotonic() + args.budget_minutes * 60
            for module in chosen:
                session = open_session(module, settings, args.fresh)
                session.save()
                if not run_session(session, settings, deadline):
                    finished = False
                    break
            if not args.no_planted and finished:
                planted = run_planted()
        summary = write_report(settings, planted)
    except BadInput as err:
        print(f"mutation: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mutation: interrupted; the mutated file is restored; run again to resume",
              file=sys.stderr)
        write_report(settings, None)
        return 130
    pending = f", {summary['pending']} pending" if summary["pending"] else ""
    print(f"mutation: score {summary['score']:.1f} % over {summary['ran']} mutants{pending}; "
          f"report {REPORT.relative_to(ROOT)}")
    return 0 if summary["score"] >= settings.goal and not summary["pending"] else 1


if __name__ == "__main__":
    sys.exit(main())
