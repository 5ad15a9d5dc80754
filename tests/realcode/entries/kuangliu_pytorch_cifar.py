"""kuangliu/pytorch-cifar: CIFAR-10 classifiers (models/*.py), run the way main.py runs them.

main.py trains with SGD (momentum 0.9, weight decay 5e-4) on CrossEntropyLoss and evaluates
under torch.no_grad() in eval mode, reading the prediction with ``outputs.max(1)``. Here each
model is built small (fewer blocks or narrower widths where the file lets the caller choose),
trained for a step on two batches of distinct sizes (32x32 CIFAR images and 40x40 ones, which
every net here still pools down to one position), then evaluated; each file's own ``test()``
runs where it is cheap.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn


def _train_and_eval(net: nn.Module, sizes: tuple[tuple[int, int], ...] = ((2, 32), (3, 40))) -> None:
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1, momentum=0.9, weight_decay=5e-4)
    net.train()
    for batch, side in sizes:
        inputs = torch.randn(batch, 3, side, side)
        targets = torch.randint(0, 10, (batch,))
        optimizer.zero_grad()
        outputs = net(inputs)
        loss = criterion(outputs, targets)
        loss.backward()
        optimizer.step()
        _, _predicted = outputs.max(1)
    net.eval()
    with torch.no_grad():
        inputs = torch.randn(4, 3, 32, 32)
        outputs = net(inputs)
        criterion(outputs, torch.randint(0, 10, (4,)))
        _, _predicted = outputs.max(1)


def _resnet(ns: dict[str, Any]) -> None:
    _train_and_eval(ns["ResNet"](ns["BasicBlock"], [2, 1, 1, 1]))
    _train_and_eval(ns["ResNet"](ns["Bottleneck"], [1, 2, 1, 1], num_classes=10), sizes=((2, 32),))
    ns["test"]()


def _densenet(ns: dict[str, Any]) -> None:
    _train_and_eval(ns["DenseNet"](ns["Bottleneck"], [2, 3, 2, 2], growth_rate=6))
    ns["test"]()


def _dla(ns: dict[str, Any]) -> None:
    _train_and_eval(ns["DLA"]())
    ns["test"]()


def _efficientnet(ns: dict[str, Any]) -> None:
    # B0's layout with fewer blocks; drop_connect (training, has_skip, drop_rate > 0) runs
    cfg = {
        "num_blocks": [1, 2, 1, 2],
        "expansion": [1, 6, 6, 6],
        "out_channels": [16, 24, 40, 40],
        "kernel_size": [3, 3, 5, 3],
        "stride": [1, 2, 2, 1],
        "dropout_rate": 0.2,
        "drop_connect_rate": 0.5,
    }
    net = ns["EfficientNet"](cfg)
    # _make_layers never advances its block counter `b`, so every drop_rate comes out 0:
    # set it on the skip blocks (as the config means) so that drop_connect runs in training
    for block in net.layers:
        if block.has_skip:
            block.drop_rate = 0.2
    _train_and_eval(net)
    ns["test"]()


def _regnet(ns: dict[str, Any]) -> None:
    cfg = {
        "depths": [1, 1, 2, 1],
        "widths": [16, 32, 48, 64],
        "strides": [1, 1, 2, 2],
        "group_width": 8,
        "bottleneck_ratio": 1,
        "se_ratio": 0.25,
    }
    _train_and_eval(ns["RegNet"](cfg))
    ns["test"]()  # RegNetX_200MF
    for factory in ("RegNetX_400MF", "RegNetY_400MF"):
        net = ns[factory]()
        net.eval()
        with torch.no_grad():
            net(torch.randn(2, 3, 32, 32))


def _shufflenetv2(ns: dict[str, Any]) -> None:
    ns["configs"][0.25] = {"out_channels": (24, 48, 96, 128), "num_blocks": (1, 2, 1)}
    _train_and_eval(ns["ShuffleNetV2"](net_size=0.25))
    ns["test"]()


def _dpn(ns: dict[str, Any]) -> None:
    cfg = {
        "in_planes": (32, 32, 64, 64),
        "out_planes": (16, 24, 32, 40),
        "num_blocks": (2, 1, 1, 2),
        "dense_depth": (4, 4, 8, 8),
    }
    _train_and_eval(ns["DPN"](cfg))
    ns["DPN26"]()  # the released configuration, built only (DPN92's test() is too large here)


ENTRIES: dict[str, Callable[[dict[str, Any]], None]] = {
    "cifar_resnet": _resnet,
    "cifar_densenet": _densenet,
    "cifar_dla": _dla,
    "cifar_efficientnet": _efficientnet,
    "cifar_regnet": _regnet,
    "cifar_shufflenetv2": _shufflenetv2,
    "cifar_dpn": _dpn,
}
