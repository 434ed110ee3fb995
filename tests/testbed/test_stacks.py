"""Every stack's build recipe and peer interface: a short transfer with itself, and the
perf-protocol interop of the first four stacks (slow: `make test-testbed`)."""

from __future__ import annotations

import pytest

from quiclab.testbed.config import RunConfig
from quiclab.testbed.runner import Testbed
from quiclab.testbed.stacks import STACKS

pytestmark = [pytest.mark.testbed, pytest.mark.slow]

FIRST_FOUR = ["quic-go", "quinn", "s2n-quic", "aioquic"]


def _run(testbed: Testbed, server: str, client: str, **changes) -> None:
    for name in {server, client}:
        result = testbed.builder.build(STACKS[name])
        assert result.ok, f"{name} did not build: {result.error}"
    config = RunConfig.build(server, client, changes, transfer_bytes=5_000_000,
                             experiment="test-stacks")
    run = testbed.run(config, 0, f"test-{server}-{client}")
    assert run.status == "ok", run.failure_reason
    assert run.client.report["bytes"] == 5_000_000
    assert run.server.exit and run.server.exit.cpu_s > 0
    assert run.client.report.get("app") == STACKS[server].app


@pytest.mark.parametrize("stack", sorted(STACKS))
def test_each_stack_talks_to_itself(root, quic_go, testbed, stack):
    _run(testbed, stack, stack)


@pytest.mark.parametrize("server", FIRST_FOUR)
@pytest.mark.parametrize("client", FIRST_FOUR)
def test_perf_protocol_interop(root, quic_go, testbed, server, client):
    if server == client:
        pytest.skip("covered by test_each_stack_talks_to_itself")
    _run(testbed, server, client)


@pytest.mark.parametrize("stack", ["quinn", "s2n-quic"])
def test_jumbo_frames(root, quic_go, testbed, stack):
    _run(testbed, stack, stack, mtu_bytes=9000, gso=False)
