"""SentEval's logistic regression, trained many fits at a time.

The classifier is SentEval's PyTorch ``MLP`` with ``nhid=0`` (a linear layer + cross-entropy), L2 through
the optimizer's (coupled) weight decay, early stopping on held-out accuracy with SentEval's cumulative
tenacity counter, the best held-out model kept. Seeds as SentEval (1111: same initial weights for every
fit, per-fit NumPy permutation stream). Classifier settings per mode (SimCSE's ``evaluation.py``):

* ``test``: Adam (lr 1e-3), batch 64, tenacity 5, epoch_size 4, kfold 10;
* ``fast`` and ``dev``: RMSprop (lr 1e-2), batch 128, tenacity 3, epoch_size 2, kfold 5.

Speed: the hundreds of independent fits of a task (test mode: 10 outer x 4 L2 x 10 inner = 400 for MR)
are trained *together* as one batched linear model (``torch.bmm``) with hand-written gradients and
optimizer steps, each fit keeping its own data order, early-stopping state and best weights. The protocols
that decide which fits to train are in :mod:`hf_cse.evaluation.transfer`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from ..errors import CSEError


@dataclass(frozen=True)
class ClassifierConfig:
    """SentEval's classifier parameters (``params['classifier']`` plus ``kfold``)."""

    optim: str = "adam"
    batch_size: int = 64
    tenacity: int = 5
    epoch_size: int = 4
    max_epoch: int = 200
    kfold: int = 10
    seed: int = 1111


TEST_CONFIG = ClassifierConfig("adam", 64, 5, 4, 200, 10)
FAST_CONFIG = ClassifierConfig("rmsprop", 128, 3, 2, 200, 5)
MODE_CONFIGS = {"test": TEST_CONFIG, "fast": FAST_CONFIG, "dev": FAST_CONFIG}


@dataclass
class Fit:
    """One logistic-regression fit of SentEval: rows of the feature matrix to train on (in the order
    SentEval's ``X_train`` has), its L2 penalty and its held-out data for early stopping: either explicit
    ``dev_idx`` (``validation_data``) or a ``validation_split`` fraction drawn from the seeded permutation."""

    train_idx: np.ndarray
    l2: float
    dev_idx: np.ndarray | None = None
    validation_split: float | None = None


class _Permutations:
    """SentEval seeds NumPy with the classifier seed when a classifier is built, so every fit with the
    same data size sees the same permutation sequence: generate each stream once and share it."""

    def __init__(self, seed: int):
        self.seed = seed
        self.streams: dict[tuple, tuple[np.random.RandomState, list[np.ndarray]]] = {}

    def split(self, n: int) -> np.ndarray:
        key = ("split", n)
        if key not in self.streams:
            rng = np.random.RandomState(self.seed)
            first = rng.permutation(n)
            self.streams[key] = (rng, [first])
        return self.streams[key][1][0]

    def get(self, key: tuple, n: int, k: int) -> np.ndarray:
        if key not in self.streams:
            self.streams[key] = (np.random.RandomState(self.seed), [])
        rng, perms = self.streams[key]
        offset = 1 if key[0] == "split" else 0
        while len(perms) <= k + offset:
            perms.append(rng.permutation(n))
        return perms[k + offset]


