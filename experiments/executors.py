"""Where sweep points are computed: in this process, a local process pool, or Dask.

An executor takes *tasks* (lists of Scenarios predicted together by one
engine call) and yields each task's outcomes as soon as it finishes, in
completion order. The caller (the runner) writes the results, so workers
need no access to the output folder — which is what lets a Dask cluster on
other machines run a sweep.

- :class:`LocalExecutor` — ``jobs`` processes of a
  :class:`concurrent.futures.ProcessPoolExecutor` (``jobs=1``: this process);
- :class:`DaskExecutor` — ``dask.distributed``: a
  :class:`~distributed.LocalCluster` of ``jobs`` single-threaded worker
  processes, or any running cluster given by its scheduler address (one
  started with dask-jobqueue on SLURM, dask-kubernetes, ``dask scheduler``).
  The workers must have ``quiclab`` installed; the registry is scattered to
  them once.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from quiclab.errors import QuiclabError
from quiclab.models.registry import Registry
from quiclab.procs import die_with_parent
from quiclab.sim.engine import Engine, get_engine
from quiclab.sim.prediction import Prediction
from quiclab.sim.scenario import Scenario

EXECUTORS = ("local", "dask")


@dataclass(frozen=True)
class Outcome:
    """One point's result: a Prediction, or the one-line reason it has none."""

    scenario: Scenario
    prediction: Prediction | None
    error: str | None = None


# ------------------------------------------------------------------ worker side
_REGISTRY: Registry | None = None
_ENGINES: dict[tuple[str, str, int], Engine] = {}


def _init_worker(registry: Registry, parent_pid: int | None = None) -> None:
    """A pool worker's start: the registry, Ctrl-C left to the parent, and an end
    tied to the parent's.

    A terminal sends SIGINT to the whole process group; the parent reports the
    interruption in one line and stops the workers, which would otherwise each
    print a KeyboardInterrupt traceback (see also :func:`_sigint_deferred`).
    A parent killed outright (``kill -9``, the OOM killer) stops nothing: the
    workers would finish their tasks for no one (:func:`die_with_parent`).
    """
    global _REGISTRY
    signal.signal(signal.SIGINT, _ignore_sigint)
    if parent_pid is not None:
        die_with_parent(parent_pid)
    _REGISTRY = registry




def _ignore_sigint(signum: int, frame: Any) -> None:
    """A pool worker's SIGINT handler: nothing. A handler rather than SIG_IGN, which
    programs the worker starts (the ns-3 binary) would inherit: they still stop."""


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Ctrl-C while pool workers are being started takes effect once they are.

    Raised inside a fork, KeyboardInterrupt is lost ("Exception ignored in …"),
    or it leaves a started worker that the pool does not know of yet and so
    never stops. Python runs signal handlers in the main thread only; elsewhere
    this does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous if previous is not None else signal.SIG_DFL)
    if caught:
        if callable(previous):
            previous(signal.SIGINT, None)
        elif previous in (signal.SIG_DFL, None):
            signal.raise_signal(signal.SIGINT)


def _engine(name: str, options: dict[str, Any], registry: Registry) -> Engine:
    key = (name, json.dumps(options, sort_keys=True), id(registry))
    engine = _ENGINES.get(key)
    if engine is None:
        engine = _ENGINES[key] = get_engine(name, registry, **options)
    return engine


def predict_task(engine_name: str, options: dict[str, Any], registry: Registry | None,
                 scenarios: Sequence[Scenario]) -> list[Outcome]:
    """Predict a task in one ``predict_batch`` call; isolate failing points if it raises.

    Runs in a worker (process pool or Dask) or in the caller's process.
    ``registry`` None means the one the process pool initialised the worker with.

    Any exception while building the engine or predicting a point is that task's or
    point's failure (an Outcome with its one-line reason), never the run's: the
    points other tasks and engines computed are kept.
    """
    reg = registry if registry is not None else _REGISTRY
    if reg is None:
        raise RuntimeError("predict_task: no registry in this worker")
    try:
        engine = _engine(engine_name, options, reg)
    except Exception as err:
        reason = _one_line(err)
        return [Outcome(s, None, reason) for s in scenarios]
    try:
        predictions = engine.predict_batch(list(scenarios))
        return [Outcome(s, p) for s, p in zip(scenarios, predictions, strict=True)]
    except Exception as err:
        if len(scenarios) == 1:
            return [Outcome(scenarios[0], None, _one_line(err))]
    outcomes = []
    for s in scenarios:
        try:
            outcomes.append(Outcome(s, engine.predict(s)))
        except Exception as err:
            outcomes.append(Outcome(s, None, _one_line(err)))
    return outcomes


