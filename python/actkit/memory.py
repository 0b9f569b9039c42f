"""Memory you can see from Python: the CPU bytes LibTorch allocates, counted
by ACTkit's tracking allocator (the one `actkit memory` and `actkit train`
report with).

    with actkit.memory.track() as t:
        loss = model(x).sum(); loss.backward()
    print(t.peak_bytes)

On CUDA, torch.cuda.max_memory_allocated() is PyTorch's own count; under
the defragmenting allocator (L5) defrag_stats() adds what it reserved.
"""

from ._ops import ops


class track:
    """Counts LibTorch's CPU allocations while the block runs: `peak_bytes`,
    the most bytes held at once by what the block allocated (blocks allocated
    before it are not counted), and `end_bytes`, what of it is still held at
    the end. One measurement at a time per process (RuntimeError otherwise)."""

    def __init__(self):
        self.peak_bytes = 0
        self.end_bytes = 0
        self._start = 0

    def __enter__(self):
        ops.memory_track(True)
        self._start = ops.memory_bytes()[0]
        return self

    def __exit__(self, *exc):
        current, peak = ops.memory_bytes()
        ops.memory_track(False)
        self.peak_bytes = peak - self._start
        self.end_bytes = current - self._start
        return False


def use_defrag_allocator(limit_bytes=-1):
    """Makes ACTkit's defragmenting allocator (docs/allocator.md) torch's
    CUDA allocator for the rest of the process, as L5 needs: call it before
    the first CUDA tensor. `limit_bytes`: what each device may have mapped;
    -1 takes the device's memory less 512 MiB. Calling it again with the same
    limit does nothing. RuntimeError in a build without CUDA, on a machine
    without a CUDA device, or once CUDA memory was allocated."""
    import torch
    if not ops.defrag_supported():
        raise RuntimeError("actkit.memory.use_defrag_allocator: this build has no CUDA allocator (it needs a "
                           "CUDA torch)")
    if not torch.cuda.is_available():
        raise RuntimeError("actkit.memory.use_defrag_allocator: no CUDA device is visible")
    ops.defrag_install(int(limit_bytes))


def defrag_stats(device=0):
    """The defragmenting allocator's counts on `device`: {"allocated",
    "peak_allocated", "reserved", "peak_reserved", "allocations", "refused",
    "fragmentation"} (bytes and counts; fragmentation = 1 - peak allocated /
    peak reserved). RuntimeError when it is not installed."""
    allocated, peak_allocated, reserved, peak_reserved, allocations, refused = ops.defrag_stats(int(device))
    return {"allocated": allocated, "peak_allocated": peak_allocated, "reserved": reserved,
            "peak_reserved": peak_reserved, "allocations": allocations, "refused": refused,
            "fragmentation": 1.0 - peak_allocated / peak_reserved if peak_reserved else 0.0}
