"""Levels of the Python front: which saved activations are compressed, and how.

The same names as ACTkit's C++ levels (docs/levels.md), with what the Python
front implements today: every floating-point activation autograd saves while
the module runs is compressed per group of values with stochastic rounding
(the C++ per-group codec). L1 packs 4 bits a value, L2 2 bits; L0 packs
nothing; L3 packs 2 bits on average, each sample's bits chosen by the C++
controller's greedy heap from its range, each tensor's budget from its
gradient's size in the step before. L4 (swapping) and L5 (the defragmenting
allocator) are refused with an error saying so, not run as something else.
"""

import dataclasses

# The C++ codec's limits (core/pergroup_codec.h).
MIN_BITS, MAX_BITS = 1, 8
MIN_GROUP, MAX_GROUP = 8, 4096


@dataclasses.dataclass(frozen=True)
class Level:
    name: str
    bits: int  # 0: nothing packed (L0); with mixed, the average
    group_size: int = 256
    mixed: bool = False  # L3: bits per sample and per tensor from sensitivity


_PRESETS = {"L0": 0, "L1": 4, "L2": 2, "L3": 2}
_NOT_YET = {
    "L4": "swapping compressed activations to host memory or files",
    "L5": "the defragmenting CUDA allocator",
}


def parse_level(level, bits=None, group_size=None):
    """A Level from a preset name (case-insensitive) and overrides; ValueError
    naming the value for anything else."""
    if isinstance(level, Level):
        return level
    if not isinstance(level, str):
        raise TypeError("actkit: level must be a name such as 'L2', got %r" % (level,))
    name = level.strip().upper()
    if name in _NOT_YET:
        raise NotImplementedError(
            "actkit: level %s (%s) is not in the Python front yet; L0 to L3 are" % (name, _NOT_YET[name]))
    if name not in _PRESETS:
        raise ValueError("actkit: unknown level %r (expected L0, L1, L2 or L3)" % level)
    b = _PRESETS[name] if bits is None else bits
    g = 256 if group_size is None else group_size
    if name != "L0" and not (isinstance(b, int) and MIN_BITS <= b <= MAX_BITS):
        raise ValueError("actkit: bits=%r: an integer in %d..%d" % (b, MIN_BITS, MAX_BITS))
    if not (isinstance(g, int) and MIN_GROUP <= g <= MAX_GROUP and g % 8 == 0):
        raise ValueError("actkit: group_size=%r: a multiple of 8 in %d..%d" % (g, MIN_GROUP, MAX_GROUP))
    return Level(name, 0 if name == "L0" else b, g, mixed=name == "L3")
