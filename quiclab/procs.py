"""Worker processes that do not outlive the process that started them."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

#: prctl(2) option: the signal this process gets when its parent thread ends.
_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int) -> None:
    """End this process when ``parent_pid``, the process that started it, ends.

    Linux's ``prctl(PR_SET_PDEATHSIG, SIGKILL)`` has the kernel kill it then,
    whatever it is computing; a parent already gone (it died between the fork
    and this call) means exit now. Set only when ``parent_pid`` is this
    process's parent (a fork); a worker started by a fork server has another
    parent and is left as it is. Elsewhere than Linux nothing is done. Called
    through ctypes: one system call does not warrant a dependency (python-prctl).
    """
    if not sys.platform.startswith("linux") or os.getppid() != parent_pid:
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no prctl in this libc: the old behaviour
        return
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        os._exit(1)
