"""The ``quiclab testbed`` command group: build, run, sweep, matrix, stacks, clean.

The main CLI calls :func:`add_parser` with its subparsers and provides the
global ``--catalog PATH`` as ``args.catalog``; every handler is set as
``args.func`` and returns an exit code (0 all ok, 1 some run failed, 2 refused
with one line on stderr, 130 interrupted). ``python -m quiclab.testbed`` runs
this group on its own.

Every command that changes the host holds the testbed lock (:func:`_locked`) and
cleans what killed runs left only once it holds it: a run waiting for the lock
must not take a dead run's changed sysctls for the host's own.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from quiclab.errors import QuiclabError
from quiclab.testbed import stacks as stacks_mod
from quiclab.testbed.build import Builder
from quiclab.testbed.config import RunConfig, parse_set
from quiclab.testbed.hostpair import clean_hosts, probe_hosts
from quiclab.testbed.inventory import Inventory
from quiclab.testbed.runner import Paths, Testbed
from quiclab.testbed.session import Session, matrix, noise, sweep_plan, sweep_summary
from quiclab.testbed.topology import clean_stale, exclusive, require_root

#: The stacks ``testbed noise`` measures when none are named.
NOISE_STACKS = ("quic-go", "quinn", "s2n-quic", "aioquic")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``testbed`` and its subcommands on the main CLI's subparsers."""
    tb = subparsers.add_parser(
        "testbed", help="fresh runs of real QUIC stacks between network namespaces or two hosts",
        description="Build QUIC peers, run transfers between two network namespaces (or two "
                    "hosts of an inventory over SSH, --hosts) with per-run link knobs, and "
                    "record every run in the catalog (source 'fresh').")
    tb.add_argument("--build-dir", type=Path, default=None,
                    help="where builds go (default: testbed/.build beside the package)")
    tb.add_argument("--runs-dir", type=Path, default=None,
                    help="where per-run logs go (default: <build-dir>/runs)")
    sub = tb.add_subparsers(dest="testbed_command", metavar="COMMAND", required=True)

    p = sub.add_parser("build", help="build the peers from the registries (cached)")
    p.add_argument("--stacks", action="extend", nargs="+", metavar="STACK",
                   help=f"stacks to build (default all: {', '.join(stacks_mod.STACKS)})")
    p.add_argument("--force", action="store_true", help="rebuild even when the cache is fresh")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("run", help="run one server/client pair (K repetitions)")
    p.add_argument("--server", required=True, help="server stack (the sender)")
    p.add_argument("--client", required=True, help="client stack (the receiver)")
    _common_run_options(p)
    _hosts_option(p)
    p.add_argument("--repeat", type=int, default=1, help="repetitions (default 1)")
    p.add_argument("--experiment", default="adhoc", help="experiment name in the catalog")
    p.add_argument("--json", action="store_true",
                   help="print one JSON object (last line) with goodput and CPU per side")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("sweep", help="run a sweep spec (the YAML of simulated sweeps)")
    p.add_argument("spec", type=Path, help="sweep YAML")
    p.add_argument("--repeat", type=int, default=None, help="repetitions per point")
    p.add_argument("--bytes", type=int, default=None, help="bytes per transfer")
    p.add_argument("--experiment", default=None,
                   help="experiment name in the catalog (default: the spec's name); another "
                        "name measures the spec again instead of resuming it")
    _probe_option(p)
    p.add_argument("--probe-points", action="store_true",
                   help="also a short host probe (~3 s) before each point: a state per cell")
    _hosts_option(p)
    p.set_defaults(func=cmd_sweep)

    p = sub.add_parser("matrix", help="every client × every server (interop matrix)")
    p.add_argument("--stacks", action="extend", nargs="+", metavar="STACK",
                   help="stacks (default: all built)")
    _common_run_options(p)
    _hosts_option(p)
    p.add_argument("--repeat", type=int, default=3, help="repetitions per pair (default 3)")
    p.add_argument("--experiment", default="interop-matrix",
                   help="experiment name in the catalog (a rerun under the same name "
                        "skips the repetitions already recorded ok)")
    p.add_argument("--json", action="store_true", help="print the matrix as JSON")
    p.set_defaults(func=cmd_matrix)

    p = sub.add_parser("noise", help="goodput CV over repetitions, pinned and unpinned")
    # No default list here: argparse's "extend" would add the stacks given to it.
    p.add_argument("--stacks", action="extend", nargs="+", metavar="STACK",
                   help=f"stacks (default: {' '.join(NOISE_STACKS)})")
    p.add_argument("--repeat", type=int, default=10, help="repetitions per setting (default 10)")
    p.add_argument("--bytes", type=int, default=None, help="bytes per transfer")
    p.add_argument("--experiment", default="noise",
                   help="experiment name in the catalog (a rerun under the same name "
                        "skips the repetitions already recorded ok)")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    _probe_option(p)
    _hosts_option(p)
    p.set_defaults(func=cmd_noise)

    p = sub.add_parser("stacks", help="the stacks and the knobs each honours")
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.set_defaults(func=cmd_stacks)

    p = sub.add_parser("clean", help="remove namespaces and settings left by killed runs")
    p.add_argument("--force", action="store_true",
                   help="also remove namespaces whose owning process is alive (a run of "
                        "another tool, or a reused pid)")
    p.add_argument("--wait", type=float, default=10.0, metavar="SECONDS",
                   help="how long to wait for a live run's lock (default 10)")
    _hosts_option(p, "also undo, on each host of INVENTORY, what runs whose agent is gone "
                     "left changed (MTU, offloads, qdiscs, sysctls, IRQ affinity)")
    p.set_defaults(func=cmd_clean)

    p = sub.add_parser("hosts", help="check an inventory: reach each host and show what "
                                     "it is (CPU, kernel, NIC, tools)")
    _hosts_option(p, required=True)
    p.add_argument("--json", action="store_true", help="print as JSON")
    p.set_defaults(func=cmd_hosts)

    p = sub.add_parser("lab", help="two SSH hosts on this machine (namespaces with sshd), "
                                   "for trying and testing the SSH mode")
    p.add_argument("action", choices=("up", "down"), help="make them, or remove them")
    p.add_argument("--dir", type=Path, default=None,
                   help="where keys, sshd configurations and inventory.yaml go "
                        "(default: <data dir>/ssh-lab)")
    p.set_defaults(func=cmd_lab)
    return tb


