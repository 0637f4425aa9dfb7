"""A small CNN for Fashion-MNIST, written in PyTorch and saved as TorchScript for troupe.

    python3 examples/torch/cnn.py               # writes examples/torch/cnn.pt
    troupe run examples/torch/cnn.toml

troupe hands every model its dense features as one row per example ([batch, 784] here); an image
model reshapes them itself.
"""
import os
import sys

import torch
from torch import nn


class CNN(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(32 * 7 * 7, 128), nn.ReLU(), nn.Linear(128, classes))

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(dense.reshape(-1, 1, 28, 28)))


if __name__ == "__main__":
    torch.manual_seed(int(os.environ.get("SEED", "1")))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "cnn.pt")
    torch.jit.script(CNN()).save(out)
    print(out)
