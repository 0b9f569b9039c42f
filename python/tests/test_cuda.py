"""The Python front on a GPU (skipped without one): the CUDA codec writes the
CPU's bytes, L4 moves payloads off the device and back, and L5 runs under the
defragmenting allocator in a process of its own."""

import copy
import os
import subprocess
import sys
import textwrap

import pytest
import torch

import actkit

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def test_cuda_payloads_are_the_cpus_bytes():
    x = torch.randn(16, 1000, generator=torch.Generator().manual_seed(2))
    for bits in (2, 4, 8):
        cpu = actkit.ops.pack(x, bits, 256, torch.tensor([11]), [])
        gpu = actkit.ops.pack(x.cuda(), bits, 256, torch.tensor([11]), [])
        assert torch.equal(cpu, gpu.cpu()), bits
    sample_bits = [1, 2, 3, 4, 5, 6, 7, 8] * 2
    assert torch.equal(actkit.ops.pack(x, 2, 256, torch.tensor([5]), sample_bits),
                       actkit.ops.pack(x.cuda(), 2, 256, torch.tensor([5]), sample_bits).cpu())


def test_l4_on_cuda_is_l3_bit_for_bit_with_the_payloads_off_the_device():
    torch.manual_seed(0)
    base = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.GELU())
                                 for _ in range(8)]).cuda()
    x = torch.randn(256, 1024, device="cuda")

    def step(level):
        m = actkit.compress(copy.deepcopy(base), level)
        torch.manual_seed(3)
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        loss = m(x).square().mean()
        torch.cuda.synchronize()
        held = torch.cuda.memory_allocated() - before
        loss.backward()
        return torch.cat([p.grad.flatten() for p in m.parameters()]), held, actkit.stats(m)

    g3, held3, s3 = step("L3")
    g4, held4, s4 = step("L4")
    assert torch.equal(g3, g4)
    assert s4["swap"]["bytes_out"] == s4["packed_bytes"]
    assert held3 - held4 >= 0.5 * s3["packed_bytes"], (held3, held4)


def test_l5_runs_under_the_defragmenting_allocator():
    if not actkit.ops.defrag_supported():
        pytest.skip("this build has no CUDA allocator")
    script = textwrap.dedent("""
        import torch, actkit
        actkit.memory.use_defrag_allocator()
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.GELU(), torch.nn.Linear(512, 10)).cuda()
        actkit.compress(m, "L5")
        for _ in range(2):
            m(torch.randn(64, 512, device="cuda")).sum().backward()
        torch.cuda.synchronize()
        s = actkit.memory.defrag_stats(0)
        assert s["allocations"] > 0 and s["peak_reserved"] >= s["peak_allocated"] > 0, s
        assert actkit.stats(m)["swap"]["bytes_out"] > 0
        print("ok")
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ))
    assert done.returncode == 0 and "ok" in done.stdout, done.stderr[-2000:]


def test_l5_after_cuda_memory_was_allocated_is_a_clear_error():
    if not actkit.ops.defrag_supported() or actkit.ops.defrag_installed():
        pytest.skip("needs a build with the allocator, not yet installed")
    torch.zeros(1, device="cuda")  # torch's caching allocator now serves this process
    with pytest.raises(RuntimeError, match="use_defrag_allocator"):
        actkit.compress(torch.nn.Linear(4, 4), "L5")
