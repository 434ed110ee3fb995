"""Folding ``perf script`` output and mapping stacks to the authors' categories."""

from __future__ import annotations

import pytest
import zstandard

from quiclab.datasets.sources.perf import CategoryMapping, fold, fold_zstd, process_prefix
from quiclab.errors import DataError

from .fixtures import PERF_FOLDED_SENDMSG, PERF_MAPPING, perf_script_text


def _by_stack(text: str) -> dict[str, tuple[str, int, int]]:
    return {s.stack: (s.comm, s.samples, s.period) for s in fold(text.splitlines(True))}


def test_fold_outermost_first_with_comm_prefix_and_no_offsets():
    stacks = _by_stack(perf_script_text())
    # Four identical sendmsg samples (one in pid/tid form) fold into one stack.
    assert stacks[PERF_FOLDED_SENDMSG] == ("http_server", 4, 100 + 200 + 300 + 400)
    assert stacks["http_server;main;EVP_AEAD_CTX_seal;aes_gcm_enc_update_vaes_avx2"] == (
        "http_server", 1, 500)
    # A DSO name with parentheses inside does not leak into the symbol.
    assert stacks["http_server;[unknown];memcpy"] == ("http_server", 1, 700)
    assert stacks["perf_5.10;native_write_msr"] == ("perf_5.10", 1, 16)
    assert len(stacks) == 5
    assert sum(s[1] for s in stacks.values()) == 8


def test_fold_zstd_reads_the_compressed_trace():
    blob = zstandard.ZstdCompressor().compress(perf_script_text().encode())
    assert {s.stack for s in fold_zstd(blob, "out.perf.zst")} == set(_by_stack(perf_script_text()))


@pytest.mark.parametrize(("text", "reason"), [
    ("", "no perf samples"),
    ("\n\n", "no perf samples"),
    ("this is not perf script output\n", "line 1: not a perf sample header"),
    ("http_server 1 [000]  1.0:  5 cycles:\n\tnot a frame\n", "line 2: not a stack frame"),
])
def test_fold_refuses_malformed_traces(text: str, reason: str):
    with pytest.raises(DataError) as err:
        fold(text.splitlines(True), "server/out.perf")
    assert err.value.path == "server/out.perf" and reason in err.value.reason


def test_fold_zstd_refuses_a_non_zstd_blob():
    with pytest.raises(DataError, match="not a valid zstd stream"):
        fold_zstd(b"plain text, not zstd", "server/out.perf.zst")


def test_mapping_first_match_in_file_order_and_top_level_category():
    mapping = CategoryMapping(PERF_MAPPING, "lsquic.json")
    assert mapping.classify(PERF_FOLDED_SENDMSG) == ("PACKET_IO", "PACKET_IO (sendmsg)")
    # Case-insensitive, and AES comes before sendmsg in the file.
    assert mapping.classify("http_server;aes_x;__libc_sendmsg") == ("CRYPTO", "CRYPTO (AES)")
    assert mapping.classify("http_server;main") == ("GENERAL", "GENERAL (UNMATCHED)")


def test_mapping_exact_keys_anchored_regexes_and_unmapped():
    mapping = CategoryMapping({"http_client;main;write": "IO (write)",
                               "regex:http_client;\\[unknown\\];write.*": "IO"}, "m.json")
    assert mapping.classify("http_client;main;write") == ("IO", "IO (write)")
    assert mapping.classify("http_client;main;write;more") == ("UNMAPPED", "UNMAPPED")
    assert mapping.classify("http_client;[unknown];write;x") == ("IO", "IO")
    # re.match anchors at the start of the folded stack, as the authors' parser did.
    assert mapping.classify("x;http_client;[unknown];write") == ("UNMAPPED", "UNMAPPED")


def test_mapping_with_a_bad_regex_names_the_file():
    with pytest.raises(DataError) as err:
        CategoryMapping({"regex:(unclosed": "X"}, "quiche.json")
    assert err.value.path == "quiche.json" and "bad regex" in err.value.reason


@pytest.mark.parametrize(("impl", "role", "prefix"), [
    ("lsquic", "server", "http_server"), ("lsquic", "client", "http_client"),
    ("quiche", "server", "quiche-server"), ("quiche", "client", "quiche-client"),
    ("picoquic", "server", "picoquic"),
])
def test_process_prefix(impl: str, role: str, prefix: str):
    assert process_prefix(impl, role) == prefix