def _one_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"


# ------------------------------------------------------------------ executors
class LocalExecutor:
    """``jobs`` worker processes on this machine (1 = in this process)."""

    name = "local"

    def __init__(self, jobs: int = 1):
        if jobs < 1:
            raise ValueError(f"jobs={jobs}: allowed ≥ 1")
        self.jobs = jobs

    def run(self, engine: str, options: dict[str, Any], registry: Registry,
            tasks: Sequence[Sequence[Scenario]]) -> Iterator[list[Outcome]]:
        if self.jobs == 1 or len(tasks) <= 1:
            for task in tasks:
                yield predict_task(engine, options, registry, task)
            return
        workers = min(self.jobs, len(tasks))
        pool = ProcessPoolExecutor(max_workers=workers, initializer=_init_worker,
                                   initargs=(registry, os.getpid()))
        try:
            pending: set[Future[list[Outcome]]] = set()
            queue = list(tasks)[::-1]
            # Keep a bounded number of tasks in flight so that a kill loses few of them.
            while queue or pending:
                with _sigint_deferred():  # a submit may start workers
                    while queue and len(pending) < 2 * workers:
                        pending.add(pool.submit(predict_task, engine, options, None,
                                                queue.pop()))
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    yield fut.result()
        except BaseException:
            # Ctrl-C (the workers ignore SIGINT), an error, or the caller gave up:
            # stop the workers now rather than after the tasks they are running, and
            # join the pool's thread (left running, it races the interpreter's exit:
            # "OSError: Bad file descriptor").
            _stop_workers(pool)
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        pool.shutdown(wait=False, cancel_futures=True)


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Terminate a pool's worker processes (SIGTERM: no traceback, nothing written).

    Python 3.14 has ``terminate_workers``; before it, only the pool's private
    process table reaches them. If neither exists, say so: the interrupt then
    waits for the running tasks."""
    terminate = getattr(pool, "terminate_workers", None)
    if callable(terminate):
        terminate()
        return
    processes = getattr(pool, "_processes", None)
    if processes is None:
        warnings.warn("cannot reach the pool's workers: the interrupt waits for the "
                      "tasks they are running", RuntimeWarning, stacklevel=2)
        return
    for process in list(processes.values()):
        if process.is_alive():
            process.terminate()


class DaskExecutor:
    """``dask.distributed``: a LocalCluster of ``jobs`` workers, or the cluster at ``scheduler``."""

    name = "dask"

    def __init__(self, jobs: int = 1, scheduler: str | None = None):
        if jobs < 1:
            raise ValueError(f"jobs={jobs}: allowed ≥ 1")
        self.jobs = jobs
        self.scheduler = scheduler

    def run(self, engine: str, options: dict[str, Any], registry: Registry,
            tasks: Sequence[Sequence[Scenario]]) -> Iterator[list[Outcome]]:
        from distributed import Client, LocalCluster, as_completed

        cluster = None
        if self.scheduler:
            try:
                client = Client(self.scheduler, timeout="20s")
            except (OSError, TimeoutError) as err:
                raise QuiclabError(f"--scheduler {self.scheduler}: cannot connect ({err})") \
                    from None
        else:
            cluster = LocalCluster(n_workers=self.jobs, threads_per_worker=1, processes=True,
                                   dashboard_address=None, silence_logs=40)
            client = Client(cluster)
        try:
            shared = client.scatter(registry, broadcast=True)
            futures = [client.submit(predict_task, engine, options, shared, list(task),
                                     pure=False) for task in tasks]
            for fut in as_completed(futures):
                yield fut.result()
        finally:
            client.close()
            if cluster is not None:
                cluster.close()


def make_executor(name: str, jobs: int, scheduler: str | None = None
                  ) -> LocalExecutor | DaskExecutor:
    if name == "dask":
        return DaskExecutor(jobs, scheduler)
    if name == "local":
        if scheduler:
            raise QuiclabError("--scheduler needs --executor dask")
        return LocalExecutor(jobs)
    raise QuiclabError(f"--executor {name!r}: allowed {' | '.join(EXECUTORS)}")