def _hosts_option(p: argparse.ArgumentParser, help_text: str | None = None,
                  required: bool = False) -> None:
    p.add_argument("--hosts", type=Path, default=None, metavar="INVENTORY", required=required,
                   help=help_text or "run on the two hosts of this inventory (YAML) over SSH "
                                     "instead of two namespaces here")


def _probe_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--no-probe", action="store_true",
                   help="take no host probes (by default the session probes this host at its "
                        "start, middle and end: `quiclab host probe`)")


def _common_run_options(p: argparse.ArgumentParser) -> None:
    _probe_option(p)
    p.add_argument("--set", action="extend", nargs="+", default=[], metavar="FIELD=VALUE",
                   help="Scenario fields (mtu_bytes=9000 gso=false rtt_ms=10 loss_pct=0.5 "
                        "link_gbps=1 rcvbuf_bytes=… cc=… cipher=… pin=true …) and testbed "
                        f"knobs ({', '.join(stacks_mod.TESTBED_KNOBS)}); may be repeated")
    p.add_argument("--bytes", type=int, default=None,
                   help="bytes per transfer (default 200 MB)")


def _paths(args: argparse.Namespace) -> Paths:
    """Builds beside the package; run logs under the main CLI's data dir when it gives one."""
    runs_dir = getattr(args, "runs_dir", None)
    main_paths = getattr(args, "paths", None)
    if runs_dir is None and main_paths is not None:
        runs_dir = Path(main_paths.data_dir) / "testbed-runs"
    return Paths.default(runs_dir=runs_dir, build_dir=getattr(args, "build_dir", None))


