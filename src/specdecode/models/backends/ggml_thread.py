"""llama.cpp's computations on one thread of their own, where its build has AMX kernels.

llama.cpp's AMX kernels load the tile configuration once per thread and count on it staying
loaded. oneDNN (torch's bf16 and int8 matmuls on an AMX CPU) releases the tiles at the end of each
of its kernels, on every thread it ran on, the calling thread included. In one process with both,
a llama.cpp pass on a thread where torch has multiplied since would fault with an illegal
instruction. So where the build has AMX, every llama.cpp computation runs on one dedicated thread
(and the worker threads it starts, which belong to it), where nothing else runs; elsewhere a call
runs where it is made.
"""

from __future__ import annotations

import ctypes
import functools
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")
NAME = "llama.cpp"
_lock = threading.Lock()
_pool: ThreadPoolExecutor | None = None


def system_info() -> str:
    """The CPU features this llama.cpp build's kernels were compiled for (chosen at build time), whether
    it has our Q4_0 and Q6_K rows kernels, and the widest pass our AMX patch runs with VNNI where the
    build has it; llamacpp.system_info is this.
    Costs measured on one build are cached under this string, so a rebuild measures again."""
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode().strip()
    if version := exported_int("specdecode_q4_0_rows_kernel"):
        info += f" Q4_0_ROWS = {version} |"
    if version := exported_int("specdecode_q6_K_rows_kernel"):
        info += f" Q6_K_ROWS = {version} |"
    rows = vnni_rows_max()
    return f"{info} AMX_VNNI_ROWS = {rows} |" if rows else info


def vnni_rows_max() -> int:
    """The widest pass (tokens) that make/llama-cpp-amx-rows.patch runs against Q4_0, Q8_0 and Q6_K
    weights with VNNI instead of AMX tiles, read from the installed CPU library; 0 for a build
    without it."""
    return exported_int("specdecode_amx_vnni_rows_max")


@functools.cache
def exported_int(name: str) -> int:
    """An int our patches export from the installed CPU library (make/llama-cpp-*-rows.patch); 0 for a
    build without it. Read once a process: the library does not change under a running process."""
    import llama_cpp

    library = min((Path(llama_cpp.__file__).parent / "lib").glob("libggml-cpu.so*"), default=None)
    if library is None:
        return 0
    try:
        return ctypes.c_int.in_dll(ctypes.CDLL(str(library)), name).value
    except (OSError, ValueError):
        return 0


@functools.cache
def has_amx() -> bool:
    """Whether this llama.cpp build runs AMX kernels (decided when it was compiled: see the Makefile)."""
    return "AMX_INT8 = 1" in system_info()


def run(fn: Callable[..., T], *args, **kwargs) -> T:
    """fn(*args, **kwargs) on llama.cpp's own thread where the build needs one; its result or its
    exception, as if called here."""
    global _pool
    if not has_amx() or threading.current_thread().name.startswith(NAME):
        return fn(*args, **kwargs)
    with _lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=NAME)
    return _pool.submit(fn, *args, **kwargs).result()
