"""Transfer tasks: the batched classifier against a literal port of SentEval's PyTorch classifier, fold
plans, toy tasks well above chance, MRPC features, data too small for a protocol refused before any encoding."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from eval_helpers import FakeEncoder, write_toy_senteval

from hf_cse.evaluation import data as D
from hf_cse.evaluation import evaluate
from hf_cse.evaluation.rowcheck import SentEvalDataError
from hf_cse.evaluation.transfer import (
    FAST_CONFIG,
    BatchedLogReg,
    ClassifierConfig,
    Fit,
    evaluate_transfer,
    format_transfer_table,
    inner_kfold_classifier,
    inner_kfold_plan,
    kfold_classifier,
    mrpc_features,
    split_classifier,
)


def senteval_fit(X, y, nclasses, l2, cfg: ClassifierConfig, dev=None, validation_split=None):
    """SentEval's ``PyTorchClassifier.fit`` / ``MLP(nhid=0)`` (senteval/tools/classifier.py), on CPU."""
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    model = torch.nn.Sequential(torch.nn.Linear(X.shape[1], nclasses))
    loss_fn = torch.nn.CrossEntropyLoss()
    if cfg.optim == "adam":
        opt = torch.optim.Adam(model.parameters())
    else:
        opt = torch.optim.RMSprop(model.parameters())
    opt.param_groups[0]["weight_decay"] = l2
    if dev is not None:
        trainX, trainy, (devX, devy) = X, y, dev
    else:
        perm = np.random.permutation(len(X))
        ndev = int(validation_split * len(X))
        trainX, trainy, devX, devy = X[perm[ndev:]], y[perm[ndev:]], X[perm[:ndev]], y[perm[:ndev]]
    trainX, devX = torch.from_numpy(trainX).float(), torch.from_numpy(devX).float()
    trainy, devy = torch.from_numpy(trainy).long(), torch.from_numpy(devy).long()

    def score():
        model.eval()
        with torch.no_grad():
            return float((model(devX).argmax(1) == devy).float().mean())

    nepoch, best, stop, count, best_model = 0, -1.0, False, 0, None
    while not stop and nepoch <= cfg.max_epoch:
        model.train()
        for _ in range(cfg.epoch_size):
            permutation = np.random.permutation(len(trainX))
            for i in range(0, len(trainX), cfg.batch_size):
                idx = torch.from_numpy(permutation[i : i + cfg.batch_size]).long()
                loss = loss_fn(model(trainX[idx]), trainy[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
        nepoch += cfg.epoch_size
        acc = score()
        if acc > best:
            best, best_model = acc, copy.deepcopy(model)
        else:
            if count >= cfg.tenacity:
                stop = True
            count += 1
    lin = best_model[0]
    return lin.weight.detach().t().numpy(), lin.bias.detach().numpy(), best


def blobs(n, dim, nclasses, sep, seed):
    rng = np.random.default_rng(seed)
    centers = rng.normal(size=(nclasses, dim)) * sep
    y = rng.integers(0, nclasses, size=n)
    return (centers[y] + rng.normal(size=(n, dim))).astype(np.float32), y


@pytest.mark.parametrize("optim", ["adam", "rmsprop"])
def test_batched_engine_matches_senteval_classifier(optim):
    X, y = blobs(150, 6, 3, sep=0.6, seed=1)
    cfg = ClassifierConfig(optim=optim, batch_size=16, tenacity=2, epoch_size=2, max_epoch=30, kfold=5)
    fits = [
        Fit(np.arange(0, 100), 1e-5, dev_idx=np.arange(100, 150)),
        Fit(np.arange(0, 100), 1e-2, dev_idx=np.arange(100, 150)),  # same stream, other L2
        Fit(np.arange(3, 100), 1e-3, dev_idx=np.arange(100, 150)),  # shorter pass (97 rows: partial batch)
        Fit(np.arange(0, 120), 1e-4, validation_split=0.1),  # SentEval's validation_split path
    ]
    W, b, acc = BatchedLogReg(X, y, 3, cfg, max_parallel=2).fit(fits)
    for i, f in enumerate(fits):
        rows = f.train_idx
        dev = (X[f.dev_idx], y[f.dev_idx]) if f.dev_idx is not None else None
        rw, rb, racc = senteval_fit(
            X[rows], y[rows], 3, f.l2, cfg, dev=dev, validation_split=f.validation_split
        )
        assert acc[i] == pytest.approx(racc, abs=1e-12), f"fit {i}"
        np.testing.assert_allclose(W[i].numpy(), rw, atol=2e-4, err_msg=f"fit {i}")
        np.testing.assert_allclose(b[i].numpy(), rb, atol=2e-4, err_msg=f"fit {i}")


def test_inner_kfold_plan_folds():
    y = np.array([0] * 37 + [1] * 23)
    outer, fits, slots = inner_kfold_plan(y, 10, regs=(1e-5, 1e-4, 1e-3, 1e-2))
    tested = np.concatenate([te for _, te in outer])
    assert len(outer) == 10 and sorted(tested.tolist()) == list(range(len(y)))  # each sample tested once
    for tr, te in outer:
        assert not set(tr) & set(te) and len(tr) + len(te) == len(y)
    assert len(fits) == 10 * 4 * 10
    for f, (o, r, j) in zip(fits, slots):
        tr, te = outer[o]
        assert set(f.train_idx) | set(f.dev_idx) == set(tr)  # inner folds live inside the outer train part
        assert not set(f.dev_idx) & set(te) and not set(f.train_idx) & set(te)  # L2 never sees the test fold
        assert not set(f.train_idx) & set(f.dev_idx)
    for o in range(10):  # inner folds of one (outer, L2) also partition the outer training part
        devs = np.concatenate([f.dev_idx for f, (oo, r, _) in zip(fits, slots) if oo == o and r == 0])
        assert sorted(devs.tolist()) == sorted(outer[o][0].tolist())


def test_l2_is_chosen_on_inner_folds_only(monkeypatch):
    X, y = blobs(80, 5, 2, sep=1.5, seed=2)
    seen = []
    original = BatchedLogReg.fit

    def spy(self, fits):
        seen.append(list(fits))
        return original(self, fits)

    monkeypatch.setattr(BatchedLogReg, "fit", spy)
    cfg = ClassifierConfig("rmsprop", 32, 2, 2, 20, kfold=4)
    out = inner_kfold_classifier(X, y, 2, cfg)
    outer = inner_kfold_plan(y, 4)[0]
    assert len(seen) == 2  # inner fits (L2 choice), then one final fit per outer fold
    for f in seen[0]:
        test_fold = next(te for tr, te in outer if set(f.train_idx) <= set(tr))
        assert not set(f.dev_idx) & set(test_fold)
    assert [len(f.train_idx) for f in seen[1]] == [len(tr) for tr, _ in outer]
    assert all(f.validation_split == 0.05 for f in seen[1])
    assert len(out["fold_testacc"]) == 4 and len(out["l2"]) == 4


def test_toy_tasks_well_above_chance():
    X, y = blobs(200, 10, 2, sep=1.0, seed=3)
    res = inner_kfold_classifier(X, y, 2, ClassifierConfig("rmsprop", 64, 3, 2, 60, kfold=10))
    assert res["testacc"] > 90 and res["devacc"] > 90
    Xn, yn = blobs(200, 10, 2, sep=0.0, seed=4)  # no signal: chance level
    noise = inner_kfold_classifier(Xn, yn, 2, ClassifierConfig("rmsprop", 64, 3, 2, 60, kfold=5))
    assert noise["testacc"] < 70

    X6, y6 = blobs(240, 12, 6, sep=1.2, seed=5)
    res6, yhat = kfold_classifier(X6[:180], y6[:180], X6[180:], y6[180:], 6, FAST_CONFIG)
    assert res6["testacc"] > 80 > 100 / 6 and len(yhat) == 60
    assert res6["testacc"] == pytest.approx(100 * np.mean(yhat == y6[180:]), abs=0.01)

    res_split = split_classifier(X[:120], y[:120], X[120:160], y[120:160], X[160:], y[160:], 2, FAST_CONFIG)
    assert res_split["testacc"] > 90 and len(res_split["dev_scores"]) == 4


def test_mrpc_features():
    u, v = np.array([[1.0, -2.0]]), np.array([[3.0, 1.0]])
    np.testing.assert_allclose(mrpc_features(u, v), [[2.0, 3.0, 3.0, -2.0]])
    np.testing.assert_allclose(mrpc_features(u, v, "full"), [[1, -2, 3, 1, 2, 3, 3, -2]])
    with pytest.raises(ValueError, match="senteval, full"):
        mrpc_features(u, v, "concat")


def test_evaluate_transfer_on_toy_folder(tmp_path):
    D.clear_cache()
    root = write_toy_senteval(tmp_path / "se")
    # embeddings that carry the sentiment cue words, so the binary toy tasks are learnable
    cue = {"great": 1.0, "good": 1.0, "love": 1.0, "awful": -1.0, "bad": -1.0, "hate": -1.0}

    class CueEncoder(FakeEncoder):
        def vector(self, s):
            v = super().vector(s).copy() * 0.1
            v[0] = sum(cue.get(w, 0.0) for w in s.split())
            return v

    enc = CueEncoder(dim=8)
    res = evaluate_transfer(enc, None, root, mode="fast")
    assert set(D.TRANSFER_TASKS) <= set(res) and "transfer_avg" in res
    for t in ("MR", "CR", "SUBJ", "MPQA", "SST2"):
        assert res[t] > 90, (t, res[t])
    assert res["transfer_avg"] == pytest.approx(np.mean([res[t] for t in D.TRANSFER_TASKS]))
    assert res["details"]["MRPC"]["features"] == "senteval" and "f1" in res["details"]["MRPC"]
    assert len(res["details"]["MR"]["fold_testacc"]) == 5
    dev = evaluate_transfer(enc, ["MR"], root, mode="dev")
    assert dev["MR"] == dev["details"]["MR"]["devacc"]
    table = format_transfer_table(res).splitlines()
    assert table[0].split() == ["MR", "CR", "SUBJ", "MPQA", "SST", "TREC", "MRPC", "Transfer", "Avg."]
    assert format_transfer_table(dev).splitlines()[0].split()[-2:] == ["Avg", "(MR)"]
    with pytest.raises(ValueError, match="Valid transfer tasks"):
        evaluate_transfer(enc, ["SNLI"], root)


def _keep_lines(path, n: int, header: int = 0) -> None:
    """Keep the first ``header`` + ``n`` lines of a toy file."""
    lines = path.read_text(encoding="latin-1").splitlines()
    path.write_text("\n".join(lines[: header + n]) + "\n", encoding="latin-1")


@pytest.mark.parametrize("mode, needs", [("test", "mode='test' (10-fold, a 10-fold inside each training part) needs "
                                                  "12 of each class and 23 in all"),
                                         ("fast", "mode='fast' (5-fold, a 5-fold inside each training part) needs "
                                                  "7 of each class and 25 in all")], ids=["test", "fast"])
def test_binary_task_too_small_for_its_folds_is_refused_before_encoding(tmp_path, mode, needs):
    """A toy MR of 4 lines per class ended in scikit-learn's StratifiedKFold ValueError after CR was encoded and
    scored; now one line names the task, the file, the sizes and what the folds need, before any encoding."""
    D.clear_cache()
    root = write_toy_senteval(tmp_path / "se")
    for name in ("rt-polarity.pos", "rt-polarity.neg"):
        _keep_lines(root / "MR" / name, 4)
    enc = FakeEncoder()
    with pytest.raises(SentEvalDataError) as err:
        evaluate_transfer(enc, ["CR", "MR"], root, mode=mode)
    message = str(err.value)
    assert "\n" not in message and enc.calls == []
    assert message.startswith(f"MR: 4 rows in the smallest class, of {root / 'MR' / 'rt-polarity.'}")
    assert f"8 in all; {needs}: add rows, or use SentEval's own MR files" in message
    with pytest.raises(SentEvalDataError, match="^MR: 4 rows"):  # the runner: before STS-B is encoded too
        evaluate(enc, "STSB,MR", root, mode=mode)
    assert enc.calls == []


FOLDS_NEED = "mode='fast' (5-fold cross-validation on this train split) needs 5 of each class and 20 in all"


@pytest.mark.parametrize("task, file, rows, needs", [
    ("TREC", "TREC/train_5500.label", 3, "3 rows in the smallest class of {file}, 18 in all; " + FOLDS_NEED),
    ("MRPC", "MRPC/msr_paraphrase_train.txt", 8, "4 rows in the smallest class of {file}, 8 in all; " + FOLDS_NEED),
    ("MRPC", "MRPC/msr_paraphrase_test.txt", 0, "{file} (its test split) holds no row"),
    ("SST2", "SST/binary/sentiment-dev", 0, "{file} (its dev split) holds no row"),
    ("SST2", "SST/binary/sentiment-train", 0, "{file} (its train split) holds no row"),
], ids=["TREC-train", "MRPC-train", "MRPC-test", "SST2-dev", "SST2-train"])
def test_split_task_too_small_is_refused_before_encoding(tmp_path, task, file, rows, needs):
    """TREC / MRPC with fewer train rows than the folds ended in scikit-learn's ValueError, an empty MRPC test split
    in f1_score's; an empty SST2 split gave a NaN or meaningless accuracy. Now one line, before any encoding."""
    D.clear_cache()
    root = write_toy_senteval(tmp_path / "se")
    file = root / file
    if task == "TREC":  # every class: 3 of the toy's 6 questions
        lines = file.read_text(encoding="latin-1").splitlines()
        file.write_text("\n".join(line for i, line in enumerate(lines) if i % 6 < 3) + "\n", encoding="latin-1")
    else:
        _keep_lines(file, rows, header=int(task == "MRPC"))
    enc = FakeEncoder()
    with pytest.raises(SentEvalDataError) as err:
        evaluate_transfer(enc, ["MR", task], root, mode="fast")
    assert str(err.value) == (f"{task}: {needs.format(file=file)}: add rows, or use SentEval's own {task} files "
                              "(data/downstream/get_transfer_data.bash).")
    assert enc.calls == []
