"""A DeepFM-style CTR model, written in PyTorch and saved as TorchScript for troupe.

    python3 examples/torch/deepfm.py            # writes examples/torch/deepfm.pt
    troupe run examples/torch/deepfm.toml       # async_ps: embedding rows live on the PS shards

For data with sparse fields troupe calls forward(dense, emb): dense = [batch, dense_dim], and emb =
[batch, fields, embedding_dim], the rows troupe looked up for the batch's ids in its own embedding
tables (on the PS shards under async_ps). The module returns one logit per example ([batch, 1]);
troupe applies the logistic loss and pushes emb's gradient back to the shards as sparse rows.
Arguments: FIELDS DENSE_DIM EMBEDDING_DIM [OUT].
"""
import os
import sys

import torch
from torch import nn


class DeepFM(nn.Module):
    def __init__(self, fields: int, dense_dim: int, dim: int, hidden: int = 64):
        super().__init__()
        self.linear = nn.Linear(dense_dim, 1)
        self.first_order = nn.Linear(dim, 1, bias=False)
        self.deep = nn.Sequential(
            nn.Linear(fields * dim + dense_dim, hidden), nn.ReLU(),
            nn.Linear(hidden, hidden // 2), nn.ReLU(),
            nn.Linear(hidden // 2, 1))

    def forward(self, dense: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        # FM second order: 0.5 * ((sum of field vectors)^2 - sum of squares), summed over dims.
        s = emb.sum(dim=1)
        fm = 0.5 * (s * s - (emb * emb).sum(dim=1)).sum(dim=1, keepdim=True)
        first = self.first_order(emb).sum(dim=1) + self.linear(dense)
        deep = self.deep(torch.cat([emb.flatten(1), dense], dim=1))
        return first + fm + deep


if __name__ == "__main__":
    fields = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    dense_dim = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    dim = int(sys.argv[3]) if len(sys.argv) > 3 else 8
    out = sys.argv[4] if len(sys.argv) > 4 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "deepfm.pt")
    torch.manual_seed(int(os.environ.get("SEED", "1")))
    torch.jit.script(DeepFM(fields, dense_dim, dim)).save(out)
    print(out)
