"""actkit.compress on real modules: properties that fail on a wrong
implementation (bit-identical L0, unbiased L1-L3 gradients with the spread
the quantizer gives, packed bytes as the codec's format says)."""

import copy
import math

import pytest
import torch

import actkit


def mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Linear(128, 32))


def grads(model, x, level=None, seed=1, **overrides):
    m = copy.deepcopy(model)
    if level is not None:
        actkit.compress(m, level, **overrides)
    torch.manual_seed(seed)
    out = m(x)
    (out * torch.linspace(-1, 1, out.shape[-1])).sum().backward()
    return torch.cat([p.grad.flatten() for p in m.parameters()]), m


def test_l0_gradients_are_bit_identical():
    model, x = mlp(), torch.randn(16, 64)
    plain, _ = grads(model, x)
    l0, m = grads(model, x, "L0")
    assert torch.equal(plain, l0)
    assert actkit.stats(m)["packed_bytes"] == 0


@pytest.mark.parametrize("level,bits", [("L1", 4), ("L2", 2), ("L3", 2)])
def test_gradients_are_unbiased_with_the_quantizers_spread(level, bits):
    overrides = {"bits": bits} if level == "L2" else {}  # L2 at 2 bits, as L3's average
    # Every saved tensor here enters the gradient linearly (a linear layer's
    # input), so stochastic rounding leaves the gradient unbiased: the mean
    # over K seeds approaches L0's as 1/sqrt(K).
    model, x = mlp(), torch.randn(16, 64)
    exact, _ = grads(model, x)
    samples = torch.stack([grads(model, x, level, seed, **overrides)[0] for seed in range(64)])
    err = samples - exact
    sd = err.std(0)
    assert sd.max() > 0, "the gradients carry no rounding noise: nothing was packed"
    # The mean's error against its standard error: |z| beyond 5 almost never by chance.
    z = err.mean(0) / (sd / math.sqrt(samples.shape[0]) + 1e-12)
    assert (z.abs() > 5).float().mean() < 0.005, "the gradient is biased"
    # Fewer bits, more spread: 2-bit noise about 5x the 4-bit's (a step of
    # range/3 against range/15).
    spread = err.pow(2).mean().sqrt() / exact.pow(2).mean().sqrt()
    assert (0.002 if bits == 4 else 0.01) < spread < (0.2 if bits == 4 else 1.0)


def test_packed_bytes_follow_the_format():
    model, x = mlp(), torch.randn(16, 64)
    _, m = grads(model, x, "L2")
    s = actkit.stats(m)
    # Saved: the input (16x64) and the hidden activations (16x128), fp32.
    assert s["saved_bytes"] == (16 * 64 + 16 * 128) * 4
    expected = actkit.ops.packed_bytes([16, 64], 4, 256, []) + actkit.ops.packed_bytes([16, 128], 4, 256, [])
    assert s["packed_bytes"] == expected  # L2: 4 bits a value
    assert s["saved_bytes"] / s["packed_bytes"] > 6


def test_pack_and_unpack_round_trip_within_a_step():
    torch.manual_seed(3)
    x = torch.randn(4, 512)
    payload = actkit.ops.pack(x, 8, 256, torch.tensor([7]), [])
    y = actkit.ops.unpack(payload, [4, 512], torch.float32, 8, 256, [])
    groups = x.view(-1, 256)
    step = (groups.max(1).values - groups.min(1).values) / 255
    assert ((y - x).view(-1, 256).abs() <= step[:, None] * 1.01 + 1e-6).all()
    # The same seed gives the same bytes; another seed other bytes.
    assert torch.equal(payload, actkit.ops.pack(x, 8, 256, torch.tensor([7]), []))
    assert not torch.equal(payload, actkit.ops.pack(x, 8, 256, torch.tensor([8]), []))


