"""A model's weights on 2 MB pages (Linux): a CPU decode pass reads every weight once, and on 4 KB
pages that is one TLB entry per 4 KB, most of them misses; on 2 MB pages it is 512 times fewer.

llama.cpp copies most of a quantised model's weights out of the mapped GGUF into memory of its own
(the layout its matrix kernels read: its AMX and repacked buffers), allocated with malloc, so on
4 KB pages unless the system makes every allocation huge (transparent huge pages set to "always";
many distributions ship "madvise"). After the model loads, `collapsed()` asks the kernel to move
the anonymous regions the load made or filled onto huge pages (madvise MADV_COLLAPSE, Linux 6.1+;
it copies the memory: seconds per GB, measured in docs/backends.md). Where the kernel refuses,
nothing changes and the count says so; a load that lands in memory an earlier model freed, with no
region made or grown, is not seen.

SPECDECODE_HUGE_PAGES=0 turns it off (to measure what it is worth: `specdecode profile curve`
with and without).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
from dataclasses import dataclass

MADV_COLLAPSE = 25
HUGE = 2 << 20
MIN_REGION = 32 << 20  # weights, not the small allocations around them


def enabled() -> bool:
    return os.environ.get("SPECDECODE_HUGE_PAGES", "1") != "0"


def anonymous_regions() -> dict[tuple[int, int], int]:
    """Private read-write anonymous mappings of this process of at least MIN_REGION bytes, with the
    bytes of each in memory."""
    regions: dict[tuple[int, int], int] = {}
    current = None
    try:
        with open("/proc/self/smaps") as smaps:
            for line in smaps:
                fields = line.split()
                if fields[0].endswith(":"):
                    if current is not None and fields[0] == "Rss:":
                        regions[current] = int(fields[1]) << 10
                    continue
                current = None
                if len(fields) == 5 and fields[1] == "rw-p":
                    start, end = (int(x, 16) for x in fields[0].split("-"))
                    if end - start >= MIN_REGION:
                        current = (start, end)
    except OSError:
        pass
    return regions


def grown(before: dict[tuple[int, int], int], after: dict[tuple[int, int], int]) -> list[tuple[int, int]]:
    """Regions new since `before`, or holding MIN_REGION more bytes: where a load put its weights
    (an allocator may place them in a region that existed, or grow one)."""
    return [r for r, rss in after.items() if r not in before or rss - before[r] >= MIN_REGION]


def present_pages(start: int, end: int) -> list[bool]:
    """Whether each 4 KB page of [start, end) is in memory (/proc/self/pagemap, bit 63)."""
    import struct

    page = os.sysconf("SC_PAGE_SIZE")
    with open("/proc/self/pagemap", "rb") as pagemap:
        pagemap.seek(start // page * 8)
        data = pagemap.read((end - start) // page * 8)
    return [bool(entry >> 63) for entry in struct.unpack(f"{len(data) // 8}Q", data)]


def collapse(start: int, end: int) -> int:
    """Bytes of [start, end) moved onto huge pages (0 where the kernel refuses). Only 2 MB
    stretches wholly in memory are moved: an untouched stretch would be filled (memory nobody
    asked for), and those hold no weights."""
    first, last = (start + HUGE - 1) // HUGE * HUGE, end // HUGE * HUGE
    if last <= first:
        return 0
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        present = present_pages(first, last)
    except OSError:
        return 0
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    per = HUGE // os.sysconf("SC_PAGE_SIZE")
    moved = 0
    # Stretch by stretch: the kernel refuses a whole range for one stretch it cannot move.
    for i, page in enumerate(range(first, last, HUGE)):
        if all(present[i * per:(i + 1) * per]) and libc.madvise(page, HUGE, MADV_COLLAPSE) == 0:
            moved += HUGE
    return moved


@dataclass
class Collapsed:
    bytes: int = 0  # moved onto huge pages


@contextlib.contextmanager
def collapsed():
    """Around a model load: the anonymous memory it filled goes onto huge pages after it."""
    report = Collapsed()
    before = anonymous_regions() if enabled() else None
    yield report
    if before is not None:
        report.bytes = sum(collapse(a, b) for a, b in grown(before, anonymous_regions()))


def supported() -> bool:
    """Whether this kernel moves anonymous memory onto huge pages on request (a 6 MB probe)."""
    import mmap

    size = 2 * HUGE + HUGE  # room for one aligned 2 MB page whatever the mapping's alignment
    try:
        probe = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except OSError:
        return False
    try:
        probe.write(b"\1" * size)  # in memory: collapse() moves only stretches that are
        view = ctypes.c_char.from_buffer(probe)
        start = ctypes.addressof(view)
        del view  # the address stays valid while the mapping is open
        return collapse(start, start + size) > 0
    finally:
        probe.close()
