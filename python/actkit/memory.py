"""Memory you can see from Python: the CPU bytes LibTorch allocates, counted
by ACTkit's tracking allocator (the one `actkit memory` and `actkit train`
report with).

    with actkit.memory.track() as t:
        loss = model(x).sum(); loss.backward()
    print(t.peak_bytes)

On CUDA, torch.cuda.max_memory_allocated() is PyTorch's own count.
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
