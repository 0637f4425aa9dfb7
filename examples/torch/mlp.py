"""An MLP for Fashion-MNIST (784-256-128-10), written in PyTorch and saved as TorchScript for troupe.

    python3 examples/torch/mlp.py               # writes examples/torch/mlp.pt
    troupe run examples/torch/mlp.toml          # trains it elastically (allreduce, 4 workers)

troupe calls forward(dense) with dense = [batch, 784] float32 (pixels in [0, 1]) and expects logits
[batch, 10]; it applies softmax cross-entropy itself (a module may define loss(logits, labels)).
"""
import os
import sys

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, inputs: int = 784, classes: int = 10):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(inputs, 256), nn.ReLU(),
            nn.Linear(256, 128), nn.ReLU(),
            nn.Linear(128, classes))

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        return self.net(dense)


if __name__ == "__main__":
    torch.manual_seed(int(os.environ.get("SEED", "1")))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "mlp.pt")
    torch.jit.script(MLP()).save(out)
    print(out)