def test_a_run_is_reproducible_under_manual_seed():
    model, x = mlp(), torch.randn(16, 64)
    a, _ = grads(model, x, "L2", seed=5)
    b, _ = grads(model, x, "L2", seed=5)
    c, _ = grads(model, x, "L2", seed=6)
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_parameters_state_dict_and_decompress():
    model = mlp()
    before = copy.deepcopy(model.state_dict())
    m = actkit.compress(model, "L1")
    assert m is model
    assert model.state_dict().keys() == before.keys()
    with pytest.raises(RuntimeError):
        actkit.compress(model, "L2")
    actkit.decompress(model)
    x = torch.randn(2, 64)
    assert torch.equal(model(x), mlp()(x))
    with pytest.raises(RuntimeError):
        actkit.decompress(model)


def test_bad_input_is_a_clear_error():
    with pytest.raises(TypeError):
        actkit.compress("not a module")
    with pytest.raises(ValueError):
        actkit.compress(mlp(), "L9")
    with pytest.raises(ValueError):
        actkit.compress(mlp(), "L2", bits=9)
    with pytest.raises(ValueError):
        actkit.compress(mlp(), "L2", group_size=12)
    with pytest.raises(ValueError, match="override"):
        actkit.compress(mlp(), "L2", conv=False)  # the C++ layers' switch, not this front's
    with pytest.raises(ValueError, match="prefetch"):
        actkit.compress(mlp(), "L4", prefetch=65)
    with pytest.raises(ValueError, match="host_budget"):
        actkit.compress(mlp(), "L4", host_budget="lots")
    with pytest.raises(RuntimeError, match="actkit"):
        actkit.ops.pack(torch.randn(4, 256), 9, 256, torch.tensor([0]), [])


def test_bf16_autocast_and_a_convolutional_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                torch.nn.Flatten(), torch.nn.Linear(8 * 16 * 16, 10))
    actkit.compress(model, "L2")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(4, 3, 16, 16), torch.randint(0, 10, (4,))
    for _ in range(2):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert all(torch.isfinite(p).all() for p in model.parameters())
    assert actkit.stats(model)["packed_bytes"] > 0


def test_memory_tracking_counts_what_a_block_allocates():
    with actkit.memory.track() as t:
        a = torch.empty(1 << 20, dtype=torch.uint8)
        b = torch.empty(1 << 19, dtype=torch.uint8)
        del b
    assert t.peak_bytes >= (1 << 20) + (1 << 19)
    assert (1 << 20) <= t.end_bytes < (1 << 20) + (1 << 19)
    del a
    with pytest.raises(RuntimeError):
        with actkit.memory.track():
            with actkit.memory.track():
                pass


def test_l2_holds_less_activation_memory_than_plain():
    model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(512, 512), torch.nn.GELU()) for _ in range(4)])
    x = torch.randn(64, 512)

    def held(m):
        with actkit.memory.track() as t:
            loss = m(x).sum()
        held_bytes = t.end_bytes
        loss.backward()
        return held_bytes

    plain = held(model)
    actkit.compress(model, "L2")
    packed = held(model)
    assert packed * 5 < plain, (plain, packed)


def splitmix_activations(rows, cols, seed):
    """tests/core/test_payload_digests.cpp's activations(): the same float32 values."""
    mask = (1 << 64) - 1
    state = seed

    def nxt():
        nonlocal state
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        return z ^ (z >> 31)

    def uniform():
        return torch.tensor(float(nxt() >> 40), dtype=torch.float32) * torch.tensor(1.0 / 16777216.0,
                                                                                   dtype=torch.float32)

    x = torch.empty(rows, cols, dtype=torch.float32)
    for c in range(cols):
        scale = torch.tensor(20.0 if uniform().item() < 0.03 else 1.0, dtype=torch.float32)
        for i in range(rows):
            s = uniform()
            s = s + uniform()
            s = s + uniform()
            v = (s - torch.tensor(1.5, dtype=torch.float32)) * scale
            if uniform().item() < 0.01:
                v = torch.tensor(0.0)
            x[i, c] = v
    return x


