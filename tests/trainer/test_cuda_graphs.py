"""The CUDA-graph step's rule, shapes and padding (hf_cse/cuda_graphs.py), on the CPU. Its capture and replay run in
tests/trainer/test_cuda.py on a GPU."""

import pytest
import torch
from helpers import collator, tiny_args, tiny_train_dataset

from hf_cse.cached import IncompatibleOptionsError
from hf_cse.cuda_graphs import MIN_STEPS, CudaGraphStep, decide, length_bucket
from hf_cse.models import DiffCSEModel, SimCSEModel
from hf_cse.trainer import ContrastiveTrainer

ON_ONE_GPU = dict(device_type="cuda", world_size=1, sharded=False, grad_accumulation=1, compile_graphs=False,
                  fp16=False, activation_checkpointing=False, max_steps=1000, method_reason=None)


def test_auto_turns_graphs_on_for_a_long_single_gpu_run():
    decision = decide("auto", **ON_ONE_GPU)
    assert decision.on and "captured once per batch shape" in decision.describe()


@pytest.mark.parametrize("change, reason", [
    (dict(device_type="cpu"), "runs on cpu"),
    (dict(world_size=2), "2 processes"),
    (dict(sharded=True), "FSDP / DeepSpeed"),
    (dict(grad_accumulation=4), "gradient accumulation"),
    (dict(compile_graphs=True), "torch.compile's mode captures its own CUDA graphs"),
    (dict(fp16=True), "fp16"),
    (dict(activation_checkpointing=True), "activation checkpointing"),
    (dict(method_reason="its generator is not checked"), "its generator is not checked"),
])
def test_each_blocker_turns_auto_off_and_refuses_on(change, reason):
    decision = decide("auto", **{**ON_ONE_GPU, **change})
    assert not decision.on and reason in decision.reason
    with pytest.raises(ValueError, match=f"cuda_graphs=on cannot apply: .*{reason}"):
        decide("on", **{**ON_ONE_GPU, **change})


def test_short_runs_stay_eager_in_auto_only():
    assert not decide("auto", **{**ON_ONE_GPU, "max_steps": MIN_STEPS - 1}).on
    assert decide("on", **{**ON_ONE_GPU, "max_steps": MIN_STEPS - 1}).on
    assert decide("auto", **{**ON_ONE_GPU, "max_steps": -1}).on  # epochs: the length is not known up front
    assert not decide("off", **ON_ONE_GPU).on
    with pytest.raises(ValueError, match="one of auto, on, off"):
        decide("yes", **ON_ONE_GPU)


@pytest.mark.parametrize("length, cap, bucket", [(1, None, 8), (8, None, 8), (9, None, 16), (32, None, 32),
                                                 (33, 512, 64), (300, 512, 512), (513, 512, 513), (100, 128, 128)])
def test_length_buckets(length, cap, bucket):
    assert length_bucket(length, cap) == bucket


def test_padding_to_the_bucket_keeps_embeddings_and_loss(tiny_bert_dir, sentences, tmp_path):
    """The graph's static shapes pad every per-token input on the right (mask 0, labels -100): the model gives the
    same embeddings and the trainer the same loss as on the batch as collated."""
    ds, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path)
    batch = collator(tok)([ds[i] for i in range(8)])
    batch["mlm_labels"] = torch.full_like(batch["input_ids"], 3)
    step = CudaGraphStep([], pad_token_id=tok.pad_token_id, length_cap=512)
    length = batch["input_ids"].shape[-1]
    padded = step._pad(batch, length_bucket(length, 512) + 8)
    assert padded["input_ids"].shape[-1] == length_bucket(length, 512) + 8
    assert (padded["attention_mask"][..., length:] == 0).all() and (padded["mlm_labels"][..., length:] == -100).all()
    assert (padded["input_ids"][..., length:] == tok.pad_token_id).all()
    del batch["mlm_labels"], padded["mlm_labels"]
    model = SimCSEModel.from_encoder(str(tiny_bert_dir), dropout=0.0).eval()
    for pooler in ("cls", "avg", "avg_first_last"):
        a = model.sentence_embedding(batch["input_ids"][:, 0], batch["attention_mask"][:, 0], pooler=pooler)
        b = model.sentence_embedding(padded["input_ids"][:, 0], padded["attention_mask"][:, 0], pooler=pooler)
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6, msg=pooler)


