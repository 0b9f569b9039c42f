#!/usr/bin/env python3
"""Writes tests/oracle/fixtures/small.safetensors and tests/oracle/fixtures/sharded/:
files as Python's safetensors package writes them, read by
tests/models/test_safetensors.cpp. They are committed, so that the unit tests check
the C++ reader against the reference writer without needing Python at test
time; run this again (with torch and safetensors) only to regenerate them.

Values follow formulas the C++ test recomputes (see small_tensors below).
"""
import json
import pathlib

import torch
from safetensors.torch import save_file

OUT = pathlib.Path(__file__).resolve().parent / "fixtures"


def small_tensors():
    # Every dtype ACTkit reads, a scalar and an empty tensor.
    return {
        "f32": torch.arange(6, dtype=torch.float32).reshape(2, 3) * 0.5,
        "f64": torch.arange(4, dtype=torch.float64) / 8,
        "f16": torch.arange(5, dtype=torch.float16) / 4,
        "bf16": torch.arange(5, dtype=torch.bfloat16) / 4,
        "position_ids": torch.arange(4, dtype=torch.int64).reshape(1, 4),
        "i32": torch.arange(5, dtype=torch.int32) - 2,
        "i16": torch.arange(5, dtype=torch.int16) - 2,
        "i8": torch.arange(5, dtype=torch.int8) - 2,
        "u8": torch.arange(5, dtype=torch.uint8) + 250,
        "bool": torch.tensor([True, False, True]),
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 3),
    }


def sharded_tensors():
    # name -> (shard, tensor): tensor i holds arange(numel) + 10 * i.
    shapes = [("embed.weight", (4, 2), 1), ("layer.0.weight", (2, 2), 1), ("layer.0.bias", (2,), 2),
              ("head.weight", (3, 2), 2)]
    return {name: (shard, (torch.arange(int(torch.tensor(shape).prod())) + 10 * i).float().reshape(shape))
            for i, (name, shape, shard) in enumerate(shapes)}


def main():
    OUT.mkdir(exist_ok=True)
    save_file(small_tensors(), OUT / "small.safetensors", metadata={"format": "pt", "source": "safetensors"})

    sharded = OUT / "sharded"
    sharded.mkdir(exist_ok=True)
    shards = {1: {}, 2: {}}
    for name, (shard, tensor) in sharded_tensors().items():
        shards[shard][name] = tensor
    weight_map = {}
    total = 0
    for shard, tensors in shards.items():
        file = f"model-{shard:05d}-of-00002.safetensors"
        save_file(tensors, sharded / file, metadata={"format": "pt"})
        for name, tensor in tensors.items():
            weight_map[name] = file
            total += tensor.numel() * tensor.element_size()
    # As transformers' save_pretrained writes it.
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
