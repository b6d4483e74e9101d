"""Small example models for `tg-export` (`tg-export examples/models.py:mlp --input 1x256`)."""

import torch


def mlp() -> torch.nn.Module:
    """MLP 256 -> 1024 -> 1024 -> 256 with ReLU."""
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(256, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 256),
    ).eval()


class Scaled(torch.nn.Module):
    """x @ W^T * 0.5 + b, then ReLU: exercises transpose and scalar absorption."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(16, 8))
        self.b = torch.nn.Parameter(torch.randn(16))

    def forward(self, x):
        return torch.relu(x @ self.w.t() * 0.5 + self.b)
