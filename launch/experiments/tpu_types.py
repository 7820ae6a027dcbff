"""What a Cloud TPU `--type` is: chips, JAX devices, hosts, memory, peak compute, host cores, runtime image.

Figures from Google's Cloud TPU pages (cloud.google.com/tpu/docs/ v2, v3, v4, v5e, v5p, v6e: "System architecture" and
"Configurations"; runtimes: cloud.google.com/tpu/docs/runtimes). A type names TensorCores for v2, v3, v4 and v5p
(v4-32 = 16 chips; v4 and v5p fuse a chip's two cores into one JAX device, "megacore"; v2 and v3 chips are two JAX
devices each) and chips for v5e (v5litepod) and v6e. Multi-host slices have 4 chips per host; v5e and v6e slices of
up to 8 chips are one host. Host cores are the vCPUs of the TPU VM's machine type (v4: 240; v5e: ct5lp-hightpu-4t 112,
-8t 224; v5p: 208; v6e: ct6e-standard-4t/-8t 180; v2/v3: 96). Autocheckpoint (`--autocheckpoint-enabled`): "Only TPUs
(v2-v4, and v5e) created through the Cloud TPU API" (cloud.google.com/tpu/docs/autocheckpoint).
"""

from typing import NamedTuple

from encoder import errors

GIB = 2**30


class Generation(NamedTuple):
  runtime: str  # Default --version (the TPU VM base image).
  counts_cores: bool  # The type's number counts TensorCores (2 per chip), not chips.
  devices_per_chip: int  # JAX devices per chip.
  single_host_chips: int  # Slices up to this many chips are one host; larger ones have 4 chips per host.
  hbm_gib: float  # High-bandwidth memory per chip.
  bf16_tflops: float  # Dense bf16 peak per chip.
  host_cores: tuple[int, int]  # vCPUs of a 4-chip host, and of a single host with more chips.
  autocheckpoint: bool  # Supports --autocheckpoint-enabled.


GENERATIONS = {
    "v2": Generation("tpu-ubuntu2204-base", True, 2, 4, 16, 45, (96, 96), True),
    "v3": Generation("tpu-ubuntu2204-base", True, 2, 4, 32, 123, (96, 96), True),
    "v4": Generation("tpu-ubuntu2204-base", True, 1, 4, 32, 275, (240, 240), True),
    "v5litepod": Generation("v2-alpha-tpuv5-lite", False, 1, 8, 16, 197, (112, 224), True),
    "v5p": Generation("v2-alpha-tpuv5", True, 1, 4, 95, 459, (208, 208), False),
    "v6e": Generation("v2-alpha-tpuv6e", False, 1, 8, 32, 918, (180, 180), False),
}
ALIASES = {"v5e": "v5litepod"}  # What people call it -> gcloud's accelerator type prefix.
# The accelerator types Google offers (cloud.google.com/tpu/docs/v2 ... v6e, "Configurations": the tables of
# accelerator types, v5p's of its common shapes); anything else is refused before a create could fail.
SIZES = {
    "v2": (8, 32, 128, 256, 512),
    "v3": (8, 32, 64, 128, 256, 512, 1024, 2048),
    "v4": (8, 16, 32, 64, 128, 256, 512, 1024, 1536, 2048, 4096),
    "v5litepod": (1, 4, 8, 16, 32, 64, 128, 256),
    "v5p": (8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288),
    "v6e": (1, 4, 8, 16, 32, 64, 128, 256),
}


class SliceType(NamedTuple):
  """One accelerator type, e.g. v4-32: 16 chips, 16 JAX devices on 4 hosts."""
  name: str  # gcloud's --accelerator-type (v5e-16 -> v5litepod-16).
  generation: str
  chips: int
  devices: int  # JAX devices of the whole slice (jax.device_count() there).
  hosts: int  # TPU VM workers (gcloud --worker=0..hosts-1; jax.process_count()).
  device_memory: int  # Bytes of HBM per JAX device.
  device_peak_flops: float  # Dense bf16 FLOP/s per JAX device.
  host_cores: int  # vCPUs per host.
  runtime: str
  autocheckpoint: bool


def slice_type(name: str) -> SliceType:
  """'v5e-16' -> SliceType('v5litepod-16', ...); an unknown generation or size is an error naming the known ones."""
  generation, _, count = name.partition("-")
  generation = ALIASES.get(generation, generation)
  known = ", ".join(sorted(set(GENERATIONS) | set(ALIASES)))
  if generation not in GENERATIONS or not count.isdigit() or int(count) < 1:
    raise errors.UserError(f"--type {name}: expected <generation>-<cores or chips> with a generation of {known} "
                           "(e.g. v4-32, v5e-16)")
  g = GENERATIONS[generation]
  if int(count) not in SIZES[generation]:
    raise errors.UserError(f"--type {name}: {count} is not a {generation} slice size; Cloud TPU offers "
                           f"{', '.join(f'{generation}-{n}' for n in SIZES[generation])}")
  chips = int(count) // 2 if g.counts_cores else int(count)
  single = chips <= g.single_host_chips
  hosts = 1 if single else chips // 4
  devices = chips * g.devices_per_chip
  return SliceType(f"{generation}-{count}", generation, chips, devices, hosts,
                   int(g.hbm_gib * GIB / g.devices_per_chip), g.bf16_tflops * 1e12 / g.devices_per_chip,
                   g.host_cores[1 if single and chips > 4 else 0], g.runtime, g.autocheckpoint)