def test_the_python_path_writes_the_cpp_paths_bytes():
    # FNV-1a of the payloads; PayloadDigests.ThePythonFrontsPayloadsArePinned
    # checks the same constant through the C++ API.
    x = splitmix_activations(24, 300, 7)
    h = 1469598103934665603
    for bits in (2, 4):
        payload = actkit.ops.pack(x, bits, 64, torch.tensor([1000 + bits]), [])
        for byte in payload.tolist():
            h = ((h ^ byte) * 1099511628211) & ((1 << 64) - 1)
    assert "%016x" % h == "b7f7ebdc41aa2fef"


def test_a_compiled_module_packs_with_fresh_noise_each_step():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.GELU(), torch.nn.Linear(256, 10))
    x = torch.randn(32, 64)
    exact, _ = grads(model, x)
    actkit.compress(model, "L2")
    compiled = torch.compile(model)
    seen = []
    for _ in range(2):
        model.zero_grad()
        compiled(x).mul(torch.linspace(-1, 1, 10)).sum().backward()
        seen.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert actkit.stats(model)["packed_bytes"] > 0
    assert not torch.equal(seen[0], seen[1]), "the same rounding noise in two steps"
    for g in seen:
        assert (g - exact).norm() < 0.5 * exact.norm()


def test_the_gradient_variance_is_the_quantizers():
    # Stochastic rounding to a grid of step d rounds a value at fraction p of
    # its step up with probability p: variance d^2 p (1 - p). The second
    # layer's weight gradient is c (x) sum_n h_n, with h the packed hidden
    # activations (one group per sample here: 128 values, 2 bits, 3 steps
    # across the sample's range), so its variance is c_j^2 sum_n var(h_ni).
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.Linear(128, 32))
    x = torch.randn(16, 64)
    c = torch.linspace(-1, 1, 32)
    h = model[0](x).detach()
    lo, hi = h.min(1, keepdim=True).values, h.max(1, keepdim=True).values
    d = (hi - lo) / 3
    p = ((h - lo) / d).frac()
    expected = (c[:, None] ** 2) * (d ** 2 * p * (1 - p)).sum(0)[None, :]
    samples = []
    for seed in range(200):
        m = copy.deepcopy(model)
        actkit.compress(m, "L2", bits=2)
        torch.manual_seed(seed)
        (m(x) * c).sum().backward()
        samples.append(m[1].weight.grad.clone())
    measured = torch.stack(samples).var(0)
    ratio = (measured.sum() / expected.sum()).item()
    # 200 samples: the summed variance is within a few percent; the bf16
    # group metadata moves the grid slightly.
    assert 0.85 < ratio < 1.15, ratio


def test_l3_spends_the_same_bytes_where_the_variance_is():
    # Samples of very different ranges: L3's per-sample bits (the C++ heap)
    # give a much smaller gradient variance than uniform 2 bits, for
    # about the same bytes; and still no bias.
    model = mlp()
    x = torch.randn(16, 64)
    x[:4] *= 30
    exact, _ = grads(model, x)

    def spread(level, **overrides):
        runs = [grads(model, x, level, seed, **overrides) for seed in range(48)]
        g = torch.stack([r[0] for r in runs])
        return (g - exact).pow(2).sum(1).mean().item(), actkit.stats(runs[0][1])["packed_bytes"], g.mean(0)

    v2, bytes2, _ = spread("L2", bits=2)
    v3, bytes3, mean3 = spread("L3")
    assert bytes3 <= 1.05 * bytes2, (bytes3, bytes2)
    assert v3 < 0.5 * v2, (v3, v2)
    assert (mean3 - exact).norm() < 0.25 * (v3 ** 0.5)


def test_an_overflowed_step_does_not_stop_l3():
    # fp16 with a GradScaler overflows now and then: a step whose gradients
    # are inf is skipped by the scaler, and L3's budgets ignore it (as the
    # C++ controller does) instead of failing the next forward.
    model = actkit.compress(mlp(), "L3")
    x = torch.randn(16, 64)
    (model(x) * float("inf")).sum().backward()
    model.zero_grad()
    model(x).sum().backward()  # re-budgets from the step before: finite statistics only
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())
