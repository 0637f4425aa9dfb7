"""Writes the TorchScript modules the torchscript tests load into DIR (argument 1): a good dense
model, a good sparse one (forward(dense, emb)), one with its own loss, one with batch norm, and one per
error class."""
import os
import sys

import torch
from torch import nn

OUT = sys.argv[1]
os.makedirs(OUT, exist_ok=True)
torch.manual_seed(1)


def save(name, module):
    torch.jit.script(module).save(os.path.join(OUT, name + ".pt"))


class Dense(nn.Module):  # 4 features -> 3 classes
    def __init__(self, inputs: int = 4, classes: int = 3):
        super().__init__()
        self.hidden = nn.Linear(inputs, 8)
        self.out = nn.Linear(8, classes)

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(dense)))


class WithLoss(Dense):
    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(dense)))

    @torch.jit.export
    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return 2.0 * nn.functional.cross_entropy(logits, labels)


class Sparse(nn.Module):  # forward(dense [b, 2], emb [b, 3, 4]) -> one logit
    def __init__(self):
        super().__init__()
        self.deep = nn.Linear(2 + 3 * 4, 1)

    def forward(self, dense: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        return self.deep(torch.cat([dense, emb.flatten(1)], dim=1)) + emb.sum(dim=(1, 2)).unsqueeze(1)


class CtrLinear(nn.Module):  # the CTR data's shape (dense [b, 4], emb [b, 6, 8]), not DeepFM's layers
    def __init__(self):
        super().__init__()
        self.wide = nn.Linear(4 + 6 * 8, 1)

    def forward(self, dense: torch.Tensor, emb: torch.Tensor) -> torch.Tensor:
        return self.wide(torch.cat([dense, emb.flatten(1)], dim=1))


class TwoInputs(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 3)

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return self.l(a) + self.l(b)


class Counter(Dense):
    def __init__(self):
        super().__init__()
        self.count = nn.Parameter(torch.zeros(3, dtype=torch.int64), requires_grad=False)


class Normed(nn.Module):  # Dense with batch norm: buffers (running statistics) beside parameters
    def __init__(self):
        super().__init__()
        self.hidden = nn.Linear(4, 8)
        self.norm = nn.BatchNorm1d(8)
        self.out = nn.Linear(8, 3)

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.norm(self.hidden(dense))))


class FailsInside(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(5, 3)

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        return self.l(dense.reshape(-1, 5))


class IntLogits(nn.Module):  # Fashion-MNIST logits as int64: no loss can be taken of them
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(784, 10)

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        return self.l(dense).long()


class FailsOnLargeBatches(nn.Module):  # trains on batches of 64, fails on the evaluation's 1,024 rows
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(784, 10)

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        if dense.size(0) > 512:
            raise RuntimeError("this module takes at most 512 rows")
        return self.l(dense)


class FailsOnRealEvaluation(nn.Module):  # passes every check on zeros; fails evaluating real rows
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(784, 10)

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        if not self.training and bool(dense.abs().sum() > 0):
            raise RuntimeError("no evaluation on real rows here")
        return self.l(dense)


class PerRowLoss(nn.Module):  # its own loss returns one value per row: nothing to step on
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(784, 10)

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        return self.l(dense)

    @torch.jit.export
    def loss(self, logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(logits, labels, reduction="none")


class Frozen(nn.Module):  # every parameter frozen: nothing to train
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(784, 10)
        for p in self.l.parameters():
            p.requires_grad_(False)

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        return self.l(dense)


class NaNWhenTraining(nn.Module):  # passes every check (eval mode); each training step's loss is NaN
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(784, 10)

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        out = self.l(dense)
        if self.training:
            out = out * float("nan")
        return out


class CountsTrainingForwards(nn.Module):  # a buffer counts the training forwards (in place)
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(784, 10)
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.calls += 1
        return self.l(dense)


class FailsOnceMidTask(nn.Module):  # raises once: on its 20th training forward (a buffer counts them)
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(784, 10)
        self.register_buffer("calls", torch.zeros(1))

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.calls += 1
            if bool((self.calls == 20).all()):
                raise RuntimeError("a fault of training forward 20")
        return self.l(dense)


class NaNWhenEvaluating(nn.Module):  # trains; in eval mode NaN logits for rows whose middle pixel is lit
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(784, 10)

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        out = self.l(dense)
        if not self.training:
            out = torch.where(dense[:, 400:401] > 0.5, out * float("nan"), out)
        return out


class WideBuffers(nn.Module):  # an int64 and a float64 buffer the forward reads in eval mode
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 3)
        self.register_buffer("seen", torch.zeros(1, dtype=torch.int64))
        self.register_buffer("scale", torch.ones(1, dtype=torch.float64))

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.seen += 1
            self.scale *= 1.5
            return self.l(dense)
        g = torch.clamp(self.seen, max=1).float()
        return self.l(dense) * g * self.scale.float() - (1.0 - g) * dense[:, :3] * 100.0


class ReassignsBuffers(nn.Module):  # its training forward reassigns its buffers (not in place)
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 3)
        self.register_buffer("mu", torch.zeros(4))
        self.register_buffer("steps", torch.zeros(1, dtype=torch.int64))

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        if self.training:
            self.mu = 0.9 * self.mu + 0.1 * dense.mean(0)
            self.steps = self.steps + 1
        return self.l(dense - self.mu)


