"""The heap policy for large tensors (`explorer.runner.heap`), in fresh processes (malloc's state is
per process): a freed tensor above the threshold hands its pages back, measured by psutil's RSS."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")

# A 24 MB tensor freed raises glibc's dynamic threshold to 24 MB; a 12 MB one allocated after it then
# comes from the heap, and freeing it returns nothing (it is below the 64 MB trim threshold the first
# free set). With the threshold fixed, the 12 MB tensor gets pages of its own, returned when freed.
SCRIPT = textwrap.dedent("""
    import sys, psutil, torch
    from explorer.runner.heap import map_large_blocks
    if sys.argv[1] == "fixed":
        assert map_large_blocks()
    torch.ones(6 * 2**20).sum()  # 24 MB, freed
    rss = psutil.Process().memory_info().rss
    block = torch.ones(3 * 2**20)  # 12 MB, every page touched
    held = psutil.Process().memory_info().rss - rss
    del block
    print(held, psutil.Process().memory_info().rss - rss)
""")


def _held_and_left(policy: str) -> tuple[int, int]:
    out = subprocess.run([sys.executable, "-c", SCRIPT, policy], capture_output=True, text=True, check=True)
    held, left = out.stdout.split()
    return int(held), int(left)


def test_a_freed_large_tensor_hands_its_pages_back_under_the_fixed_threshold():
    held, left = _held_and_left("fixed")
    assert held > 10 * 2**20  # the tensor's pages were resident
    assert left < 2 * 2**20  # and were returned when it was freed


def test_without_it_the_same_tensor_stays_in_the_heap():
    """The oracle: glibc's default policy keeps the freed 12 MB, so the test above can fail."""
    held, left = _held_and_left("default")
    assert held > 10 * 2**20 and left > 10 * 2**20
