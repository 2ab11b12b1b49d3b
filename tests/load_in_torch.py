#!/usr/bin/env python3
"""Loads an echelon LeNet-5 checkpoint into an equivalent PyTorch model and evaluates it.

    python3 tests/load_in_torch.py RUN_DIR/checkpoint.safetensors \
        [--data-dir /usr/share/datasets/fashion-mnist] [--limit 1000] [--expect-acc 0.8712]

The checkpoint is read with the standard library only (8-byte little-endian header length, JSON
header, raw little-endian data), so neither the `safetensors` package nor numpy is needed. The
model part (names without the "optimizer." / "trainer." prefixes) must load into torch's
nn.Sequential with strict=True: same names, same OIHW shapes. With --expect-acc the test accuracy
computed by PyTorch must match echelon's (`echelon eval`) to within one image.

Exits 0 with "SKIP" when torch is not importable.
"""
import argparse
import gzip
import json
import os
import struct
import sys

DTYPES = {"F32": ("f", 4), "F64": ("d", 8), "I64": ("q", 8), "I32": ("i", 4), "U8": ("B", 1)}


def read_safetensors(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8 : 8 + n])
    data = blob[8 + n :]
    tensors = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        fmt, size = DTYPES[entry["dtype"]]
        begin, end = entry["data_offsets"]
        count = (end - begin) // size
        values = struct.unpack("<%d%s" % (count, fmt), data[begin:end])
        tensors[name] = (entry["dtype"], entry["shape"], values)
    return tensors, header.get("__metadata__", {})


def read_idx(path):
    opener = gzip.open if open(path, "rb").read(2) == b"\x1f\x8b" else open
    with opener(path, "rb") as f:
        raw = f.read()
    (magic,) = struct.unpack(">I", raw[:4])
    dims = struct.unpack(">%dI" % (magic & 0xFF), raw[4 : 4 + 4 * (magic & 0xFF)])
    return dims, raw[4 + 4 * len(dims) :]


def find(data_dir, stem):
    for name in (stem + ".gz", stem):
        if os.path.exists(os.path.join(data_dir, name)):
            return os.path.join(data_dir, name)
    sys.exit("missing %s in %s" % (stem, data_dir))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    parser.add_argument("--limit", type=int, default=1000)
    parser.add_argument("--expect-acc", type=float, default=None)
    args = parser.parse_args()

    try:
        import torch
        from torch import nn
    except ImportError:
        print("SKIP: torch is not installed")
        return 0

    tensors, meta = read_safetensors(args.checkpoint)
    if meta.get("model") != "lenet5":
        sys.exit("this script rebuilds LeNet-5; the checkpoint holds %r" % meta.get("model"))
    torch_dtypes = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64,
                    "I32": torch.int32, "U8": torch.uint8}
    state = {
        name: torch.tensor(values, dtype=torch_dtypes[dtype]).reshape(shape)
        for name, (dtype, shape, values) in tensors.items()
        if not name.startswith(("optimizer.", "trainer."))
    }
    classes = int(meta.get("num_classes", 10))
    # The same layer indices as echelon's make_model("lenet5"): conv(pad 2) relu pool conv relu
    # pool flatten fc relu fc relu fc.
    model = nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(),
        nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, classes))
    model.load_state_dict(state, strict=True)
    model.eval()
    print("loaded %d tensors into torch LeNet-5 (strict)" % len(state))

    (n, h, w), pixels = read_idx(find(args.data_dir, "t10k-images-idx3-ubyte"))
    (_,), labels = read_idx(find(args.data_dir, "t10k-labels-idx1-ubyte"))
    n = min(n, args.limit) if args.limit > 0 else n
    images = torch.tensor(list(pixels[: n * h * w]), dtype=torch.float32).reshape(n, 1, h, w)
    images = (images / 255.0 - 0.2860) / 0.3530  # echelon's Fashion-MNIST normalisation
    target = torch.tensor(list(labels[:n]), dtype=torch.int64)
    with torch.no_grad():
        correct = (model(images).argmax(1) == target).sum().item()
    acc = correct / n
    print("torch test accuracy on %d images: %.4f" % (n, acc))
    if args.expect_acc is not None and abs(acc - args.expect_acc) > 1.0 / n + 1e-9:
        sys.exit("mismatch: echelon reported %.4f" % args.expect_acc)
    return 0


if __name__ == "__main__":
    sys.exit(main())
