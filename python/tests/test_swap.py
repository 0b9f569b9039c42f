"""L4 and L5 from Python: payloads leave LibTorch's memory in forward (to the
host tier, or a file through the io_uring engine) and come back, prefetched
in reverse order, in backward -- with L3's gradients bit for bit."""

import copy
import os
import warnings

import pytest
import torch

import actkit


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.GELU()) for _ in range(6)])


def step(m, level, seed=4, **overrides):
    """One forward and backward of a copy of `m` at `level`: its gradients,
    the CPU bytes LibTorch held at the end of forward, and actkit.stats()."""
    m = actkit.compress(copy.deepcopy(m), level, **overrides)
    x = torch.randn(32, 256, generator=torch.Generator().manual_seed(1))
    torch.manual_seed(seed)
    with actkit.memory.track() as t:
        loss = m(x).square().mean()
    held = t.end_bytes
    loss.backward()
    return torch.cat([p.grad.flatten() for p in m.parameters()]), held, actkit.stats(m)


def test_l4_trains_bit_for_bit_as_l3_and_moves_the_payloads_out():
    base = model()
    g3, held3, s3 = step(base, "L3")
    g4, held4, s4 = step(base, "L4")
    assert torch.equal(g3, g4)
    swap = s4["swap"]
    assert swap["bytes_out"] == s4["packed_bytes"] == s3["packed_bytes"]
    assert swap["bytes_in"] >= swap["bytes_out"]  # every payload came back (one read twice: two ops saved it)
    assert swap["host_bytes"] == 0, "a payload outlived the backward that read it"
    # What L3 keeps in LibTorch's memory after forward, L4 keeps in the host
    # tier instead (on a CPU, outside what LibTorch's allocator counts).
    assert held3 - held4 >= 0.9 * s3["packed_bytes"], (held3, held4, s3["packed_bytes"])


def test_l4_spills_to_a_file_and_reads_it_back_ahead_of_backward(tmp_path):
    base = model()
    g3, _, _ = step(base, "L3")
    g4, _, s = step(base, "L4", host_budget=0, swap_dir=tmp_path, prefetch=2)  # a pathlib.Path, as users pass it
    assert torch.equal(g3, g4)
    swap = s["swap"]
    assert s["engine"] in ("io_uring", "threads"), s["engine"]
    assert swap["spilled_bytes"] == swap["bytes_out"] and swap["peak_host_bytes"] <= swap["bytes_out"]
    # Each read started the reads of the two payloads packed before it.
    assert swap["file_prefetched"] >= swap["swapped_out"] - 3, swap
    assert swap["file_bytes"] == 0
    assert os.listdir(tmp_path) == [], "the spill file outlived its run (it is unlinked when made)"


def test_a_swap_folder_that_cannot_take_the_file_is_a_clear_error():
    m = actkit.compress(model(), "L4", swap="file", swap_dir="/proc/actkit-no-such-folder")
    with pytest.raises(RuntimeError, match="actkit-no-such-folder"):
        m(torch.randn(4, 256)).sum().backward()


def test_l5_on_a_machine_without_cuda_runs_as_l4_and_says_so():
    if torch.cuda.is_available():
        pytest.skip("a CUDA machine runs L5 under the defragmenting allocator")
    base = model()
    g4, _, _ = step(base, "L4")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        g5, _, s = step(base, "L5")
    assert any("runs as L4" in str(w.message) for w in caught)
    assert torch.equal(g4, g5) and s["level"] == "L5"
    with pytest.raises(RuntimeError, match="CUDA"):
        actkit.memory.use_defrag_allocator()