def test_step_keys_shapes_by_bucket_and_falls_back_off_the_gpu():
    step = CudaGraphStep([], length_cap=512)
    ids = torch.ones(4, 2, 13, dtype=torch.long)
    batch = {"input_ids": ids, "attention_mask": ids}
    assert step._key(batch, 16) == step._key({k: v[..., :11] for k, v in batch.items()}, 16)
    assert step._key(batch, 16) != step._key(batch, 32)
    assert not step.supports(batch)  # CPU tensors: the step is the eager one
    assert step(batch, lambda b: ("eager", b["input_ids"].shape)) == ("eager", ids.shape)
    assert step.captures == step.replays == 0
    left = CudaGraphStep([], right_padded=False)
    assert left._padded_length(batch) == 13  # a left-padding tokenizer: each exact length is its own shape


def test_a_compiled_run_logs_its_attention_beside_its_path(tiny_bert_dir, sentences, tmp_path, caplog, monkeypatch):
    """The step's path and, for a compiled run where hf_cse's matmul attention rule applies, the attention it takes:
    both lines from the trainer's logger, once each (the rule's device widened to this CPU)."""
    from hf_cse.models import fast_dropout

    monkeypatch.setattr(fast_dropout, "COMPILED_MATMUL_ATTENTION_DEVICES", ("cpu",))
    ds, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path)
    for compiled in (False, True):
        caplog.clear()
        with caplog.at_level("INFO", logger="hf_cse.trainer"):
            ContrastiveTrainer(model=SimCSEModel.from_encoder(str(tiny_bert_dir)),
                               args=tiny_args(tmp_path / str(compiled), torch_compile=compiled), train_dataset=ds,
                               data_collator=collator(tok), processing_class=tok)
        assert caplog.text.count("CUDA graphs: off") == 1
        assert caplog.text.count("attention under torch.compile: matmul + softmax") == int(compiled)


def test_trainer_logs_its_path_and_refuses_graphs_it_cannot_run(tiny_bert_dir, sentences, tmp_path, caplog):
    ds, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path)
    model = SimCSEModel.from_encoder(str(tiny_bert_dir))
    with caplog.at_level("INFO", logger="hf_cse.trainer"):
        trainer = ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "out"), train_dataset=ds,
                                     data_collator=collator(tok), processing_class=tok)
    assert not trainer.graph_decision.on
    assert "CUDA graphs: off (the step runs on cpu, not a CUDA GPU)" in caplog.text
    assert trainer.args.logging_nan_inf_filter is False  # no host read of the loss every step
    with pytest.raises(IncompatibleOptionsError, match="cuda_graphs=on cannot apply: the step runs on cpu"):
        ContrastiveTrainer(model=model, args=tiny_args(tmp_path / "out2"), train_dataset=ds,
                           data_collator=collator(tok), processing_class=tok, cuda_graphs="on")


def test_diffcse_declares_why_it_trains_eagerly():
    assert not DiffCSEModel.captures_in_cuda_graph and "eagerly" in DiffCSEModel.why_no_cuda_graph
    assert SimCSEModel.captures_in_cuda_graph


def _copy_into(static, new):
    """Write ``new`` into the tensors of ``static`` (same structure), as a graph's replay writes its outputs."""
    if isinstance(static, torch.Tensor):
        static.copy_(new)
    elif isinstance(static, (tuple, list)):
        for a, b in zip(static, new):
            _copy_into(a, b)
    elif isinstance(static, dict):
        for key, value in static.items():
            _copy_into(value, new[key])
    elif static is not None and hasattr(static, "embeddings"):  # a CSEOutput
        _copy_into(static.embeddings, new.embeddings)
        _copy_into({k: v for k, v in static.metrics.items() if isinstance(v, torch.Tensor)}, new.metrics)


