"""The PyTorch peer of `echelon bench model --device cuda` (issue #10's P1/P2): one training step
(forward, cross-entropy, backward, SGD with momentum) of the same model on one resident random
batch, on the GPU, timed over STEPS steps with one synchronisation at the end (no per-step sync,
which favours PyTorch: Echelon's numbers beside it sync once per step).

    python3 bench/torch_gpu_step.py MODEL BATCH STEPS [--compile] [--tf32]

MODEL: lenet5 (1x28x28), resnet20, alexnet, vgg16 (3x32x32, as Echelon's zoo). --tf32 lets cuDNN
and cuBLAS use TF32 (fp32 otherwise: PyTorch's cuDNN default would be TF32). Prints one line:
RESULT model=... mode=eager|compiled precision=fp32|tf32 img/s=...
"""
import sys
import time

import torch
from torch import nn

sys.path.insert(0, __file__.rsplit('/', 1)[0])
from torch_train_step import lenet5, resnet20  # noqa: E402


def alexnet():  # layers/models/alexnet.cpp
    return nn.Sequential(
        nn.Conv2d(3, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
        nn.LocalResponseNorm(5, 1e-4, 0.75, 2.0), nn.Conv2d(64, 64, 5, padding=2), nn.ReLU(),
        nn.LocalResponseNorm(5, 1e-4, 0.75, 2.0), nn.MaxPool2d(3, 2, 1), nn.Flatten(),
        nn.Linear(64 * 8 * 8, 384), nn.ReLU(), nn.Linear(384, 192), nn.ReLU(), nn.Linear(192, 10))


def vgg16():  # layers/models/vgg.cpp, configuration D for 32x32
    layers, channels = [], 3
    for width in (64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0):
        if width == 0:
            layers.append(nn.MaxPool2d(2))
            continue
        layers += [nn.Conv2d(channels, width, 3, padding=1), nn.ReLU()]
        channels = width
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(512, 10))


def main():
    name, batch, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    tf32 = '--tf32' in sys.argv
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(1)
    model = {'lenet5': lenet5, 'resnet20': lambda: resnet20(3), 'alexnet': alexnet,
             'vgg16': vgg16}[name]()
    model = model.cuda()
    size, channels = (28, 1) if name == 'lenet5' else (32, 3)
    x = torch.randn(batch, channels, size, size, device='cuda')
    y = torch.arange(batch, device='cuda') % 10
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    forward = torch.compile(model) if '--compile' in sys.argv else model

    def step():
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(forward(x), y)
        loss.backward()
        opt.step()

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    rates = []
    for _ in range(3):  # three blocks; the median block
        start = time.perf_counter()
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
        rates.append(batch * steps / (time.perf_counter() - start))
    print('RESULT model=%s mode=%s precision=%s img/s=%.0f torch=%s' % (
        name, 'compiled' if '--compile' in sys.argv else 'eager', 'tf32' if tf32 else 'fp32',
        sorted(rates)[1], torch.__version__.split('+')[0]))


if __name__ == '__main__':
    main()