class CountsEveryForward(nn.Module):  # reassigns its counter on every forward, eval mode too
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 3)
        self.register_buffer("n", torch.zeros(1))

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        self.n = self.n + 1
        return self.l(dense)


class F64Logits(nn.Module):  # Fashion-MNIST logits as float64
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(784, 10)

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        return self.l(dense).double()


class FailsOverThreshold(nn.Module):  # raises on any batch with a value beyond 3.3 (gaussian data)
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 3)

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        if bool((dense.abs() > 3.3).any()):
            raise RuntimeError("value over threshold 3.3")
        return self.l(dense)


class BigConst(nn.Module):  # an int64 constant float32 cannot hold; class 0's logit reads it
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 3)
        self.register_buffer("modulus", torch.tensor([1000000007], dtype=torch.int64))

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        shift = (self.modulus - 1000000007).float() * 1000.0
        return self.l(dense) + torch.cat([shift, torch.zeros(2)])


class WrongUnless1024(nn.Module):  # right on 1024 rows (config check's forward), 2 logits otherwise
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(784, 10)

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        y = self.l(dense)
        if dense.size(0) != 1024:
            return y[:, :2]
        return y


class SlowFirstStep(nn.Module):  # a worker's first training forward takes seconds (its warm-up)
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(784, 10)
        self.register_buffer("steps", torch.zeros(1))

    def forward(self, dense: torch.Tensor) -> torch.Tensor:
        if self.training:
            if bool(self.steps[0] == 0):
                x = torch.full([1000, 1000], 0.001)
                for _ in range(100):
                    x = torch.tanh(x @ x)
                dense = dense + 0.0 * x.sum()
            self.steps.add_(1.0)
        return self.l(dense)


save("dense", Dense())
save("with_loss", WithLoss())
save("sparse", Sparse())
save("two_inputs", TwoInputs())
save("ctr_linear", CtrLinear())
save("wide", Dense(4, 7))
save("counter", Counter())
save("fails_inside", FailsInside())
save("normed", Normed())
save("int_logits", IntLogits())
save("slow_first_step", SlowFirstStep())
save("fails_on_large_batches", FailsOnLargeBatches())
save("fails_on_real_evaluation", FailsOnRealEvaluation())
save("nan_when_training", NaNWhenTraining())
save("nan_when_evaluating", NaNWhenEvaluating())
save("counts_training_forwards", CountsTrainingForwards())
save("fails_once_mid_task", FailsOnceMidTask())
save("normed_mnist", nn.Sequential(nn.Linear(784, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 10)))
save("wrong_unless_1024", WrongUnless1024())
save("wide_buffers", WideBuffers())
save("reassigns_buffers", ReassignsBuffers())
save("f64_logits", F64Logits())
save("counts_every_forward", CountsEveryForward())
save("fails_over_threshold", FailsOverThreshold())
save("big_const", BigConst())
save("per_row_loss", PerRowLoss())
save("frozen", Frozen())
save("mlp", nn.Sequential(nn.Linear(784, 64), nn.ReLU(), nn.Linear(64, 10)))
with open(os.path.join(OUT, "garbage.pt"), "wb") as f:
    f.write(b"not a zip archive, not TorchScript")


def newer_op(src, dst):
    """An archive as a newer torch writes one: its code calls an op this libtorch lacks."""
    import zipfile
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for item in zin.infolist():
            data = zin.read(item.filename)
            if item.filename.endswith(".py"):
                data = data.replace(b"torch.linear(", b"torch.linear_v2(")
            zout.writestr(item, data)


newer_op(os.path.join(OUT, "dense.pt"), os.path.join(OUT, "newer_op.pt"))
print(OUT)
