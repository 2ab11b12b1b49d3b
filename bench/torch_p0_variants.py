"""Which training tricks bring LeNet-5 to 90% Fashion-MNIST test accuracy in fewer epochs (issue #10's
P0), tried in PyTorch on the CPU before building one into Echelon: the P0 recipe of
bench/torch_time_to_accuracy.py (SGD, Nesterov 0.9, cosine with a linear warm-up, batch 128,
Echelon's normalisation), evaluated every quarter epoch, with one variant switched on.

    python3 bench/torch_p0_variants.py [--run 5] [--ema D] [--ls S] [--flip] [--tta] [--wd W]
        [--lr 0.05] [--epochs 8] [--seed 0] [--threads 2]

--ema D: evaluate a moving average of the weights (decay D a step); --ls S: label smoothing;
--flip: random horizontal flips in training; --tta: evaluation averages the softmax of the image
and its mirror; --wd W: weight decay; --epochs: the cosine's length; --run: epochs trained.
Prints one line: the flags, the first fractional epoch whose evaluation reached 90% (None if
none did), and every evaluation as epoch:accuracy.
"""
import argparse
import copy
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_time_to_accuracy import MEAN, STD, load_split  # noqa: E402
from torch_train_step import lenet5  # noqa: E402


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--data-dir', default='/usr/share/datasets/fashion-mnist')
    p.add_argument('--ema', type=float, default=0)
    p.add_argument('--ls', type=float, default=0)
    p.add_argument('--flip', action='store_true')
    p.add_argument('--tta', action='store_true')
    p.add_argument('--wd', type=float, default=0)
    p.add_argument('--lr', type=float, default=0.05)
    p.add_argument('--batch-size', type=int, default=128)
    p.add_argument('--epochs', type=float, default=8)
    p.add_argument('--warmup-epochs', type=float, default=0.5)
    p.add_argument('--run', type=int, default=5)
    p.add_argument('--seed', type=int, default=0)
    p.add_argument('--threads', type=int, default=2)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    train_x, train_y = load_split(a.data_dir, 'train', 'cpu')
    test_x, test_y = load_split(a.data_dir, 't10k', 'cpu')
    scale, shift = 1 / (255 * STD), -MEAN / STD
    test_images = test_x.float() * scale + shift
    model = lenet5()
    average = copy.deepcopy(model) if a.ema else None
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=0.9, nesterov=True,
                          weight_decay=a.wd)
    n, b = train_x.shape[0], a.batch_size
    steps = (n + b - 1) // b
    every = steps // 4

    def lr_at(t):
        lr = a.lr * 0.5 * (1 + math.cos(math.pi * min(t, a.epochs) / a.epochs))
        return lr * t / a.warmup_epochs if t < a.warmup_epochs else lr

    def accuracy(net):
        net.eval()
        with torch.no_grad():
            out = net(test_images)
            if a.tta:
                out = out.softmax(1) + net(test_images.flip(3)).softmax(1)
            acc = (out.argmax(1) == test_y).float().mean().item()
        net.train()
        return acc

    generator = torch.Generator().manual_seed(a.seed)
    history, reached = [], None
    for epoch in range(a.run):
        order = torch.randperm(n, generator=generator)
        for step in range(steps):
            index = order[step * b:(step + 1) * b]
            x = train_x[index].float() * scale + shift
            if a.flip:
                flip = torch.rand(x.shape[0], generator=generator) < 0.5
                x[flip] = x[flip].flip(3)
            for group in opt.param_groups:
                group['lr'] = lr_at(epoch + step / steps)
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(model(x), train_y[index], label_smoothing=a.ls).backward()
            opt.step()
            if average is not None:
                with torch.no_grad():
                    for pa, pm in zip(average.parameters(), model.parameters()):
                        pa.mul_(a.ema).add_(pm, alpha=1 - a.ema)
            last = step + 1 == steps
            # Every quarter epoch; a quarter that would end within half a quarter of the epoch's
            # end is left to the end-of-epoch evaluation.
            if last or ((step + 1) % every == 0 and steps - step - 1 >= every // 2):
                t = epoch + (step + 1) / steps
                acc = accuracy(average if average is not None else model)
                history.append(f'{t:.2f}:{100 * acc:.2f}')
                if reached is None and acc >= 0.9:
                    reached = round(t, 2)
    print(' '.join(sys.argv[1:]), '| reached', reached, '|', ' '.join(history), flush=True)


if __name__ == '__main__':
    main()
