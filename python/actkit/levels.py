"""Levels of the Python front: which saved activations are compressed, and how.

The names and overrides are ACTkit's (docs/levels.md), parsed by the same C++
parser the CLI uses (torch.ops.actkit.parse_level). The Python front packs
every floating-point activation autograd saves while the module runs, per
group of values with stochastic rounding (the C++ per-group codec):

    L0  nothing packed
    L1  4 bits a value
    L2  4 bits a value (the CLI's L2; the CLI's L1 packs convolution inputs
        only, where the Python front packs everything at L1 as at L2)
    L3  2 bits on average: each sample's bits from its range, each tensor's
        budget from its gradient in the step before (the C++ controller's heap)
    L4  L3, and every payload moves to host memory in forward (spilling to a
        file past host_budget, through the io_uring engine) and comes back in
        backward, the next ones prefetched in reverse order
    L5  L4 under the defragmenting CUDA allocator (on a machine without CUDA
        it runs as L4, and compress() warns so)

Layer-kind switches (conv, linear, norm, activation) and chunk_bytes, grads
are the C++ layers' and are refused here.
"""

import dataclasses
import numbers
import os

from ._ops import ops

# Overrides the Python front takes, as keyword arguments of compress().
OVERRIDES = ("bits", "group_size", "mixed_precision", "swap", "host_budget", "swap_dir", "prefetch", "defrag")


@dataclasses.dataclass(frozen=True)
class Level:
    name: str          # the preset, "L0".."L5"
    spec: str          # what the C++ parser read, e.g. "L4:host_budget=512M"
    bits: float        # average bits of a packed value; 0: nothing packed (L0)
    group_size: int = 256
    mixed: bool = False      # bits per sample and per tensor from sensitivity (L3+)
    swap: str = "none"       # "none", "host" (spill to a file past host_budget) or "file"
    host_budget: int = -1    # bytes of host memory for swapped payloads; -1: no limit
    swap_dir: str = ""       # the spill file's folder ("": $ACTKIT_SWAP_DIR, else the temp folder)
    prefetch: int = 4        # swapped payloads brought back ahead of need in backward
    defrag: bool = False     # under the defragmenting CUDA allocator (L5)


def _override_text(key, value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, (numbers.Real, str)):  # numbers.Real: numpy's ints and floats too
        raise ValueError("actkit: %s=%r: expected a number, a string or a path" % (key, value))
    text = str(value)
    if "," in text:  # the level parser's separator
        raise ValueError("actkit: %s=%r: a value cannot hold a comma" % (key, value))
    return text


def parse_level(level, **overrides):
    """A Level from a preset name ("L0".."L5", any case) and overrides (see
    OVERRIDES; sizes such as host_budget="2G" as the CLI reads them).
    ValueError naming the value for anything the C++ parser refuses, or an
    override this front does not take; TypeError for a level that is not a
    name."""
    if isinstance(level, Level) and not overrides:
        return level
    if not isinstance(level, str):
        raise TypeError("actkit: level must be a name such as 'L2', got %r" % (level,))
    unknown = sorted(k for k in overrides if k not in OVERRIDES)
    if unknown:
        raise ValueError("actkit: unknown override %s (the Python front takes %s)" % (
            ", ".join(unknown), ", ".join(OVERRIDES)))
    parts = ["%s=%s" % (k, _override_text(k, v)) for k, v in overrides.items() if v is not None]
    spec = level.strip() + (":" + ",".join(parts) if parts else "")
    if ":" in level:
        raise ValueError("actkit: level %r: give overrides as keyword arguments, e.g. compress(m, 'L3', bits=3)"
                         % level)
    try:
        name, canonical, bits, group, mixed, swap, budget, swap_dir, prefetch, defrag = ops.parse_level(spec)
    except RuntimeError as e:
        raise ValueError(str(e).split("\n")[0]) from None
    if not mixed and bits != int(bits):
        raise ValueError("actkit: bits=%g: a fraction needs mixed precision (L3 and above)" % bits)
    packs = name != "L0" and bits < 32
    return Level(name, canonical, float(bits) if packs else 0.0, int(group), bool(mixed) and packs,
                 swap if packs else "none", int(budget), swap_dir, int(prefetch), bool(defrag))
