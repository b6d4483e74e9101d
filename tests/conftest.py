import numpy as np
import pytest
import torch

torch.manual_seed(0)


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def mlp(sizes, bias=True, relu=True):
    """An MLP with ``len(sizes) - 1`` Linear layers, ReLU between them (not after the last)."""
    layers = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(torch.nn.Linear(a, b, bias=bias))
        if relu and i < len(sizes) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).eval()
