"""actkit.compress on the models people train: torchvision's CNNs and ViT,
transformers' GPT-2, Llama and BERT (random-initialised, small shapes), two
optimizer steps at every level the Python front runs, and DDP over two CPU
processes (Gloo)."""

import os
import tempfile
import warnings

import pytest
import torch

import actkit

LEVELS = ["L0", "L1", "L2", "L3", "L4", "L5"]


def vision_models():
    tv = pytest.importorskip("torchvision")
    return {
        "resnet50": lambda: tv.models.resnet50(weights=None, num_classes=10),
        "mobilenet_v2": lambda: tv.models.mobilenet_v2(weights=None, num_classes=10),
        "vit": lambda: tv.models.VisionTransformer(image_size=64, patch_size=16, num_layers=2, num_heads=2,
                                                   hidden_dim=32, mlp_dim=64, num_classes=10),
    }


def text_models():
    tr = pytest.importorskip("transformers")
    return {
        "gpt2": lambda: tr.GPT2LMHeadModel(tr.GPT2Config(vocab_size=100, n_positions=32, n_embd=32, n_layer=2,
                                                          n_head=2)),
        "llama": lambda: tr.LlamaForCausalLM(tr.LlamaConfig(vocab_size=100, hidden_size=32, intermediate_size=64,
                                                            num_hidden_layers=2, num_attention_heads=2,
                                                            num_key_value_heads=1, max_position_embeddings=32)),
        "bert": lambda: tr.BertForSequenceClassification(tr.BertConfig(
            vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
            max_position_embeddings=32, num_labels=3)),
    }


def two_steps(make, level, batch):
    torch.manual_seed(0)
    model = make()
    model.train()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # L5 on a CPU says it runs as L4 (test_swap.py checks that)
        actkit.compress(model, level)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    losses = []
    for _ in range(2):
        loss = batch(model)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, actkit.stats(model)


def image_batch(model):
    # 4 images of 64x64: ResNet-50's last BatchNorms still see 16 values a
    # channel (with 2 values, BatchNorm's backward magnifies any rounding of
    # its input past fp32's range: docs/python.md).
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(4, 3, 64, 64, generator=g), torch.randint(0, 10, (4,), generator=g)
    return torch.nn.functional.cross_entropy(model(x), y)


def text_batch(model):
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 100, (2, 16), generator=g)
    if model.config.model_type == "bert":
        return model(input_ids=ids, labels=torch.tensor([0, 2])).loss
    return model(input_ids=ids, labels=ids).loss


def check_every_level(make, batch, loss_tolerance):
    """Two steps at each level: L0 gives plain PyTorch's losses exactly; L1
    to L3 pack what autograd saves and stay near them; L4 and L5 give L3's
    losses exactly, every payload having left memory and come back."""
    plain = two_steps(make, "L0", batch)[0]
    runs = {}
    for level in LEVELS:
        losses, s = two_steps(make, level, batch)
        runs[level] = losses
        assert all(torch.isfinite(torch.tensor(losses)))
        if level == "L0":
            assert losses == plain
        elif level in ("L4", "L5"):
            assert losses == runs["L3"]
            assert s["swap"]["bytes_out"] == s["packed_bytes"] > 0 and s["swap"]["host_bytes"] == 0, s
        else:
            assert s["packed_bytes"] > 0 and s["saved_bytes"] / s["packed_bytes"] > 4, s
            assert abs(losses[1] - plain[1]) < loss_tolerance * abs(plain[1]) + loss_tolerance


@pytest.mark.parametrize("name", ["resnet50", "mobilenet_v2", "vit"])
def test_torchvision_models_train_at_every_level(name):
    check_every_level(vision_models()[name], image_batch, 0.5)


@pytest.mark.parametrize("name", ["gpt2", "llama", "bert"])
def test_transformers_models_train_at_every_level(name):
    check_every_level(text_models()[name], text_batch, 0.25)


def _ddp_rank(rank, world, store_file, out_dir):
    import torch.distributed as dist
    dist.init_process_group("gloo", init_method="file://" + store_file, rank=rank, world_size=world)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))
    actkit.compress(model, "L2")
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    torch.manual_seed(100 + rank)  # each rank its own data and rounding noise
    for _ in range(2):
        x, y = torch.randn(8, 64), torch.randint(0, 10, (8,))
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    torch.save({k: v.detach().clone() for k, v in model.state_dict().items()}, os.path.join(out_dir, "r%d.pt" % rank))
    dist.destroy_process_group()


def test_ddp_over_two_cpu_processes_keeps_the_replicas_equal():
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(_ddp_rank, args=(2, os.path.join(d, "store"), d), nprocs=2, join=True)
        a, b = torch.load(os.path.join(d, "r0.pt")), torch.load(os.path.join(d, "r1.pt"))
        assert a.keys() == b.keys()
        for k in a:
            assert torch.equal(a[k], b[k]), k
