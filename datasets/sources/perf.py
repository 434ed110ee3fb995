"""Fold ``perf script`` call stacks and map them to the authors' CPU categories.

A ``perf script`` sample is a header line (``comm pid [cpu] time: period event:``)
followed by one line per frame, innermost first, and a blank line. Folding
writes the frames outermost first, joined by ``;`` and prefixed by the
command name, with ``+0x…`` offsets dropped — the convention the authors'
category mappings (``analysis-pipeline/result-parsing/util/perf/mappings``)
were written against (Kempf et al. 2024 §4.4, Fig. 7).

Mapping rules are tried in file order; a key ``regex:<re>`` matches when the
regular expression matches at the start of the folded stack (case-insensitive),
any other key when it equals the stack. The first match gives the category;
the top-level category is the label's first word (``PACKET_IO (sendmsg)`` →
``PACKET_IO``). Stacks that do not start with the implementation's process
name are kept with ``in_process = false``.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from quiclab.errors import DataError

_HEADER = re.compile(r"^(?P<comm>\S.*?)\s+(?P<pid>-?\d+)(?:/-?\d+)?\s+\[(?P<cpu>\d+)\]\s+"
                     r"(?P<time>[\d.]+):\s+(?P<period>\d+)\s+(?P<event>\S+?):?\s*$")
# A frame: address, symbol (+offset), and the DSO in parentheses — which may
# itself contain parentheses, e.g. "(/usr/lib/libc.so (deleted))".
_FRAME = re.compile(r"^\s+[0-9a-f]+\s+(?P<sym>.*?)\s+\((?P<dso>.*)\)\s*$")


@dataclass(frozen=True)
class FoldedStack:
    comm: str
    stack: str
    samples: int
    period: int


def _symbol(raw: str) -> str:
    sym = re.sub(r"\+0x[0-9a-f]+$", "", raw.strip())
    return sym or "[unknown]"


def fold(lines: Iterable[str], path: str = "out.perf") -> list[FoldedStack]:
    """Fold a ``perf script`` stream into unique stacks with sample and period sums."""
    samples: dict[tuple[str, str], list[int]] = {}
    comm: str | None = None
    period = 0
    frames: list[str] = []

    def flush() -> None:
        if comm is None:
            return
        stack = ";".join([comm, *reversed(frames)])
        acc = samples.setdefault((comm, stack), [0, 0])
        acc[0] += 1
        acc[1] += period

    headers = 0
    for lineno, line in enumerate(lines, 1):
        line = line.rstrip("\n")
        if not line.strip():
            flush()
            comm, frames = None, []
            continue
        if not line[0].isspace():
            m = _HEADER.match(line)
            if not m:
                raise DataError(path, f"line {lineno}: not a perf sample header: {line[:60]!r}",
                                field="perf script")
            flush()
            comm, period, frames = m.group("comm"), int(m.group("period")), []
            headers += 1
            continue
        fm = _FRAME.match(line)
        if fm is None:
            raise DataError(path, f"line {lineno}: not a stack frame: {line[:60]!r}",
                            field="perf script")
        frames.append(_symbol(fm.group("sym")))
    flush()
    if headers == 0:
        raise DataError(path, "no perf samples", field="perf script")
    return [FoldedStack(c, s, v[0], v[1]) for (c, s), v in samples.items()]


#: Compressed bytes handed to the decompressor at a time.
_CHUNK = 1 << 20


def zstd_lines(data: bytes, path: str) -> Iterator[str]:
    """The text lines of a zstd-compressed file, every frame of it, checked to the end.

    ``zstandard``'s stream reader simply stops where the input stops, so a trace
    cut short would read as a shorter, complete one. Here a frame that does not
    end (the file cut anywhere but between frames) or bytes that are not zstd
    raise DataError naming the file; the check is made before the last,
    possibly cut, line is handed out, so the parser never sees half a line.
    Bytes that are not UTF-8 are replaced (perf prints symbols as it finds them).
    """
    import zstandard

    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    rest = memoryview(data)
    frames = 0
    while rest.nbytes:
        dobj = zstandard.ZstdDecompressor().decompressobj()
        used = 0
        try:
            while used < rest.nbytes and not dobj.eof:
                chunk = rest[used:used + _CHUNK]
                used += chunk.nbytes
                text = pending + decoder.decode(dobj.decompress(chunk))
                lines = text.split("\n")
                pending = lines.pop()
                yield from lines
        except zstandard.ZstdError as err:
            raise DataError(path, f"not a valid zstd stream ({err})") from None
        if not dobj.eof:
            raise DataError(path, f"truncated zstd stream: frame {frames + 1} does not end "
                                  f"({len(data):,d} bytes; a cut copy?)", field="zstd")
        frames += 1
        # What follows the frame's end in the chunk just fed belongs to the next frame.
        rest = rest[used - len(dobj.unused_data):]
    pending += decoder.decode(b"", final=True)
    if frames == 0:
        raise DataError(path, "empty file (no zstd frame)", field="zstd")
    if pending:
        yield pending


def fold_zstd(data: bytes, path: str) -> list[FoldedStack]:
    """Fold a zstd-compressed ``perf script`` output (``out.perf.zst``); a truncated or
    damaged stream raises DataError (:func:`zstd_lines`)."""
    return fold(zstd_lines(data, path), path)


class CategoryMapping:
    """The authors' function → category mapping for one implementation."""

    def __init__(self, rules: dict[str, str], name: str):
        self.name = name
        self.rules: list[tuple[re.Pattern[str] | None, str, str]] = []
        for key, label in rules.items():
            if key.startswith("regex:"):
                try:
                    self.rules.append((re.compile(key[6:], re.IGNORECASE), key, label))
                except re.error as err:
                    raise DataError(name, f"bad regex {key!r} ({err})") from None
            else:
                self.rules.append((None, key, label))

    def classify(self, stack: str) -> tuple[str, str]:
        """(top-level category, full label) of a folded stack."""
        for pattern, key, label in self.rules:
            if (pattern is not None and pattern.match(stack)) or (pattern is None and stack == key):
                return label.split(" ")[0], label
        return "UNMAPPED", "UNMAPPED"


def process_prefix(implementation: str, role: str) -> str:
    """Process name whose stacks belong to the implementation (the authors' prefixes)."""
    if implementation.startswith("quiche"):
        return f"quiche-{role}"
    if implementation.startswith("lsquic"):
        return f"http_{role}"
    return implementation
