"""Collector with the behaviour policy on a GPU: forwards on a stream of their own, snapshots taken on the
trainer's stream, waited for before they are loaded and marked used by the behaviour stream. Runs where
CUDA is (the GPU machine: ``python3 -m pytest -q tests/rollout/test_collector_cuda.py``)."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from behavior1k_fast.rollout.collector import WEIGHTS_VERSION_KEY, Collector  # noqa: E402

from .helpers import CHUNK  # noqa: E402
from .test_collector import make_engine  # noqa: E402

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (the GPU machine)")


class Head(torch.nn.Module):
    """Actions = a bias everywhere, computed on the GPU."""

    def __init__(self):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.zeros(2, device="cuda"))

    def forward(self, obs):
        rows = obs["proprio"].shape[0]
        return self.bias.expand(rows, CHUNK, 2).clone(), {"logprob": -self.bias.sum().expand(rows).clone()}


@pytest.mark.deadline(120)
def test_weights_posted_from_the_trainers_stream_are_the_ones_the_gpu_policy_acts_with():
    behaviour, learner = Head(), Head()
    big = torch.randn(4096, 4096, device="cuda")
    with make_engine(pipeline_stages=2) as engine:
        with Collector(engine, behaviour, 3, max_lag=1, total_batches=6, device="cuda:0") as collector:
            for b, batch in enumerate(collector):
                versions = batch.extras[WEIGHTS_VERSION_KEY]
                np.testing.assert_array_equal(batch.actions[..., 0, 0], versions.astype(np.float32))
                assert collector.version - versions.min() <= 1
                with torch.no_grad():
                    for _ in range(8):  # queue GPU work before the update, so a missed wait would show
                        big = big @ big / 4096.0
                    learner.bias.fill_(float(b + 1))
                collector.update_policy_weights(learner)


@pytest.mark.deadline(120)
def test_each_snapshot_tensor_is_marked_used_by_the_behaviour_stream_before_it_is_freed(monkeypatch):
    """The snapshot is allocated on the trainer's stream and read by the load's copies on the behaviour
    stream; without ``record_stream`` the caching allocator could hand its memory to the trainer's stream
    as soon as the snapshot is dropped, before those copies ran."""
    marked = []
    record_stream = torch.Tensor.record_stream

    def record(tensor, stream):
        marked.append((tensor.shape, stream))
        return record_stream(tensor, stream)

    monkeypatch.setattr(torch.Tensor, "record_stream", record)
    behaviour, learner = Head(), Head()
    with make_engine() as engine:
        with Collector(engine, behaviour, 1, max_lag=0, total_batches=2, device="cuda:0") as collector:
            next(collector)
            collector.update_policy_weights(learner)
            next(collector)
    assert [shape for shape, _ in marked] == [torch.Size([2])]
    assert marked[0][1] != torch.cuda.current_stream()
