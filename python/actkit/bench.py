"""python -m actkit.bench peers: ACTkit's levels beside what PyTorch users do
today, in one run, on one machine: plain PyTorch, torch.utils.checkpoint per
block, torch.autograd.graph.save_on_cpu, torch.compile with an activation
memory budget (where it runs), and actkit.compress at L2, L3 and L4 (L5 too
on a GPU).

For each: the activation bytes (held between forward and backward, less the
loss), the peak bytes of a step (forward, backward; the weights and their
gradients' first allocation excluded), the median step time (forward,
backward, SGD), and the largest batch under a memory budget (extrapolated
from the peaks at two batch sizes: memory grows linearly with the batch).
Memory is LibTorch's CPU allocations as ACTkit's tracking allocator counts
them (actkit.memory.track), or torch.cuda's allocator statistics on a GPU.
L4 moves the payloads out of that memory into ACTkit's host tier; its peak
there is reported beside it ("host").
"""

import argparse
import contextlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

import torch

import actkit


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


# -- the models ---------------------------------------------------------------

def resnet50(batch, device):
    import torchvision
    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).to(device)
    x = torch.randn(batch, 3, 224, 224, device=device)
    y = torch.randint(0, 1000, (batch,), device=device)
    blocks = [b for layer in (model.layer1, model.layer2, model.layer3, model.layer4) for b in layer]
    return model, blocks, lambda m: torch.nn.functional.cross_entropy(m(x), y)


def gpt2_small(batch, device, seq=256):
    import transformers
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_positions=1024, n_embd=768, n_layer=12, n_head=12)
    model = transformers.GPT2LMHeadModel(config).to(device)
    ids = torch.randint(0, config.vocab_size, (batch, seq), device=device)
    return model, list(model.transformer.h), lambda m: m(input_ids=ids, labels=ids).loss


MODELS = {"resnet50": (resnet50, 8), "gpt2": (gpt2_small, 4)}


# -- the methods --------------------------------------------------------------

def checkpointed(blocks):
    """Each block's forward recomputed in backward (torch.utils.checkpoint)."""
    import torch.utils.checkpoint as cp
    for b in blocks:
        forward = b.forward

        def run(*args, _f=forward, **kwargs):
            return cp.checkpoint(_f, *args, use_reentrant=False, **kwargs)
        b.forward = run


def prepare(method, model, blocks):
    """The model set up for `method`, and a context each step runs in."""
    if method == "checkpoint":
        checkpointed(blocks)
    elif method == "save_on_cpu":
        return model, lambda: torch.autograd.graph.save_on_cpu(pin_memory=torch.cuda.is_available())
    elif method == "compile-budget":
        import torch._functorch.config as fconfig
        fconfig.activation_memory_budget = 0.5
        return torch.compile(model), contextlib.nullcontext
    elif method.startswith("actkit-"):
        actkit.compress(model, method.split("-", 1)[1])
    return model, contextlib.nullcontext


