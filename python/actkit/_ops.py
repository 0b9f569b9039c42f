"""Loads ACTkit's torch operators (torch.ops.actkit.*) once, on import."""

import os

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))


def _load():
    for name in sorted(os.listdir(_HERE)):
        if name.startswith("_actkit_ops") and name.endswith(".so"):
            torch.ops.load_library(os.path.join(_HERE, name))
            return
    raise ImportError(
        "actkit: the compiled operators (_actkit_ops*.so) are not in %s: install the package with "
        "`pip install --no-build-isolation .` from ACTkit's source folder" % _HERE)


_load()
ops = torch.ops.actkit


# Shapes without data, for torch.compile's tracing (fake tensors): a pack's
# payload is packed_bytes long, an unpack gives the packed tensor's shape.
@torch.library.register_fake("actkit::pack")
def _pack_fake(x, bits, group_size, seed, sample_bits):
    return x.new_empty((ops.packed_bytes(list(x.shape), bits, group_size, sample_bits),), dtype=torch.uint8)


@torch.library.register_fake("actkit::unpack")
def _unpack_fake(payload, shape, dtype, bits, group_size, sample_bits):
    return payload.new_empty(shape, dtype=dtype)


def seed():
    """A stochastic-rounding seed from torch's default generator, as the
    one-element int64 tensor actkit.pack takes (drawn afresh in a compiled
    graph too)."""
    return torch.randint(0, 2 ** 62, (1,), dtype=torch.int64)
