"""A command's process keeps the memory glibc's malloc frees, for reuse, instead of unmapping it."""

import os
import subprocess
import sys

import pytest

from pipeline.startup import malloc_policy

GLIBC = os.confstr("CS_GNU_LIBC_VERSION").startswith("glibc") if hasattr(os, "confstr") else False

# mallinfo2().hblks: blocks malloc handed to mmap. A 4 MB block is one under glibc's default
# threshold (128 KB), and none once the threshold is 32 MB.
_PROBE = """
import ctypes, sys
from pipeline.startup import malloc_policy

class Info(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = Info
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = (ctypes.c_void_p,)

def mapped_for(nbytes):
    before = libc.mallinfo2().hblks
    block = libc.malloc(nbytes)
    during = libc.mallinfo2().hblks
    libc.free(block)
    return during - before

default = mapped_for(4 << 20)
kept = malloc_policy.keep_freed_memory()
print(default, kept, mapped_for(4 << 20), mapped_for(256 << 20))
"""


@pytest.mark.slow
@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only (this test's machines and CI run Debian)")
def test_blocks_up_to_32_mb_come_from_the_heap_once_set():
    out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    default, kept, small, large = out.stdout.split()
    assert (default, kept) == ("1", "True")  # mapped by default; the settings took
    assert (small, large) == ("0", "1")  # 4 MB now from the heap; 256 MB (over threshold and pad) mapped


def test_elsewhere_than_glibc_nothing_is_set(monkeypatch):
    monkeypatch.setattr(malloc_policy.os, "confstr", lambda name: "musl 1.2")
    assert malloc_policy.keep_freed_memory() is False


def test_the_command_sets_it_as_it_starts_in_a_one_command_process(monkeypatch):
    from pipeline.cli import run
    from pipeline.startup import command

    calls = []
    monkeypatch.setattr(command.malloc_policy, "keep_freed_memory", lambda: calls.append(1) or True)
    argv = ["--input", "nothing-matches-*.jsonl.zst", "--output_dir", "/nonexistent/out", "--tokenizer_model",
            "missing.model"]
    assert run.cli(argv) == 2
    assert calls == []  # a test (or a program) calling the command keeps glibc's defaults
    monkeypatch.setattr(command, "_ONE_COMMAND", [True])  # what the entry points say (pipeline/run.py)
    assert run.cli(argv) == 2
    assert calls == [1]


@pytest.mark.parametrize("env", [
    {"MALLOC_TRIM_THRESHOLD_": "0"},
    {"MALLOC_ARENA_MAX": "2"},
    {"GLIBC_TUNABLES": "glibc.rtld.optional_static_tls=1:glibc.malloc.mmap_threshold=65536"},
])
def test_a_users_own_malloc_settings_stand(monkeypatch, env):
    for name in (*malloc_policy.USER_SETTINGS, "GLIBC_TUNABLES"):
        monkeypatch.delenv(name, raising=False)
    assert not malloc_policy.user_tuned()
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert malloc_policy.user_tuned()
    assert malloc_policy.keep_freed_memory() is False


def test_other_tunables_are_not_a_users_malloc_settings():
    assert not malloc_policy.user_tuned({"GLIBC_TUNABLES": "glibc.rtld.optional_static_tls=1", "MALLOC_CHECK_": "0"})