class _SimulatedGraph:
    """A CPU stand-in for a captured graph: a replay runs ``fn`` again and writes what it returns and the gradients
    it made into the tensors of the capture, as a real replay writes into the same memory; the gradients start from
    what they were at capture (None: written; buffers: added to). Like a real capture, recording leaves the random
    state as it was (a capture only counts the offsets its replays will draw)."""

    def __init__(self, fn, params):
        self.fn, self.params = fn, params
        self.grads_before = [p.grad for p in params]
        rng = torch.get_rng_state()
        self.result = fn()
        torch.set_rng_state(rng)
        self.grads_after = [p.grad for p in params]

    def replay(self):
        for p, grad in zip(self.params, self.grads_before):
            p.grad = grad
        _copy_into(self.result, self.fn())
        for buffer, p in zip(self.grads_after, self.params):
            if buffer is not None and p.grad is not buffer:
                buffer.copy_(p.grad)


class _SimulatedOptimizerGraph:
    """A CPU stand-in for the optimizer's graph (hf_cse.optimizer_graph): a capture runs nothing; a replay runs the
    captured clip-and-step again (reading the learning-rate tensors the trainer filled) and writes the gradient norm
    into the tensor of the capture."""

    def __init__(self, fn):
        self.fn, self.norm = fn, torch.zeros(())

    def replay(self):
        norm = self.fn()
        if norm is not None:
            self.norm.copy_(norm)


def _simulate_graphs(monkeypatch):
    """CUDA graphs on the CPU: batches count as on the GPU, captures record :class:`_SimulatedGraph` s (and the
    optimizer's, :class:`_SimulatedOptimizerGraph`)."""
    import hf_cse.cuda_graphs as cg
    from hf_cse.optimizer_graph import GraphedOptimizer

    def record(self, fn):
        graph = _SimulatedGraph(fn, self.parameters)
        return graph, graph.result

    def record_update(self, fn):
        graph = _SimulatedOptimizerGraph(fn)
        return graph, graph.norm

    monkeypatch.setattr(GraphedOptimizer, "_record", record_update)

    monkeypatch.setattr(cg.CudaGraphStep, "supports", lambda self, batch: True)
    monkeypatch.setattr(cg.CudaGraphStep, "_on_capture_stream", lambda self, fn, batch: fn(batch))
    monkeypatch.setattr(cg.CudaGraphStep, "_record", record)
    monkeypatch.setattr(cg.torch, "_foreach_zero_", lambda ts: [t.zero_() for t in ts])