def _catalog(args: argparse.Namespace) -> Path | None:
    path = getattr(args, "catalog", None)
    if path is None:
        print("note: no --catalog given; runs are not recorded", file=sys.stderr)
    return Path(path) if path is not None else None


def _fail(err: Exception) -> int:
    print(f"quiclab testbed: {err}", file=sys.stderr)
    return 2


def _on_sigterm(signum: int, frame: Any) -> None:
    # Turn SIGTERM into KeyboardInterrupt so the topology is torn down on the way out.
    raise KeyboardInterrupt


def _guarded(body: Any) -> int:
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        return int(body())
    except QuiclabError as err:
        return _fail(err)
    except KeyboardInterrupt:
        print("quiclab testbed: interrupted; namespaces torn down", file=sys.stderr)
        return 130
    finally:
        signal.signal(signal.SIGTERM, previous)


def cmd_build(args: argparse.Namespace) -> int:
    def body() -> int:
        paths = _paths(args)
        builder = Builder(paths.build_dir, paths.peers_dir, paths.bpf_dir,
                          log=lambda line: print(line, flush=True))
        failures = []
        try:
            builder.harness()
            builder.relay()
            builder.loss_object(1.0)
            builder.certs()
        except QuiclabError as err:
            failures.append(f"harness: {err}")
            print(f"harness tools: FAILED — {err}", flush=True)
        results = builder.build_all(stacks_mod.select(args.stacks), force=args.force)
        print(f"{'stack':<10} {'status':<8} {'build s':>8}  note")
        records = builder.records()
        for r in results:
            seconds = float(str(records.get(r.stack, {}).get("seconds", r.seconds)))
            note = "cached" if r.cached else (r.error or "built")
            print(f"{r.stack:<10} {'ok' if r.ok else 'FAILED':<8} {seconds:>8.0f}  {note}")
            if not r.ok:
                failures.append(r.stack)
        return 1 if failures else 0
    return _guarded(body)


def _inventory(args: argparse.Namespace) -> Inventory | None:
    """The ``--hosts`` inventory, checked (one line naming the file, key and value)."""
    path = getattr(args, "hosts", None)
    return Inventory.load(path) if path is not None else None


def _session(args: argparse.Namespace, quiet: bool = False,
             inventory: Inventory | None = None) -> Session:
    require_root()
    log = (lambda line: print(line, file=sys.stderr, flush=True)) if quiet else (
        lambda line: print(line, flush=True))
    testbed = Testbed(_paths(args), log=log, inventory=inventory)
    return Session(testbed, _catalog(args), log=log,
                   probing=not getattr(args, "no_probe", True),
                   probe_points=bool(getattr(args, "probe_points", False)))


@contextlib.contextmanager
def _locked(wait_s: float = 600.0) -> Iterator[None]:
    """Hold the testbed lock, then remove what killed runs left (inside the lock: a
    run killed while this one waited has left its sysctls changed)."""
    with exclusive(wait_s=wait_s):
        clean_stale()
        yield


def _check_repeat(repeat: int | None) -> None:
    if repeat is not None and repeat < 1:
        raise QuiclabError(f"--repeat={repeat}: allowed ≥ 1")


def cmd_run(args: argparse.Namespace) -> int:
    def body() -> int:
        inventory = _inventory(args)
        changes, knobs = parse_set(args.set)
        config = RunConfig.build(args.server, args.client, changes, knobs,
                                 transfer_bytes=args.bytes, experiment=args.experiment)
        # Refuse what a stack cannot honour before creating anything (cores: on the
        # hosts themselves, in SSH mode).
        from quiclab.testbed.config import resolve
        resolve(config, stacks_mod.get(args.server), stacks_mod.get(args.client),
                cores={} if inventory is not None else None)
        _check_repeat(args.repeat)
        session = _session(args, quiet=args.json, inventory=inventory)
        with _locked():
            session.probe("start")
            results = session.run(config, args.repeat)
            session.probe("end")
        ok = [r for r in results if r.status == "ok"]
        if args.json:
            last = results[-1].summary()
            goodputs = [r.goodput_mbps for r in ok if r.goodput_mbps is not None]
            if len(results) > 1:
                last["runs"] = [r.summary() for r in results]
                last["goodput_mbps_median"] = statistics.median(goodputs) if goodputs else None
                last["goodput_cv"] = (statistics.stdev(goodputs) / statistics.mean(goodputs)
                                      if len(goodputs) > 1 else None)
            print(json.dumps(last))
        return 0 if len(ok) == len(results) else 1
    return _guarded(body)


