"""The PyTorch peer of bench/exp_train_throughput: one training step (forward, cross-entropy,
backward, SGD with momentum) of the same model on one resident random batch, on the CPU.

    python3 bench/torch_train_step.py MODEL BATCH THREADS STEPS WARMUP [--compile]

MODEL is lenet5 (1x28x28) or resnet20 (1x32x32, option-A shortcuts as Echelon's zoo). Prints one
line: the torch version and the median images/s over STEPS timed steps.
"""
import sys
import time

import torch
from torch import nn
import torch.nn.functional as F


def lenet5():
    return nn.Sequential(
        nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5), nn.ReLU(),
        nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(), nn.Linear(120, 84),
        nn.ReLU(), nn.Linear(84, 10))


class BasicBlock(nn.Module):
    def __init__(self, planes_in, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(planes_in, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.stride, self.pad = stride, (planes - planes_in) // 2

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        shortcut = x
        if self.stride != 1 or self.pad:
            shortcut = F.pad(x[:, :, ::self.stride, ::self.stride],
                             (0, 0, 0, 0, self.pad, self.pad))
        return F.relu(out + shortcut)


def resnet20(in_channels=1):
    layers = [nn.Conv2d(in_channels, 16, 3, 1, 1, bias=False), nn.BatchNorm2d(16), nn.ReLU()]
    planes_in = 16
    for planes, stride in ((16, 1), (32, 2), (64, 2)):
        for b in range(3):
            layers.append(BasicBlock(planes_in, planes, stride if b == 0 else 1))
            planes_in = planes
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 10)]
    return nn.Sequential(*layers)


def main():
    name, batch, threads, steps, warmup = sys.argv[1], *map(int, sys.argv[2:6])
    torch.set_num_threads(threads)
    torch.manual_seed(1)
    model = lenet5() if name == 'lenet5' else resnet20()
    size = 28 if name == 'lenet5' else 32
    x, y = torch.randn(batch, 1, size, size), torch.arange(batch) % 10
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    forward = torch.compile(model) if '--compile' in sys.argv else model

    def step():
        opt.zero_grad()
        loss = F.cross_entropy(forward(x), y)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(max(warmup, 1)):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    times.sort()
    print(torch.__version__.split('+')[0], batch / times[len(times) // 2])


if __name__ == '__main__':
    main()
