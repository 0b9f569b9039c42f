"""A torchvision model trained on Fashion-MNIST with its saved activations at
2 bits: the one line is actkit.compress. Data: Debian's dataset-fashion-mnist
(/usr/share/datasets/fashion-mnist), or --data DIR with the four idx files.

    .venv/bin/python examples/python/train_torchvision.py --level L3 --limit 2000
"""

import argparse
import gzip
import os
import struct
import time

import torch
import torchvision

import actkit


def idx(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        magic, = struct.unpack(">I", f.read(4))
        dims = struct.unpack(">" + "I" * (magic & 0xFF), f.read(4 * (magic & 0xFF)))
        return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).reshape(dims)


def load(data, split, limit):
    def find(stem):
        for name in (stem, stem + ".gz"):
            if os.path.exists(os.path.join(data, name)):
                return os.path.join(data, name)
        raise SystemExit("no %s in %s (install dataset-fashion-mnist, or give --data)" % (stem, data))
    x = idx(find("%s-images-idx3-ubyte" % split))[:limit].float().div(255).unsqueeze(1)
    y = idx(find("%s-labels-idx1-ubyte" % split))[:limit].long()
    return (x - 0.2860) / 0.3530, y


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--level", default="L3")
    ap.add_argument("--limit", type=int, default=2000, help="training images (default 2000)")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = ap.parse_args()
    torch.manual_seed(0)
    x, y = load(args.data, "train", args.limit)
    tx, ty = load(args.data, "t10k", 1000)
    model = torchvision.models.resnet18(weights=None, num_classes=10)
    model.conv1 = torch.nn.Conv2d(1, 64, 3, padding=1, bias=False)  # 28x28 grey images
    model.maxpool = torch.nn.Identity()
    actkit.compress(model, args.level)  # the one line
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    model.train()
    t0 = time.time()
    for i in range(0, len(x), args.batch):
        loss = torch.nn.functional.cross_entropy(model(x[i:i + args.batch]), y[i:i + args.batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        accuracy = (model(tx).argmax(1) == ty).float().mean().item()
    s = actkit.stats(model)
    print("level %s: test accuracy %.1f%% after %d images in %.0f s; "
          "activations saved over the run %.1f MiB, packed into %.1f MiB"
          % (args.level, 100 * accuracy, len(x), time.time() - t0, s["saved_bytes"] / 2 ** 20,
             s["packed_bytes"] / 2 ** 20))


if __name__ == "__main__":
    main()
