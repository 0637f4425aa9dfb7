#!/usr/bin/env python3
"""torch_peer.py MODEL THREADS STEPS: eager PyTorch 1.13 loop of troupe's built-in models
(same layers, batch, Adam), random in-memory data gathered by a shuffled index per batch (as troupe's
batch gather). Prints per-step wall ms and process CPU ms per step (median of 5 blocks)."""
import sys, time, json, os
import torch
from torch import nn
model, threads, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
torch.set_num_threads(threads); torch.manual_seed(1); torch.set_flush_denormal(True)
class DeepFM(nn.Module):
    def __init__(s, fields=8, vocab=800, k=8):
        super().__init__()
        s.lin = nn.Embedding(vocab, 1); s.emb = nn.Embedding(vocab, k); s.bias = nn.Parameter(torch.zeros(1))
        s.deep = nn.Sequential(nn.Linear(fields*k, 64), nn.ReLU(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 1))
    def forward(s, ids):
        e = s.emb(ids)                                   # [B, F, k]
        fm = 0.5 * ((e.sum(1) ** 2) - (e * e).sum(1)).sum(1, keepdim=True)
        return s.lin(ids).sum(1) + s.bias + fm + s.deep(e.flatten(1))
if model == 'mlp':
    B = 64; N = 60000
    m = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    X = torch.rand(N, 784); Y = torch.randint(0, 10, (N,)); lossf = nn.functional.cross_entropy; lr = 1e-3
elif model == 'cnn':
    B = 64; N = 6400
    m = nn.Sequential(nn.Conv2d(1, 32, 3), nn.ReLU(), nn.Conv2d(32, 64, 3), nn.ReLU(), nn.BatchNorm2d(64),
                      nn.MaxPool2d(2), nn.Dropout(0.25), nn.Flatten(), nn.Linear(64*12*12, 10))
    X = torch.rand(N, 1, 28, 28); Y = torch.randint(0, 10, (N,)); lossf = nn.functional.cross_entropy; lr = 1e-3
elif model == 'deepfm':
    B = 256; N = 200000
    m = DeepFM(); X = torch.randint(0, 800, (N, 8)); Y = torch.randint(0, 2, (N, 1)).float()
    lossf = nn.functional.binary_cross_entropy_with_logits; lr = 5e-3
opt = torch.optim.Adam(m.parameters(), lr=lr, eps=1e-7)
def step(i):
    idx = perm[(i * B) % (N - B):(i * B) % (N - B) + B]
    loss = lossf(m(X[idx]), Y[idx]); opt.zero_grad(); loss.backward(); opt.step()
perm = torch.randperm(N)
for i in range(max(5, steps // 10)): step(i)   # warm-up
blocks = []
for b in range(5):
    w0, c0 = time.perf_counter(), time.process_time()
    for i in range(steps // 5): step(i)
    blocks.append(((time.perf_counter() - w0) * 1e3 / (steps // 5), (time.process_time() - c0) * 1e3 / (steps // 5)))
ws = sorted(x[0] for x in blocks); cs = sorted(x[1] for x in blocks)
print(json.dumps({'peer': 'torch ' + torch.__version__, 'model': model, 'threads': threads, 'batch': B,
                  'wall_ms_per_step_median': round(ws[2], 4), 'wall_range': [round(ws[0], 4), round(ws[-1], 4)],
                  'cpu_ms_per_step_median': round(cs[2], 4), 'cpu_range': [round(cs[0], 4), round(cs[-1], 4)]}))