def cmd_sweep(args: argparse.Namespace) -> int:
    def body() -> int:
        _check_repeat(args.repeat)
        inventory = _inventory(args)
        # The whole spec, before any run.
        plan = sweep_plan(args.spec, args.repeat, args.bytes, experiment=args.experiment)
        session = _session(args, inventory=inventory)
        with _locked():
            done = sweep_summary(session, args.spec, repeat=args.repeat,
                                 transfer_bytes=args.bytes, plan=plan)
        print(f"{len(done.results)} runs, {done.failed} failed, {done.skipped} already in "
              f"the catalog ({done.points} points)")
        return 1 if done.failed else 0
    return _guarded(body)


def cmd_matrix(args: argparse.Namespace) -> int:
    def body() -> int:
        inventory = _inventory(args)
        changes, knobs = parse_set(args.set)
        _check_repeat(args.repeat)
        stacks_mod.select(args.stacks)  # every name known, before anything is created
        session = _session(args, quiet=args.json, inventory=inventory)
        names = args.stacks or [s.name for s in stacks_mod.select(None)
                                if session.testbed.builder.is_built(s)]
        with _locked():
            cells = matrix(session, names, repeat=args.repeat, changes=changes, knobs=knobs,
                           transfer_bytes=args.bytes, experiment=args.experiment)
        failed = any(c["status"] == "failed" for c in cells.values())
        if args.json:
            print(json.dumps([{"server": s, "client": c, **v} for (s, c), v in cells.items()]))
            return 1 if failed else 0
        width = max(len(n) for n in names) + 2
        print("server \\ client".ljust(width + 6) + "".join(n.rjust(width) for n in names))
        for server in names:
            cols = []
            for client in names:
                cell = cells[(server, client)]
                cols.append((f"{cell['median_mbps']:.0f}" if cell.get("median_mbps") else
                             ("n/a" if cell["status"] == "incompatible" else "fail"))
                            .rjust(width))
            print(server.ljust(width + 6) + "".join(cols))
        return 1 if failed else 0
    return _guarded(body)


def cmd_noise(args: argparse.Namespace) -> int:
    def body() -> int:
        inventory = _inventory(args)
        _check_repeat(args.repeat)
        stacks = list(dict.fromkeys(args.stacks or NOISE_STACKS))
        stacks_mod.select(stacks)  # every name known, before anything is created
        session = _session(args, quiet=args.json, inventory=inventory)
        with _locked():
            rows = noise(session, stacks, repeat=args.repeat, transfer_bytes=args.bytes,
                         experiment=args.experiment)
        if args.json:
            print(json.dumps(rows))
            return 0
        def fmt(v: Any) -> str:
            return "—" if v is None else (f"{v:.3f}" if isinstance(v, float) and v < 10
                                          else f"{v:.0f}")
        print(f"{'stack':<10} {'unpinned Mbit/s':>16} {'CV':>6} {'pinned Mbit/s':>14} {'CV':>6}")
        for r in rows:
            print(f"{r['stack']:<10} {fmt(r['unpinned_median_mbps']):>16} "
                  f"{fmt(r['unpinned_cv']):>6} {fmt(r['pinned_median_mbps']):>14} "
                  f"{fmt(r['pinned_cv']):>6}")
        return 0
    return _guarded(body)


def cmd_stacks(args: argparse.Namespace) -> int:
    rows = stacks_mod.coverage_table()
    if args.json:
        print(json.dumps(rows))
        return 0
    keys = list(rows[0])
    widths = {k: max(len(k), *(len(str(r[k])) for r in rows)) for k in keys}
    print("  ".join(k.ljust(widths[k]) for k in keys))
    for r in rows:
        print("  ".join(str(r[k]).ljust(widths[k]) for k in keys))
    return 0


