#!/usr/bin/env python3
"""Reference outputs of torchvision's CNNs, for tests/models/test_torchvision_oracle.cpp.

For one model, builds torchvision's version with random weights, gives every
batch norm non-trivial statistics and affine parameters (torchvision
initializes them to mean 0, variance 1, weight 1, bias 0, which would hide a
swapped or misnamed tensor) and random biases, and writes to --out:

  <model>.pt      model.state_dict(), exactly as torch.save writes it
                  (a collections.OrderedDict with its _metadata)
  <model>_io.pt   {"input": x, "output": model(x)}: a fixed input of shape
                  (batch, 3, size, size) and the eval-mode output

Everything is seeded, so a run is reproducible. Exits with status 2 when
torchvision cannot be imported (the C++ test then skips).
"""
import argparse
import pathlib
import sys
import time

try:
    import torch
    import torchvision
except ImportError as e:
    print(f"torchvision_reference.py: {e}", file=sys.stderr)
    sys.exit(2)

# The zoo's CNNs (models/src/zoo_cnn.cpp), by their torchvision names.
MODELS = [
    "resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "wide_resnet50_2",
    "vgg11_bn", "vgg16_bn", "densenet121", "mobilenet_v2",
]


def randomize(model, generator):
    def uniform(t, low, high):
        t.copy_(torch.rand(t.shape, generator=generator) * (high - low) + low)

    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
                uniform(module.running_mean, -0.2, 0.2)
                uniform(module.running_var, 0.5, 2.0)
                uniform(module.weight, 0.5, 1.5)
                uniform(module.bias, -0.2, 0.2)
                module.num_batches_tracked.fill_(int(torch.randint(1, 1000, (1,), generator=generator)))
            elif isinstance(module, (torch.nn.Conv2d, torch.nn.Linear)) and module.bias is not None:
                uniform(module.bias, -0.1, 0.1)  # torchvision zeroes most of them


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, choices=MODELS)
    parser.add_argument("--out", required=True, type=pathlib.Path)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    start = time.time()
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    model = getattr(torchvision.models, args.model)(weights=None)
    randomize(model, generator)
    model.eval()
    x = torch.randn(args.batch, 3, args.size, args.size, generator=generator)
    with torch.no_grad():
        y = model(x)

    args.out.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), args.out / f"{args.model}.pt")
    torch.save({"input": x, "output": y}, args.out / f"{args.model}_io.pt")
    print(f"{args.model}: torch {torch.__version__}, torchvision {torchvision.__version__}, "
          f"output {tuple(y.shape)}, max |output| {y.abs().max().item():.4g}, {time.time() - start:.1f} s")


if __name__ == "__main__":
    main()
