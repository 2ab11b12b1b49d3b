"""The PyTorch peer of `echelon train --resident-data --target-accuracy` (issue #10's P0): LeNet-5
on Fashion-MNIST, the whole set resident on the device, the same recipe (SGD with momentum,
optional Nesterov, cosine LR with a linear warm-up per step, batch order reshuffled each epoch,
Echelon's normalisation; with --ema D a moving average of the weights, updated after every step
as `echelon train --ema D` does and evaluated in their place), evaluated after every epoch,
stopped at the first epoch whose test accuracy reaches the target.

    python3 bench/torch_time_to_accuracy.py [--data-dir DIR] [--device cuda|cpu] [--batch-size 128]
        [--lr 0.05] [--momentum 0.9] [--nesterov] [--epochs 8] [--warmup-epochs 0.5] [--ema D]
        [--target 0.9] [--compile] [--threads N]

The clock starts right after `import torch`, before any device call or file read, as Echelon's
starts before its data loading: CUDA start-up, loading, every epoch and every evaluation count.
Prints one line per epoch and a last line `RESULT torch=VERSION mode=eager|compiled reached=0|1
epoch=E seconds=S best=ACC` (S: the wall seconds at the end of the evaluation that reached the
target, 0 when none did).
"""
import argparse
import gzip
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

START = time.perf_counter()
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_train_step import lenet5  # noqa: E402  (the same model as the step benchmark)

MEAN, STD = 0.2860, 0.3530  # data/registry.cpp's Fashion-MNIST normalisation


def read_idx(path):
    opener = gzip.open if path.endswith('.gz') else open
    with opener(path, 'rb') as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], 'big') for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load_split(data_dir, split, device):
    def path(kind):
        base = os.path.join(data_dir, f'{split}-{kind}')
        return base if os.path.exists(base) else base + '.gz'
    images = torch.from_numpy(read_idx(path('images-idx3-ubyte')).copy()).to(device)
    labels = torch.from_numpy(read_idx(path('labels-idx1-ubyte')).astype(np.int64)).to(device)
    return images.unsqueeze(1), labels  # (N, 1, 28, 28) uint8, (N) int64


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--data-dir', default='/usr/share/datasets/fashion-mnist')
    p.add_argument('--device', default='cuda' if torch.cuda.is_available() else 'cpu')
    p.add_argument('--batch-size', type=int, default=128)
    p.add_argument('--lr', type=float, default=0.05)
    p.add_argument('--momentum', type=float, default=0.9)
    p.add_argument('--nesterov', action='store_true')
    p.add_argument('--epochs', type=int, default=8)
    p.add_argument('--warmup-epochs', type=float, default=0.5)
    p.add_argument('--ema', type=float, default=0.0)
    p.add_argument('--target', type=float, default=0.9)
    p.add_argument('--compile', action='store_true')
    p.add_argument('--threads', type=int, default=0)
    p.add_argument('--seed', type=int, default=0)
    a = p.parse_args()
    if a.threads > 0:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    device = torch.device(a.device)
    train_x, train_y = load_split(a.data_dir, 'train', device)
    test_x, test_y = load_split(a.data_dir, 't10k', device)
    scale, shift = 1.0 / (255.0 * STD), -MEAN / STD

    model = lenet5().to(device)
    forward = torch.compile(model) if a.compile else model
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum, nesterov=a.nesterov)
    params = list(model.parameters())
    # The average starts at the initial weights; two fused multi-tensor ops per step.
    averages = [p.detach().clone() for p in params] if a.ema > 0 else []
    n, b = train_x.shape[0], a.batch_size
    steps = (n + b - 1) // b
    generator = torch.Generator(device=device).manual_seed(a.seed)

    def lr_at(epoch, step):  # layers/lr_schedule.cpp: cosine to 0 over --epochs, linear warm-up
        t = epoch + step / steps
        lr = a.lr * 0.5 * (1.0 + math.cos(math.pi * min(t, a.epochs) / a.epochs))
        return lr * t / a.warmup_epochs if t < a.warmup_epochs else lr

    best, reached, epoch_reached, seconds_reached = 0.0, False, 0, 0.0
    for epoch in range(a.epochs):
        model.train()
        order = torch.randperm(n, device=device, generator=generator)
        for step in range(steps):
            index = order[step * b:(step + 1) * b]
            x = train_x[index].float() * scale + shift
            for group in opt.param_groups:
                group['lr'] = lr_at(epoch, step)
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(forward(x), train_y[index]).backward()
            opt.step()
            if averages:
                with torch.no_grad():
                    torch._foreach_mul_(averages, a.ema)
                    torch._foreach_add_(averages, params, alpha=1.0 - a.ema)
        model.eval()
        correct = torch.zeros((), dtype=torch.int64, device=device)
        with torch.no_grad():
            live = [p.clone() for p in params] if averages else []
            for p, average in zip(params, averages):
                p.copy_(average)
            for start in range(0, test_x.shape[0], max(b, 256)):
                x = test_x[start:start + max(b, 256)].float() * scale + shift
                correct += (forward(x).argmax(1) == test_y[start:start + max(b, 256)]).sum()
            for p, saved in zip(params, live):
                p.copy_(saved)
        accuracy = correct.item() / test_x.shape[0]
        best = max(best, accuracy)
        seconds = time.perf_counter() - START
        print(f'epoch {epoch + 1}: test accuracy {100 * accuracy:.2f}%  {seconds:.3f} s', flush=True)
        if accuracy >= a.target:
            reached, epoch_reached, seconds_reached = True, epoch + 1, seconds
            break
    print(f"RESULT torch={torch.__version__.split('+')[0]} "
          f"mode={'compiled' if a.compile else 'eager'} reached={int(reached)} "
          f"epoch={epoch_reached} seconds={seconds_reached:.3f} best={best:.4f}")


if __name__ == '__main__':
    main()
