#!/usr/bin/env python3
"""Writes tests/oracle/fixtures/*.pt: small files as Python's torch.save writes
them, read by tests/models/test_state_dict.cpp. They are committed, so that the unit
tests check the C++ reader against real Python output without needing Python
at test time; run this again (with python3-torch) only to regenerate them.

Values follow a formula the C++ test recomputes: entry i of a state dict
holds arange(numel) * 0.5 + i in its shape (num_batches_tracked: 7 + i).
"""
import collections
import pathlib

import torch
from torch import nn

OUT = pathlib.Path(__file__).resolve().parent / "fixtures"


def patterned_state_dict():
    # Conv2d + BatchNorm2d + Linear: weights, biases, running statistics and
    # the int64 scalar num_batches_tracked, with torchvision-style names.
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(4, 2))
    with torch.no_grad():
        for i, t in enumerate(model.state_dict().values()):
            if t.dtype == torch.int64:
                t.fill_(7 + i)
            else:
                t.copy_((torch.arange(t.numel(), dtype=t.dtype) * 0.5 + i).reshape(t.shape))
    return model.state_dict()  # an OrderedDict with _metadata, as Python saves it


def main():
    OUT.mkdir(exist_ok=True)
    state = patterned_state_dict()
    assert isinstance(state, collections.OrderedDict) and hasattr(state, "_metadata")
    torch.save(state, OUT / "ordered_dict.pt")
    torch.save(dict(state), OUT / "plain_dict.pt")
    torch.save(state, OUT / "protocol4.pt", pickle_protocol=4)
    torch.save(state, OUT / "legacy.pt", _use_new_zipfile_serialization=False)

    # Views of one storage (offset, strides), every dtype a model holds, a
    # Parameter, a scalar and an empty tensor.
    base = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    tensors = collections.OrderedDict()
    tensors["base"] = base
    tensors["view"] = base[1:, ::2]  # offset 6, strides (6, 2): shares base's storage
    tensors["transposed"] = base.t()
    tensors["float64"] = torch.arange(5, dtype=torch.float64) / 4
    tensors["float16"] = torch.arange(5, dtype=torch.float16) / 4
    tensors["bfloat16"] = torch.arange(5, dtype=torch.bfloat16) / 4
    tensors["int64"] = torch.arange(5, dtype=torch.int64) - 2
    tensors["int32"] = torch.arange(5, dtype=torch.int32) - 2
    tensors["int8"] = torch.arange(5, dtype=torch.int8) - 2
    tensors["uint8"] = torch.arange(5, dtype=torch.uint8) + 250
    tensors["bool"] = torch.tensor([True, False, True])
    tensors["scalar"] = torch.tensor(3.5)
    tensors["empty"] = torch.zeros(0, 3)
    tensors["parameter"] = nn.Parameter(torch.full((2, 2), 1.5))
    torch.save(tensors, OUT / "views_and_dtypes.pt")

    # Files that are not state dicts.
    torch.save(torch.zeros(3), OUT / "tensor_not_dict.pt")
    torch.save({"weight": torch.zeros(3), "epoch": 3}, OUT / "int_entry.pt")


if __name__ == "__main__":
    main()
