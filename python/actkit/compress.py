"""actkit.compress(module): the activations autograd saves while `module`
runs are kept compressed until backward needs them.

Mechanism: the module's forward runs under torch.autograd.graph's
saved_tensors_hooks; the pack hook hands each saved floating-point tensor
to torch.ops.actkit.pack (the C++ per-group codec), the unpack hook decodes
it when backward reads it. Parameters and buffers (and views of them) are
never packed, nor integer or boolean tensors, nor tensors of rank 0 or 1
(per-channel statistics), nor tensors smaller than a group. A tensor saved
twice in one forward is packed once. Each pack draws its stochastic-rounding
seed from torch's default generator, so torch.manual_seed makes a run
reproducible and every step draws fresh noise.

From L4 on, each payload moves out of device memory as soon as it is packed
(torch.classes.actkit.Swapper: the host tier, spilling to a file through the
io_uring engine past host_budget) and is decoded from where it waits when
backward reads it; that read starts bringing back the payloads packed just
before it, which backward reads next.
"""

import math
import warnings

import torch
from torch.utils.weak import WeakIdKeyDictionary

from . import _ops
from .levels import parse_level

_STATE = "_actkit_state"


class _Packed:
    """A payload in memory and what decodes it."""
    __slots__ = ("payload", "shape", "dtype", "bits", "group_size", "sample_bits")

    def __init__(self, payload, shape, dtype, bits, group_size, sample_bits):
        self.payload, self.shape, self.dtype = payload, shape, dtype
        self.bits, self.group_size, self.sample_bits = bits, group_size, sample_bits

    def load(self):
        return _ops.ops.unpack(self.payload, list(self.shape), self.dtype, self.bits, self.group_size,
                               self.sample_bits)


class _Swapped:
    """A payload the swapper holds (torch.classes.actkit.SwappedTensor); its
    space is freed when autograd lets go of this."""
    __slots__ = ("handle",)

    def __init__(self, handle):
        self.handle = handle

    def load(self):
        return self.handle.load()


class _State:
    def __init__(self, level, forward, own_forward):
        self.level = level
        self.swapper = torch.classes.actkit.Swapper(level.spec) if level.swap != "none" else None
        self.forward = forward          # what the module ran before compress()
        self.own_forward = own_forward  # a forward set on the instance itself, restored by decompress()
        self.packed_bytes = 0   # bytes of every payload packed so far
        self.saved_bytes = 0    # bytes the packed tensors held before packing
        self.storages = set()   # storages of the module's parameters and buffers, refreshed per forward
        self.packed = WeakIdKeyDictionary()  # tensor -> (version, packed) of this forward
        # L3: the saved tensors of a forward in order (index k), each one's
        # samples' ||R_n||^2 and values per sample, and the mean squared
        # gradient backward gave it; from these, each tensor's average bits
        # for the next forward.
        self.index = 0
        self.ranges = {}   # k -> ([||R_n||^2 of each sample], values per sample)
        self.grads = {}    # k -> mean squared gradient
        self.budgets = {}  # k -> average bits


def _storage_of(t):
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):  # a tensor without storage (a subclass, a meta tensor)
        return None


def _packable(t, state):
    if not t.is_floating_point() or t.dtype not in (torch.float32, torch.float16, torch.bfloat16):
        return False
    # Rank 0 and 1: per-channel statistics (BatchNorm's mean and inverse
    # deviation), scales, masks' counts: small, and an error in them scales
    # every value of a channel.
    if t.dim() < 2 or t.numel() < state.level.group_size or t.device.type not in ("cpu", "cuda"):
        return False
    if type(t) is not torch.Tensor and not isinstance(t, torch.nn.Parameter):
        return False  # subclasses (DTensor, fake tensors) keep their own semantics
    return _storage_of(t) not in state.storages


