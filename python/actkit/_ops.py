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
