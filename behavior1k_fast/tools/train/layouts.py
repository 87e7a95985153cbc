"""The layouts the time-to-train judge compares: one typed table (:data:`LAYOUTS`) of :class:`TrainLayout`.

A layout is what collects the batches PPO trains on: an engine profile with the ``Collector``'s ``max_lag``
(0 serial, 1 collect-while-train), or a peer (the gymnasium double buffer, TorchRL's collectors) over the
``k1_skip`` profile's envs. Each layout has a **semantics**, what each env sees and does, on which its samples
to target depend (``fresh``: an env acts on its own observation at its chunk's start; ``hybrid``: the other
stage's slice holds its last action while this one steps; ``lookahead``: the chunk is chosen from an
observation d steps before the previous chunk ends, with the committed actions as input; ``+lag1``: acting
with weights one update old). Every layout trains its own seeds: its samples and wall to target come from its
own runs ("rates from the runs that learn", issue 42), the TorchRL collectors' too
(:class:`~behavior1k_fast.tools.peers.torchrl.TorchRLTraining`).

A compared row (:class:`CompareRow`) is a layout with the PPO lag correction it trains with
(:data:`CORRECTION_ROWS`; the ``--corrections`` comparison runs one ``+overlap`` layout under each).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...core.profile import SCHEDULES, RolloutProfile

#: The engine profiles of the judge's layouts (each run serial and collect-while-train).
ENGINE_PROFILES = ("stock", "k1_skip", "hybrid_k2", "process_k2", "lookahead")
#: The learner's profiles (:func:`~.learner.make_profile`: the example's and ``train-compare``'s), here so
#: that a command line can name them without importing torch.
PROFILES = ("k2_skip", "k1_skip", "stock", "lookahead")
#: Regime -> one forward of the policy at the stage batch as a multiple of the env's ms per chunk.
REGIMES = {"env-bound": 0.25, "balanced": 1.0, "model-bound": 4.0}
#: Modalities the VLA-cost policy reads.
MODALITIES = ("rgb", "proprio")


@dataclass(frozen=True)
class TrainLayout:
    """One row of the judge.

    Args:
        name: the row's name in tables and result files (``k1_skip``, ``k1_skip+overlap``, ``torchrl_async``).
        profile: the engine profile (:data:`ENGINE_PROFILES`) whose envs it steps; peers step ``k1_skip``'s.
        max_lag: weight versions a batch's chunks may lag the trainer: 0 serial PPO, 1 decoupled PPO.
        semantics: what each env sees and does (module docs).
        family: ``engine``, ``gymnasium`` (the double buffer) or ``torchrl`` (TorchRL's collectors).
        serial_twin: a collect-while-train layout's serial twin (the same envs and collector, lag 0: what its
            lag and lag correction are judged against); empty for a serial layout.
    """

    name: str
    profile: str
    max_lag: int
    semantics: str
    family: str = "engine"
    serial_twin: str = ""

    @property
    def is_peer(self) -> bool:
        return self.family != "engine"

    @property
    def overlap(self) -> bool:
        """Collection overlaps the update (the batch may act with weights one update old)."""
        return self.max_lag > 0


def _engine(profile: str, semantics: str) -> tuple[TrainLayout, TrainLayout]:
    """``profile``'s serial layout and its collect-while-train twin (``+overlap``, ``+lag1``)."""
    return (TrainLayout(profile, profile, 0, semantics),
            TrainLayout(f"{profile}+overlap", profile, 1, f"{semantics}+lag1", serial_twin=profile))


#: Every layout by name: the engine's (each serial and ``+overlap``), then the peers: the gymnasium double buffer
#: serial (``double_buffer_peer``) and with its PPO update on a thread while it collects the next batch
#: (``double_buffer_thread``, lag 1: :class:`~behavior1k_fast.tools.peers.gymnasium.DoubleBufferBatches`), and
#: TorchRL's collectors, each with the lag its chunks were measured to act at (the weights version the actor
#: recorded with each chunk, torchrl 0.14.1): ``MultiSyncCollector`` collects a batch with the weights posted
#: after the previous one (lag 0); ``MultiAsyncCollector``'s workers each keep one batch in flight and the
#: trainer joins one batch from each worker into its PPO batch, so it acts up to one update behind;
#: ``AsyncBatchedCollector`` collects on while the trainer updates and takes the posted weights between two
#: batched forwards (a batch mixes the two latest versions); ``Collector`` over a ``ParallelEnv``
#: (``torchrl_parallel``: one batched policy in the trainer's process) collects a batch after the trainer
#: posted (lag 0).
LAYOUTS: dict[str, TrainLayout] = {layout.name: layout for layout in (
    *_engine("stock", "fresh"), *_engine("k1_skip", "fresh"), *_engine("hybrid_k2", "hybrid"),
    *_engine("process_k2", "fresh"), *_engine("lookahead", "lookahead"),
    TrainLayout("double_buffer_peer", "k1_skip", 0, "fresh", "gymnasium"),
    TrainLayout("double_buffer_thread", "k1_skip", 1, "fresh+lag1", "gymnasium", "double_buffer_peer"),
    TrainLayout("torchrl_sync", "k1_skip", 0, "fresh", "torchrl"),
    TrainLayout("torchrl_async", "k1_skip", 1, "fresh+lag1", "torchrl", "torchrl_sync"),
    TrainLayout("torchrl_batched", "k1_skip", 1, "fresh+lag1", "torchrl", "torchrl_sync"),
    TrainLayout("torchrl_parallel", "k1_skip", 0, "fresh", "torchrl"),
)}
#: The peers, in table order.
PEERS = tuple(name for name, layout in LAYOUTS.items() if layout.is_peer)
#: The TorchRL collector peers.
TORCHRL_PEERS = tuple(name for name in PEERS if LAYOUTS[name].family == "torchrl")
#: ``--corrections``' names -> (the policy objective's correction, :mod:`.objective`; the value targets of GAE,
#: :data:`~.learner.VALUE_TARGETS`): ``current_values`` is ``decoupled`` over GAE values recomputed by the
#: current critic at the update's start (option (iv) of issue 42; the same no-grad pass as ``decoupled``'s).
CORRECTION_ROWS = {"none": ("none", "recorded"), "decoupled": ("decoupled", "recorded"),
                   "first_epoch": ("first_epoch", "recorded"), "dual_clip": ("dual_clip", "recorded"),
                   "current_values": ("decoupled", "current")}