@torch.compiler.disable  # host-side choices: a compiled graph calls out to them
def _sample_bits(t, state):
    """L3: bits for each sample of `t` (its first dimension) within the
    tensor's budget, chosen as the C++ controller chooses them
    (torch.ops.actkit.sample_bits: items G/6 ||R_n||^2, the greedy heap).
    Records the samples' ||R_n||^2 and hooks the tensor's gradient, for the
    per-tensor budgets of the next step."""
    k = state.index
    state.index += 1
    bits, range_sq = _ops.ops.sample_bits(t.detach(), float(state.budgets.get(k, state.level.bits)),
                                          state.level.group_size)
    state.ranges[k] = (range_sq, t.numel() // t.shape[0])
    if t.requires_grad:
        def record(g, k=k):
            mean_sq = torch.linalg.vector_norm(g.detach(), dtype=torch.float32).item() ** 2 / g.numel()
            if math.isfinite(mean_sq):  # an overflowed step (fp16, GradScaler) says nothing; the C++ skips it too
                state.grads[k] = mean_sq
        t.register_hook(record)
    return bits


def _rebudget(state):
    """L3, at the start of a forward: each saved tensor's average bits from
    the step before, as the C++ controller's reallocation does it
    (BitBudgets::reallocate): every sample of every tensor is an item of
    sensitivity G/6 ||R_n||^2 times its tensor's mean squared gradient, one
    heap over all of them within the level's average bits, and a tensor's
    budget is the average its samples got. A tensor without a gradient (the
    module's input) counts as the mean of the others."""
    if not state.ranges:
        return
    known = [state.grads[k] for k in state.ranges if k in state.grads]
    fallback = sum(known) / len(known) if known else 1.0
    group = state.level.group_size
    keys = sorted(state.ranges)
    sens, values = [], []
    for k in keys:
        range_sq, per_sample = state.ranges[k]
        g = state.grads.get(k, fallback)
        sens += [group / 6.0 * r * g for r in range_sq]
        values += [per_sample] * len(range_sq)
    got = _ops.ops.allocate_bits(sens, values, float(state.level.bits * sum(values)), 1, 8)
    state.budgets, i = {}, 0
    for k in keys:
        n = len(state.ranges[k][0])
        state.budgets[k] = sum(got[i:i + n]) / n  # the samples of one tensor have equal sizes
        i += n
    state.index = 0
    state.ranges, state.grads = {}, {}


def _hooks(state):
    level = state.level

    def pack(t):
        if not _packable(t, state):
            return t
        # One tensor saved by two ops (a ReLU's output and the next
        # convolution's input) is packed once: keyed by the tensor itself
        # (weakly: the entry goes with it) and its version (an in-place
        # change since is another value).
        hit = state.packed.get(t)
        if hit is not None and hit[0] == t._version:
            return hit[1]
        sample_bits = _sample_bits(t, state) if level.mixed else []
        bits = round(level.bits)  # the codec's width when sample_bits is empty (then bits is whole)
        payload = _ops.ops.pack(t.detach(), bits, level.group_size, _ops.seed(), sample_bits)
        state.packed_bytes += payload.numel()
        state.saved_bytes += t.numel() * t.element_size()
        if state.swapper is not None:
            if torch.compiler.is_compiling():
                raise RuntimeError("actkit: %s swaps payloads through a torch class a compiled graph cannot hold; "
                                   "compile at L0-L3, or run L4/L5 without torch.compile" % level.name)
            packed = _Swapped(state.swapper.stash(payload, list(t.shape), t.dtype, bits, level.group_size,
                                                  sample_bits))
        else:
            packed = _Packed(payload, tuple(t.shape), t.dtype, bits, level.group_size, sample_bits)
        state.packed[t] = (t._version, packed)
        return packed

    def unpack(packed):
        if isinstance(packed, torch.Tensor):
            return packed
        return packed.load()

    return pack, unpack


def _use_defrag_allocator(level):
    """L5: the defragmenting allocator must serve CUDA from the first tensor
    on; without CUDA there is nothing for it to serve."""
    if not torch.cuda.is_available() or not _ops.ops.defrag_supported():
        if torch.cuda.is_available():
            raise RuntimeError("actkit: %s needs the defragmenting CUDA allocator, which this build of actkit lacks "
                               "(rebuild it against a CUDA torch with ACTKIT_CUDA_ALLOCATOR on)" % level.name)
        warnings.warn("actkit: %s runs as L4 on a machine without CUDA: the defragmenting allocator is a CUDA "
                      "allocator, and the CPU keeps torch's" % level.name, stacklevel=3)
        return
    if _ops.ops.defrag_installed():
        return
    try:
        _ops.ops.defrag_install(-1)
    except RuntimeError as e:
        raise RuntimeError(
            "actkit: %s needs the defragmenting CUDA allocator from the first CUDA tensor on: call "
            "actkit.memory.use_defrag_allocator() at the start of the program (%s)" % (
                level.name, str(e).split("\n")[0])) from None


def compress(module, level="L3", **overrides):
    """Compresses the activations autograd saves while `module` runs, from its
    next forward on; returns `module` (the same object). `level`: "L0".."L5"
    as docs/levels.md and actkit.levels describe them; `overrides` are the
    level's switches (bits=3, group_size=128, host_budget="2G",
    swap="file", swap_dir="/scratch", prefetch=2; see
    actkit.levels.OVERRIDES). Nothing else of the training loop changes:
    parameters, state_dict, the optimizer. Raises TypeError for a
    non-Module, ValueError for a bad level or override, RuntimeError if
    `module` is already compressed, or for L5 when CUDA memory was allocated
    before the defragmenting allocator could be installed."""
    if not isinstance(module, torch.nn.Module):
        raise TypeError("actkit.compress: expected a torch.nn.Module, got %s" % type(module).__name__)
    if _STATE in module.__dict__:
        raise RuntimeError("actkit.compress: the module is already compressed (actkit.decompress first)")
    lvl = parse_level(level, **overrides)
    if lvl.defrag:
        _use_defrag_allocator(lvl)
    forward = module.forward
    state = _State(lvl, forward, module.__dict__.get("forward"))
    if lvl.bits == 0:
        module.__dict__[_STATE] = state
        return module
    pack, unpack = _hooks(state)

    def compressed_forward(*args, **kwargs):
        state.storages = {_storage_of(p) for p in module.parameters()} | {_storage_of(b) for b in module.buffers()}
        state.packed = WeakIdKeyDictionary()
        if state.level.mixed:
            _rebudget(state)
        try:
            with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
                return forward(*args, **kwargs)
        finally:
            # What the forward packed is autograd's now: a tensor that
            # outlives the forward (the module's input) must not keep its
            # payload, or its swapped bytes, alive past backward.
            state.packed = WeakIdKeyDictionary()

    module.__dict__[_STATE] = state
    module.forward = compressed_forward
    return module


def decompress(module):
    """Undoes compress(): the module's own forward again. Returns `module`.
    Tensors saved by a forward before this stay packed until their backward."""
    state = module.__dict__.pop(_STATE, None)
    if state is None:
        raise RuntimeError("actkit.decompress: the module is not compressed")
    if state.own_forward is not None:
        module.__dict__["forward"] = state.own_forward
    else:
        module.__dict__.pop("forward", None)
    return module


def stats(module):
    """What compress() packed so far: {"level", "packed_bytes",
    "saved_bytes"}, and from L4 on "swap": the swapper's counters
    (bytes_out, bytes_in, peak_host_bytes, spilled_bytes, file_reads,
    file_prefetched, device_prefetched, ...) and "engine", the spill file's
    I/O engine ("" before the first spill)."""
    state = module.__dict__.get(_STATE)
    if state is None:
        raise RuntimeError("actkit.stats: the module is not compressed")
    out = {"level": state.level.name, "packed_bytes": state.packed_bytes, "saved_bytes": state.saved_bytes}
    if state.swapper is not None:
        out["swap"] = dict(state.swapper.stats())
        out["engine"] = state.swapper.engine()
    return out