@pytest.mark.slow
@pytest.mark.parametrize("cached, padded", [(None, True), (4, False), (4, True)])
def test_trainer_glue_with_simulated_graphs_trains_as_eager(tiny_bert_dir, sentences, tmp_path, monkeypatch,
                                                            cached, padded):
    """The trainer's side of the graph step on the CPU (capture and replay simulated, the rest real): warm-up,
    capture, replay into static buffers, gradients handed back to the parameters after each replay, metrics
    recorded. Plain step: with dropout off the losses equal the eager run's (batches padded to their length bucket).
    Cached mode (mini-batches of 4): batches not padded further, the embed and backward graphs of each mini-batch
    with dropout ON give the eager cached step's losses (the same masks in both passes); padded to their bucket while
    loaded into the graphs' buffers, with dropout off, too. Clipping and the optimizer step replay the optimizer's own
    (simulated) graph: the gradient norms and the losses after each update equal the eager run's."""
    import hf_cse.cuda_graphs as cg
    from hf_cse.cached_graphs import CachedGraphStep

    _simulate_graphs(monkeypatch)
    norms = {}
    if not padded:  # dropout on: a padded batch would draw other masks than the eager run's, so keep each length
        monkeypatch.setattr(cg, "length_bucket", lambda length, cap: length)
    losses = {}
    for mode in ("off", "on"):
        ds, tok = tiny_train_dataset(tiny_bert_dir, sentences, tmp_path, repeat=2)
        torch.manual_seed(0)
        model = SimCSEModel.from_encoder(str(tiny_bert_dir), dropout=0.0 if padded else 0.1, padding_free=False)
        trainer = ContrastiveTrainer(model=model, args=tiny_args(tmp_path / mode, max_steps=8, logging_steps=1),
                                     train_dataset=ds, data_collator=collator(tok), processing_class=tok,
                                     cached_minibatch_size=cached)
        if mode == "on":  # what decide() gives on one GPU
            trainer.graph_decision = cg.GraphDecision(True, "simulated")
        trainer.train()
        losses[mode] = [e["loss"] for e in trainer.state.log_history if "loss" in e]
        norms[mode] = [e["grad_norm"] for e in trainer.state.log_history if "loss" in e]
        if mode == "on":
            step = trainer.graph_step
            assert isinstance(step, CachedGraphStep) == bool(cached) and step.failed is None
            assert step.captures >= 1 and step.replays >= 8 - 2 * len(step.warmed)
            assert "pos_cos" in trainer.state.log_history[0]  # the graph's metrics reach the log
            # clipping and the optimizer step replayed their own graph, reading the learning rate the trainer filled
            optimizer = trainer.graphed_optimizer
            assert optimizer.failed is None and optimizer.replays == step.replays and optimizer.updates
    assert len(losses["off"]) == 8 and len(set(losses["off"])) > 1
    assert losses["on"] == pytest.approx(losses["off"], rel=1e-4)  # padded rows: another float summation order
    assert norms["on"] == pytest.approx(norms["off"], rel=1e-4)


def test_a_failed_capture_is_logged_once_and_each_graph_runs_eagerly(monkeypatch, caplog):
    """The step's and the optimizer's capture failing (here on the CPU, a capture that raises): each records the
    error's first line in ``failed``, logs it, leaves no gradient buffers of the graph behind and runs eagerly."""
    import hf_cse.cuda_graphs as cg
    from hf_cse.optimizer_graph import GraphedOptimizer

    def broken(self, fn):
        fn()  # what a capture runs before it fails: the backward has written gradients
        raise RuntimeError("operation not permitted when stream is capturing\nsecond line")

    monkeypatch.setattr(cg.CudaGraphStep, "supports", lambda self, batch: self.failed is None)
    monkeypatch.setattr(cg.CudaGraphStep, "_on_capture_stream", lambda self, fn, batch: fn(batch))
    monkeypatch.setattr(cg.CudaGraphStep, "_record", broken)
    monkeypatch.setattr(GraphedOptimizer, "_record", broken)
    weight = torch.nn.Parameter(torch.ones(3))

    def forward_backward(batch):
        loss = (weight * batch["input_ids"].float().sum()).sum()
        loss.backward()
        return loss.detach(), {}

    step = cg.CudaGraphStep([weight])
    batch = {"input_ids": torch.ones(2, 2, 8, dtype=torch.long)}
    with caplog.at_level("WARNING", logger="hf_cse.cuda_graphs"):
        step(batch, forward_backward)  # warm-up
        weight.grad = None
        step(batch, forward_backward)  # the capture fails: this batch runs eagerly
        assert step.failed == "RuntimeError: operation not permitted when stream is capturing"
        assert weight.grad is not None and step.captures == 0 and not step.graphs
        optimizer = GraphedOptimizer(torch.optim.SGD([weight], lr=0.1), max_grad_norm=1.0)
        optimizer.arm("key", [weight.grad])
        optimizer.step()  # the capture fails: clipped and stepped eagerly
        assert optimizer.failed == step.failed and not optimizer.updates
        step(batch, forward_backward)  # a later step runs eagerly without another capture or warning
        assert step.captures == 0
    assert weight.detach().tolist() != [1.0, 1.0, 1.0]
    assert [r.getMessage().split(" failed")[0] for r in caplog.records if "failed" in r.getMessage()] == [
        "CUDA graphs: capturing the step", "CUDA graphs: capturing the optimizer step"]