@dataclass(frozen=True)
class CompareRow:
    """A row that trains its own seeds: ``layout`` with the lag correction ``correction`` (a name of
    :data:`CORRECTION_ROWS`; ``None``: the learner's default). Named ``<layout>`` or, in the ``--corrections``
    comparison, ``<layout>/<correction>``."""

    name: str
    layout: TrainLayout
    correction: str | None = None


def compare_row(name: str) -> CompareRow:
    """The compared row of ``name`` (``<layout>`` or ``<layout>/<correction>``, :class:`CompareRow`)."""
    layout, _, correction = name.partition("/")
    return CompareRow(name, LAYOUTS[layout], correction or None)


def compared_rows(profiles: Any, peers: Any, corrections: Any = None) -> dict[str, CompareRow]:
    """The rows that train their own seeds: every engine layout over ``profiles`` (names of
    :data:`ENGINE_PROFILES`, :func:`engine_layouts`) and those of ``peers`` (in :data:`PEERS`' order); with
    ``corrections`` (names of :data:`CORRECTION_ROWS`) instead each of those that collects while the trainer
    trains under each correction (``<layout>/<correction>``), after its serial twin."""
    layouts = [*engine_layouts(profiles), *(LAYOUTS[p] for p in PEERS if p in peers)]
    if not corrections:
        return {layout.name: CompareRow(layout.name, layout) for layout in layouts}
    out = {}
    for layout in (layout for layout in layouts if layout.overlap):
        out[layout.serial_twin] = CompareRow(layout.serial_twin, LAYOUTS[layout.serial_twin])
        out.update({f"{layout.name}/{c}": CompareRow(f"{layout.name}/{c}", layout, c) for c in corrections})
    return out


def engine_layouts(profiles: Any) -> list[TrainLayout]:
    """The engine layouts over ``profiles`` (names of :data:`ENGINE_PROFILES`): every serial one, then every
    ``+overlap`` one, in the order given."""
    return [layout for lag in (0, 1) for name in profiles for layout in LAYOUTS.values()
            if not layout.is_peer and layout.profile == name and layout.max_lag == lag]


def layout_profiles(processes: int, envs: int, chunk_size: int, lookahead_steps: int | str = "auto") -> tuple[
        dict[str, RolloutProfile], dict[str, str]]:
    """The engine profiles of :data:`ENGINE_PROFILES` (``lookahead`` at lead ``lookahead_steps``), and the ones
    this version cannot run (name -> why)."""
    layout = dict(num_env_processes=processes, total_num_envs=envs, chunk_size=chunk_size)
    fast = RolloutProfile(obs_modalities=MODALITIES, **layout)
    profiles = {
        "stock": RolloutProfile.stock(**layout),
        "k1_skip": fast,
        "hybrid_k2": fast.replace(pipeline_stages=2, partition="hybrid", physics_rescale="preserve_sim_time"),
        "process_k2": fast.replace(pipeline_stages=2, partition="process"),
    }
    from ...rollout.schedules import SCHEDULE_CLASSES

    missing = {}
    if "lookahead" in SCHEDULES and "lookahead" in SCHEDULE_CLASSES:
        try:
            profiles["lookahead"] = fast.replace(schedule="lookahead", lookahead_steps=lookahead_steps)
        except (TypeError, ValueError) as exc:
            missing["lookahead"] = f"the profile refuses it: {exc}"
    else:
        missing["lookahead"] = (f"not in this version: profile schedules {SCHEDULES}, engine drivers "
                                f"{sorted(SCHEDULE_CLASSES)}")
    return profiles, missing
