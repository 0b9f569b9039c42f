"""ACTkit from Python: compressed saved activations on any torch.nn.Module.

    import actkit
    model = actkit.compress(model, "L2")   # one line before the training loop

The codecs are ACTkit's C++ (torch.ops.actkit.pack / unpack), the same code the
actkit CLI trains with; see docs/python.md.
"""

from . import memory
from ._ops import ops
from .compress import compress, decompress, stats
from .levels import Level, parse_level

__all__ = ["compress", "decompress", "stats", "memory", "ops", "Level", "parse_level"]
__version__ = "0.1.0"