def _initial_weights(dim: int, nclasses: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        lin = torch.nn.Linear(dim, nclasses)
    return lin.weight.detach().t().contiguous(), lin.bias.detach().clone()


def _padded(rows: Sequence[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    idx = np.zeros((len(rows), width), dtype=np.int64)
    mask = np.zeros((len(rows), width), dtype=np.float32)
    for i, r in enumerate(rows):
        idx[i, : len(r)] = r
        mask[i, : len(r)] = 1.0
    return torch.from_numpy(idx), torch.from_numpy(mask)


@torch.no_grad()
def accuracy(X, y, W, b, rows: Sequence[np.ndarray], chunk_elems: int = 8_000_000) -> np.ndarray:
    """Accuracy of each fit f (weights ``W[f]``, ``b[f]``) on its own rows."""
    out = np.zeros(len(rows))
    width = max(len(r) for r in rows)
    step = max(1, chunk_elems // max(1, width * X.shape[1]))
    for s in range(0, len(rows), step):
        idx, mask = _padded(rows[s : s + step])
        logits = torch.baddbmm(b[s : s + step].unsqueeze(1), X[idx], W[s : s + step])
        correct = (logits.argmax(-1) == y[idx]).float() * mask
        out[s : s + step] = (correct.sum(1) / mask.sum(1)).numpy()
    return out


class BatchedLogReg:
    """Train many SentEval logistic regressions at once; see the module docstring.

    Fits with the same training/held-out rows (in SentEval: the same fold, different L2 penalties) form
    one *stream*: they see the same batches, so a batch is gathered once and multiplied by the stacked
    weights of all its fits. ``fit(fits)`` returns ``(W, b, best_dev_acc)`` with ``W`` of shape
    ``(F, D, C)``, the best held-out weights of each fit.
    """

    def __init__(
        self, X: np.ndarray, y: np.ndarray, nclasses: int, config: ClassifierConfig, max_parallel=None
    ):
        if config.optim not in ("adam", "rmsprop"):
            raise CSEError(f"Unknown optimizer {config.optim!r} (adam, rmsprop).")
        self.X = torch.as_tensor(np.ascontiguousarray(X), dtype=torch.float32)
        self.y = torch.as_tensor(np.asarray(y), dtype=torch.long)
        self.nclasses = int(nclasses)
        self.Y1h = torch.nn.functional.one_hot(self.y, self.nclasses).float()
        self.config = config
        # streams trained together: keep the gathered batch (streams x batch x dim) around 1M floats
        per_stream = config.batch_size * self.X.shape[1]
        self.max_parallel = int(max_parallel or max(1, 1_000_000 // per_stream))
        self.perms = _Permutations(config.seed)
        self.W0, self.b0 = _initial_weights(self.X.shape[1], self.nclasses, config.seed)

    def _resolve(self, fit: Fit) -> tuple[np.ndarray, np.ndarray, tuple]:
        train = np.asarray(fit.train_idx, dtype=np.int64)
        if fit.dev_idx is not None:
            return train, np.asarray(fit.dev_idx, dtype=np.int64), ("data", len(train))
        if not fit.validation_split:
            raise CSEError("A Fit needs dev_idx or validation_split.")
        perm = self.perms.split(len(train))
        ndev = int(fit.validation_split * len(train))
        return train[perm[ndev:]], train[perm[:ndev]], ("split", len(train))

    def fit(self, fits: Sequence[Fit]) -> tuple[torch.Tensor, torch.Tensor, np.ndarray]:
        streams: dict[tuple, list[int]] = {}
        resolved: dict[tuple, tuple] = {}
        for i, f in enumerate(fits):
            train, dev, key = self._resolve(f)
            skey = (key, hash(train.tobytes()), hash(dev.tobytes()))
            streams.setdefault(skey, []).append(i)
            resolved[skey] = (train, dev, key)
        keys = list(streams)
        F, D, C = len(fits), self.X.shape[1], self.nclasses
        W, b, acc = torch.empty(F, D, C), torch.empty(F, C), np.zeros(F)
        for s in range(0, len(keys), self.max_parallel):
            group = keys[s : s + self.max_parallel]
            l2s = [[fits[i].l2 for i in streams[k]] for k in group]
            gW, gb, gacc = self._fit_group([resolved[k] for k in group], l2s)
            for j, k in enumerate(group):
                for r, i in enumerate(streams[k]):
                    W[i], b[i], acc[i] = gW[j, :, r * C : (r + 1) * C], gb[j, r * C : (r + 1) * C], gacc[j, r]
        return W, b, acc

    @torch.no_grad()
    def _fit_group(self, resolved, l2s):
        """Train ``S`` streams of up to ``R`` fits each. Weights are kept as ``(S, R*C, D)`` (fit r = rows
        ``r*C:(r+1)*C``) and updated in place. Returns the best weights as ``(S, D, R*C)``, biases
        ``(S, R*C)`` and the best held-out accuracy ``(S, R)``.

        A fit that has stopped keeps being updated with its stream (its best weights are already saved
        and nothing reads it again); a stream whose pass is shorter than the longest one in the group
        skips the extra step exactly (its state is restored)."""
        cfg = self.config
        X, Y1h = self.X, self.Y1h
        S, R, C, D = len(resolved), max(len(v) for v in l2s), self.nclasses, self.X.shape[1]
        RC = R * C
        W = self.W0.t().repeat(R, 1).unsqueeze(0).repeat(S, 1, 1).contiguous()  # (S, RC, D)
        b = self.b0.repeat(R).unsqueeze(0).repeat(S, 1)
        mW, vW, mb, vb = torch.zeros_like(W), torch.zeros_like(W), torch.zeros_like(b), torch.zeros_like(b)
        nstep = torch.zeros(S)
        l2 = torch.zeros(S, R)
        alive = np.zeros((S, R), dtype=bool)
        for j, regs in enumerate(l2s):
            l2[j, : len(regs)] = torch.tensor(regs, dtype=torch.float32)
            alive[j, : len(regs)] = True
        l2 = l2.repeat_interleave(C, dim=1)  # (S, RC)
        best_W, best_b = W.clone(), b.clone()
        best_acc = np.full((S, R), -1.0)
        misses = np.zeros((S, R), dtype=np.int64)
        nepoch, npass, bs = 0, 0, cfg.batch_size
        adam = cfg.optim == "adam"
        b1, b2, lr, eps = (0.9, 0.999, 1e-3, 1e-8) if adam else (0.0, 0.99, 1e-2, 1e-8)  # RMSprop alpha = b2
        while alive.any() and nepoch <= cfg.max_epoch:
            act = np.flatnonzero(alive.any(1))  # streams with a fit still training
            a = torch.from_numpy(act)
            A = len(act)
            Wa, ba, mWa, vWa, mba, vba, na = W[a], b[a], mW[a], vW[a], mb[a], vb[a], nstep[a]
            l2W, l2b = l2[a].unsqueeze(-1), l2[a]
            for _ in range(cfg.epoch_size):
                rows = []
                for j in act:
                    train, _, key = resolved[j]
                    rows.append(train[self.perms.get(key, len(train), npass)])
                npass += 1
                idx, mask = _padded(rows)
                lengths = np.array([len(r) for r in rows])
                for st in range(int(np.ceil(idx.shape[1] / bs))):
                    ib = idx[:, st * bs : (st + 1) * bs]
                    nb = ib.shape[1]
                    idle = np.flatnonzero(lengths <= st * bs)  # streams whose pass is already over
                    if len(idle):
                        it = torch.from_numpy(idle)
                        saved = [t[it].clone() for t in (Wa, ba, mWa, vWa, mba, vba, na)]
                    Xb = X.index_select(0, ib.reshape(-1)).view(A, nb, D)
                    logits = torch.baddbmm(ba.unsqueeze(1), Xb, Wa.transpose(1, 2)).view(A, nb, R, C)
                    g = logits.sub_(logits.amax(-1, keepdim=True)).exp_()
                    g.div_(g.sum(-1, keepdim=True))  # softmax (faster than torch.softmax for tiny C)
                    g.sub_(Y1h.index_select(0, ib.reshape(-1)).view(A, nb, 1, C))
                    vm = mask[:, st * bs : (st + 1) * bs]
                    g.mul_((vm / vm.sum(1, keepdim=True).clamp_min(1.0)).view(A, nb, 1, 1))  # mean CE
                    g = g.view(A, nb, RC)
                    gW = torch.bmm(g.transpose(1, 2), Xb).addcmul_(Wa, l2W)  # + coupled L2
                    gb = g.sum(1).addcmul_(ba, l2b)
                    na += 1
                    if adam:
                        mWa.lerp_(gW, 1 - b1)
                        mba.lerp_(gb, 1 - b1)
                        vWa.mul_(b2).addcmul_(gW, gW, value=1 - b2)
                        vba.mul_(b2).addcmul_(gb, gb, value=1 - b2)
                        step_size = lr / (1 - b1**na)  # (A,)
                        bc2 = (1 - b2**na).sqrt()
                        Wa.sub_(
                            mWa / vWa.sqrt().div_(bc2[:, None, None]).add_(eps) * step_size[:, None, None]
                        )
                        ba.sub_(mba / vba.sqrt().div_(bc2[:, None]).add_(eps) * step_size[:, None])
                    else:
                        vWa.mul_(b2).addcmul_(gW, gW, value=1 - b2)
                        vba.mul_(b2).addcmul_(gb, gb, value=1 - b2)
                        Wa.addcdiv_(gW, vWa.sqrt().add_(eps), value=-lr)
                        ba.addcdiv_(gb, vba.sqrt().add_(eps), value=-lr)
                    if len(idle):
                        for t, old in zip((Wa, ba, mWa, vWa, mba, vba, na), saved):
                            t[it] = old
            nepoch += cfg.epoch_size
            W[a], b[a], mW[a], vW[a], mb[a], vb[a], nstep[a] = Wa, ba, mWa, vWa, mba, vba, na
            dev = _accuracy_streams(X, self.y, Wa.transpose(1, 2), ba, [resolved[j][1] for j in act], C)
            improved = (dev > best_acc[act]) & alive[act]
            imp_cols = torch.from_numpy(improved).repeat_interleave(C, dim=1)
            best_W[a] = torch.where(imp_cols[:, :, None], Wa, best_W[a])
            best_b[a] = torch.where(imp_cols, ba, best_b[a])
            best_acc[act] = np.where(improved, dev, best_acc[act])
            # SentEval: a miss counter that is never reset; stop once it has reached tenacity
            missed = alive[act] & ~improved
            stop = missed & (misses[act] >= cfg.tenacity)
            misses[act] += missed
            alive[act] &= ~stop
        return best_W.transpose(1, 2), best_b, best_acc


@torch.no_grad()
def _accuracy_streams(X, y, W, b, rows, nclasses, chunk_elems: int = 8_000_000) -> np.ndarray:
    """Accuracy ``(S, R)`` of the R fits stacked in ``W[s]`` (``(D, R*C)``) on stream s's rows."""
    S, RC = W.shape[0], W.shape[2]
    R = RC // nclasses
    out = np.zeros((S, R))
    width = max(len(r) for r in rows)
    step = max(1, chunk_elems // max(1, width * X.shape[1]))
    for s in range(0, S, step):
        idx, mask = _padded(rows[s : s + step])
        n = idx.shape[0]
        logits = torch.baddbmm(b[s : s + step].unsqueeze(1), X[idx], W[s : s + step])
        pred = logits.view(n, idx.shape[1], R, nclasses).argmax(-1)
        correct = (pred == y[idx][:, :, None]).float() * mask[:, :, None]
        out[s : s + step] = (correct.sum(1) / mask.sum(1)[:, None]).numpy()
    return out