def cmd_clean(args: argparse.Namespace) -> int:
    """Remove what killed runs left, holding the lock (so never a live run's
    namespaces or sysctls); ``--force`` also removes namespaces whose owner is alive."""
    def body() -> int:
        inventory = _inventory(args)
        require_root()
        with exclusive(wait_s=args.wait):
            removed = clean_stale(everything=args.force)
            print(f"removed {len(removed)} namespace(s)" + (f": {', '.join(removed)}"
                                                             if removed else ""))
            if inventory is not None and inventory.ssh:
                paths = _paths(args)
                restored = clean_hosts(inventory, Builder(paths.build_dir, paths.peers_dir,
                                                          paths.bpf_dir),
                                       paths.runs_dir / "clean", lock_wait_s=args.wait)
                for role, journals in restored.items():
                    spec = inventory.host(role)
                    undone = sum(int(j.get("undone", 0)) for j in journals)
                    failed = [f for j in journals for f in j.get("failed", [])]
                    print(f"{role} host {spec.name}: {len(journals)} journal(s) of gone agents, "
                          f"{undone} change(s) undone"
                          + (f"; failed: {'; '.join(failed)}" if failed else ""))
        return 0
    return _guarded(body)


def cmd_hosts(args: argparse.Namespace) -> int:
    """Reach both hosts of an inventory and say what they are; nothing is changed."""
    def body() -> int:
        inventory = Inventory.load(args.hosts)
        paths = _paths(args)
        records = probe_hosts(inventory, Builder(paths.build_dir, paths.peers_dir,
                                                 paths.bpf_dir), paths.runs_dir / "hosts")
        if args.json:
            print(json.dumps(records, default=str))
            return 0
        for role, rec in records.items():
            cpu, nic = rec["cpu"], rec["nic"]
            rings = (nic.get("rings") or {}).get("current")
            print(f"{role}: {rec['label']} ({rec['hostname']}, {rec['machine']}, kernel "
                  f"{rec['kernel']})")
            print(f"  cpu: {cpu['name']}, {cpu['microarchitecture']}, {cpu['cores']} cores, "
                  f"{cpu['max_ghz']:.2f} GHz, {rec['numa_nodes']} NUMA node(s)")
            print(f"  nic: {nic['interface']} {nic.get('driver')} firmware "
                  f"{nic.get('firmware') or '-'}, {nic.get('speed_mbps') or '?'} Mbit/s, "
                  f"NUMA node {nic.get('numa_node')}, mtu {nic.get('mtu')}, rings "
                  f"{rings or 'n/a'}, coalescing {'yes' if nic.get('coalesce') else 'n/a'}")
            print(f"  peer cores {rec['peer_cores'] or 'any'}, irq cores "
                  f"{rec['irq_cores'] or 'left alone'}, perf {'yes' if rec['perf'] else 'no'}")
        return 0
    return _guarded(body)


def cmd_lab(args: argparse.Namespace) -> int:
    """``testbed lab up|down``: the two namespaced SSH hosts and their inventory."""
    def body() -> int:
        from quiclab.testbed.lab import SshLab

        main_paths = getattr(args, "paths", None)
        directory = args.dir or (Path(main_paths.data_dir) / "ssh-lab" if main_paths
                                 else Path("/run/quiclab/ssh-lab"))
        lab = SshLab(directory)
        if args.action == "down":
            lab.down()
            print(f"removed the SSH lab of {directory}")
            return 0
        inventory = lab.up()
        print(f"two SSH hosts up; inventory: {inventory}")
        return 0
    return _guarded(body)


def main(argv: list[str] | None = None) -> int:
    """``python -m quiclab.testbed``: this group alone, with ``--catalog``."""
    parser = argparse.ArgumentParser(prog="quiclab")
    parser.add_argument("--catalog", type=Path, default=None, help="DuckDB catalog file")
    sub = parser.add_subparsers(dest="command", required=True)
    add_parser(sub)
    args = parser.parse_args(argv)
    return int(args.func(args))