class Meter:
    """Bytes the step allocates: `held()` now, `peak` at the end (CUDA:
    torch.cuda's statistics; CPU: ACTkit's tracking allocator)."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"

    def __enter__(self):
        if self.cuda:
            torch.cuda.synchronize()
            self.start = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        else:
            actkit.ops.memory_track(True)
            self.start = actkit.ops.memory_bytes()[0]
        return self

    def held(self):
        if self.cuda:
            torch.cuda.synchronize()
            return torch.cuda.memory_allocated() - self.start
        return actkit.ops.memory_bytes()[0] - self.start

    def __exit__(self, *exc):
        if self.cuda:
            torch.cuda.synchronize()
            self.peak = torch.cuda.max_memory_allocated() - self.start
        else:
            self.peak = actkit.ops.memory_bytes()[1] - self.start
            actkit.ops.memory_track(False)
        return False


def run_method(model_name, method, batch, device, steps):
    make, _ = MODELS[model_name]
    model, blocks, loss_of = make(batch, device)
    model.train()
    model, context = prepare(method, model, blocks)
    opt = torch.optim.SGD(model.parameters(), lr=1e-4)
    # One step first: the gradients' buffers, compilation, caches.
    with context():
        loss = loss_of(model)
    loss.backward()
    opt.step()
    times, peaks, acts = [], [], []
    for _ in range(steps):
        opt.zero_grad(set_to_none=False)
        t0 = time.perf_counter()
        with Meter(device) as m:
            with context():
                loss = loss_of(model)
            acts.append(m.held())
            loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
        peaks.append(m.peak)
    r = {"step_s": statistics.median(times), "peak_bytes": max(peaks), "activation_bytes": max(acts)}
    if method.startswith("actkit-"):
        swap = actkit.stats(model).get("swap")
        if swap:
            r["host_bytes"] = swap["peak_host_bytes"]
    return r


def peers(args):
    device = torch.device(args.device)
    methods = ["plain", "checkpoint", "save_on_cpu", "compile-budget", "actkit-L2", "actkit-L3", "actkit-L4"]
    if device.type == "cuda":
        methods.append("actkit-L5")
    if args.methods:
        methods = args.methods.split(",")
    machine = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_name()
    results = {"machine": machine, "device": device.type, "torch": torch.__version__,
               "threads": torch.get_num_threads(), "budget_bytes": args.budget, "models": {}}
    for name in args.models.split(","):
        batch = args.batch or MODELS[name][1]
        rows = {}
        for method in methods:
            if method == "actkit-L5" and device.type == "cuda" and not args.defrag:
                rows[method] = run_under_defrag(args, name, batch)
                print(json.dumps({"model": name, "batch": batch, "method": method, **rows[method]}), flush=True)
                continue
            try:
                r = run_method(name, method, batch, device, args.steps)
                small = run_method(name, method, max(1, batch // 2), device, 1)
                per_example = (r["peak_bytes"] - small["peak_bytes"]) / (batch - max(1, batch // 2))
                fixed = r["peak_bytes"] - per_example * batch
                r["max_batch"] = int((args.budget - fixed) / per_example) if per_example > 0 else None
            except Exception as e:  # a peer that does not run here says why, the others go on
                r = {"error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "")}
            rows[method] = r
            print(json.dumps({"model": name, "batch": batch, "method": method, **r}), flush=True)
        results["models"][name] = {"batch": batch, "methods": rows}
    print_table(results)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


def run_under_defrag(args, model, batch):
    """L5 in a process of its own: the defragmenting allocator serves CUDA
    from that process's first tensor, and the other methods keep torch's."""
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "l5.json")
        cmd = [sys.executable, "-m", "actkit.bench", "peers", "--defrag", "--models", model, "--methods", "actkit-L5",
               "--batch", str(batch), "--steps", str(args.steps), "--budget", str(args.budget), "--device",
               args.device, "--json", out]
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode != 0:
            return {"error": "the L5 process failed: " + (done.stderr.strip().splitlines() or ["?"])[-1][:200]}
        with open(out) as f:
            return json.load(f)["models"][model]["methods"]["actkit-L5"]


def print_table(results):
    print("\n%s, torch %s, %d threads; budget %.1f GiB" % (results["machine"], results["torch"], results["threads"],
                                                         results["budget_bytes"] / 2 ** 30))
    if results["device"] == "cpu":
        print("(on a CPU, 'vs plain' counts L4's host bytes as activations: they are the same memory)")
    for name, m in results["models"].items():
        plain = m["methods"].get("plain", {})
        print("\n%s, batch %d" % (name, m["batch"]))
        print("%-15s %14s %8s %12s %10s %8s %10s %12s" % ("method", "activations", "vs plain", "peak", "step (s)",
                                                        "vs plain", "max batch", "host"))
        for method, r in m["methods"].items():
            if "error" in r:
                print("%-15s did not run: %s" % (method, r["error"]))
                continue
            # L4's payloads wait in the host tier: on a CPU that is the same
            # memory, so they count as activations there.
            held = r["activation_bytes"] + (r.get("host_bytes", 0) if results["device"] == "cpu" else 0)
            act_ratio = plain.get("activation_bytes", 0) / max(held, 1)
            time_ratio = r["step_s"] / plain["step_s"] if plain.get("step_s") else 0
            host = "%.1f MiB" % (r["host_bytes"] / 2 ** 20) if "host_bytes" in r else ""
            print("%-15s %11.1f MiB %7.1fx %8.1f MiB %10.2f %7.2fx %10s %12s" % (
                method, r["activation_bytes"] / 2 ** 20, act_ratio, r["peak_bytes"] / 2 ** 20, r["step_s"], time_ratio,
                r.get("max_batch"), host))


def main():
    ap = argparse.ArgumentParser(prog="python -m actkit.bench", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("peers", help="ACTkit's levels beside checkpointing, save_on_cpu and torch.compile")
    p.add_argument("--models", default="resnet50,gpt2", help="resnet50, gpt2 (comma-separated)")
    p.add_argument("--methods", default="", help="a comma-separated subset of the methods")
    p.add_argument("--batch", type=int, default=0, help="batch size (default: 8 for resnet50, 4 for gpt2)")
    p.add_argument("--steps", type=int, default=3, help="timed steps per method (default 3)")
    p.add_argument("--budget", type=float, default=4 * 2 ** 30, help="memory budget in bytes for the largest batch")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--json", help="also write the results here")
    p.add_argument("--defrag", action="store_true",
                   help="run under the defragmenting CUDA allocator (how actkit-L5 runs, in a process of its own)")
    args = ap.parse_args()
    if args.batch < 0 or args.steps < 1 or args.budget <= 0:
        ap.error("--batch >= 0, --steps >= 1 and --budget > 0")
    if args.defrag:
        actkit.memory.use_defrag_allocator()
    peers(args)


if __name__ == "__main__":
    main()
