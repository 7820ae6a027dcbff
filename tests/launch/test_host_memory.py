"""launch.host_memory: a freed large block is reused without page faults (glibc), and the opt-out works."""

import os
import platform
import subprocess
import sys

import pytest

# malloc and touch a 256 MB block (as XLA does its temporaries; numpy would ask for huge pages), free it, do it again:
# print the second round's minor page faults.
_PROBE = """
import ctypes, ctypes.util, resource
from launch import host_memory
print(host_memory.retain_freed_memory())
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype, libc.free.argtypes = ctypes.c_void_p, [ctypes.c_void_p]
def touch():
  block = libc.malloc(256 << 20)
  ctypes.memset(block, 1, 256 << 20)
  libc.free(block)
touch()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
touch()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _probe(**env) -> tuple[str, int]:
  result = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True,
                          env=os.environ | env, cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
  applied, faults = result.stdout.split()
  return applied, int(faults)


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc malloc only")
def test_freed_block_is_reused_without_page_faults():
  applied, faults = _probe()
  assert applied == "True" and faults < 1000  # 256 MB in 4 KB pages would be 65,536 faults.
  applied, faults = _probe(ENCODERLAB_MALLOC="default")
  assert applied == "False" and faults > 30_000  # glibc's own behaviour: a fresh mmap, faulted in again.
