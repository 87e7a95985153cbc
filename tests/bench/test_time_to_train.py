"""``behavior1k-fast train-judge`` (``behavior1k_fast/tools/train/``, ``benchmarks/time_to_train.py`` its
script): every layout's samples to target, seconds per sample and their product, per regime, with
collect-while-train layouts, the peers (``behavior1k_fast/tools/peers/``) and the lead sweep."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from behavior1k_fast.tools.cli import main
from behavior1k_fast.tools.train import layouts
from behavior1k_fast.tools.train.layouts import LAYOUTS, TORCHRL_PEERS

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]


def judge_module():
    from behavior1k_fast.tools.train import judge

    return judge


def learner_module():
    from behavior1k_fast.tools.train import learner

    return learner


def torchrl_peer():
    from behavior1k_fast.tools.peers import torchrl

    return torchrl


def usage_error(argv, capsys):
    """stderr of ``train-judge argv``, which must be a usage error (exit code 2, while parsing or after)."""
    try:
        code = main(["train-judge", *argv])
    except SystemExit as exc:
        code = exc.code
    assert code == 2, argv
    return capsys.readouterr().err


def test_reaching_the_target_counts_episodes_of_the_last_window():
    import types

    ttt = judge_module()
    entries = [types.SimpleNamespace(success_rate=rate, episodes=n) for rate, n in ((0.0, 4), (1.0, 1), (None, 0),
                                                                                    (0.5, 3))]
    assert not ttt.reached(entries[:1], 0.5, 2)  # fewer iterations than the window
    assert ttt.reached(entries, 0.6, 3)  # (1 * 1 + 0.5 * 3) / 4 episodes = 0.625
    assert not ttt.reached(entries, 0.7, 3)
    assert not ttt.reached(entries[:3], 0.1, 1)  # the last iteration ended no episode


def test_the_clock_charges_the_wait_for_a_batch_and_the_update_with_its_post_and_nothing_between(monkeypatch):
    """One loop times every row (:mod:`behavior1k_fast.tools.train.timing`); a scripted clock, no sleeps."""
    from behavior1k_fast.tools.train import timing

    now = [0.0]
    monkeypatch.setattr(timing.time, "perf_counter", lambda: now[0])
    events = []

    def batches():
        for i in range(3):
            now[0] += 2.0 + i  # the collector delivers batch i after 2 + i s
            events.append(f"batch {i}")
            yield 10 * (i + 1)  # its own actions

    def update(batch):
        now[0] += 0.5
        events.append(f"update {batch}")

    def post():
        now[0] += 0.25
        events.append("post")

    steps = []
    for step, batch, _ in timing.timed_loop(batches(), update, post):
        steps.append(step)
        now[0] += 100.0  # the caller's bookkeeping between two iterations: outside both clocks
    assert events == ["batch 0", "update 10", "post", "batch 1", "update 20", "post", "batch 2", "update 30", "post"]
    assert [(s.index, s.wait_s, s.update_s) for s in steps] == [(0, 2.0, 0.75), (1, 3.0, 0.75), (2, 4.0, 0.75)]
    # the first batch (the collector's start) is not counted in the median per sample
    assert timing.per_sample([s.wait_s for s in steps], [10, 20, 30]) == pytest.approx((3.0 / 20 + 4.0 / 30) / 2)
    assert timing.per_sample([1.0, None], [1, 1]) is None and timing.per_sample([1.0], [1]) is None


def test_the_engine_s_rows_and_the_peers_are_timed_by_the_same_loop(monkeypatch):
    """Fairness is structural: the learner's loop over the Collector and over a peer's batches both run through
    ``timing.timed_loop``."""
    import copy

    from behavior1k_fast.rollout import RolloutEngine
    from behavior1k_fast.tools.peers.gymnasium import DoubleBufferBatches
    from behavior1k_fast.tools.train import learner, timing

    used = []
    original = timing.timed_loop

    def recording(batches, update, post):
        used.append(type(batches).__name__)
        return original(batches, update, post)

    monkeypatch.setattr(timing, "timed_loop", recording)
    config = learner.PPOConfig(profile="k1_skip", iterations=1, processes=2, envs=2, chunk_size=2, rounds=2,
                               epochs=1, minibatches=1, executor="inline")
    learner.train(config)
    factory, profile = learner.make_factory(config), learner.make_profile(config)
    with RolloutEngine(factory, profile, executor="inline") as engine:
        spaces = (engine.observation_space, engine.action_space)
        obs_dim, action_dim = learner.obs_width(engine.observation_space), engine.action_dim
    learner.train_on(config, lambda policy: DoubleBufferBatches(
        factory, profile, copy.deepcopy(policy), spaces, config.rounds, config.iterations, config.seed,
        learner.load_trained), obs_dim, action_dim)
    assert used == ["EngineBatches", "DoubleBufferBatches"]


def test_a_cost_row_is_the_wait_plus_the_update_and_reads_an_older_file_s_row():
    from behavior1k_fast.tools.train.result import CostRow

    row = CostRow(0.002, 0.001, env_busy_s_per_sample=0.0015, gpu_busy_s_per_sample=0.001, policy_lag=0.5)
    assert row.s_per_sample == pytest.approx(0.003) and row.bound_s_per_sample == 0.0015
    assert row.of_bound == pytest.approx(0.5)
    assert CostRow.from_dict(row.to_dict()) == row
    assert "update_as" not in row.to_dict() and "trainer_cpu_s_per_sample" not in row.to_dict()
    older = CostRow.from_dict({"s_per_sample": 0.003, "update_s_per_sample": 0.001, "rollout_s_per_sample": 0.002})
    assert older.wait_s_per_sample == pytest.approx(0.002) and older.bound_s_per_sample is None


def test_each_layout_s_semantics_names_its_lag_and_every_compared_row_trains_its_own_seeds():
    assert LAYOUTS["k1_skip"].semantics == LAYOUTS["process_k2"].semantics == "fresh"
    assert LAYOUTS["hybrid_k2+overlap"].semantics == "hybrid+lag1"
    assert LAYOUTS["torchrl_sync"].semantics == "fresh" and LAYOUTS["torchrl_async"].semantics == "fresh+lag1"
    assert LAYOUTS["torchrl_batched"].semantics == "fresh+lag1"
    assert LAYOUTS["double_buffer_thread"].semantics == "fresh+lag1" and LAYOUTS["double_buffer_thread"].overlap
    for layout in LAYOUTS.values():  # a collect-while-train layout is judged beside its serial twin
        twin = LAYOUTS.get(layout.serial_twin)
        assert (twin is not None) == layout.overlap
        assert twin is None or (twin.max_lag == 0 and twin.profile == layout.profile and twin.family == layout.family
                                and twin.semantics + "+lag1" == layout.semantics)
    assert LAYOUTS["lookahead+overlap"].max_lag == 1 and LAYOUTS["stock"].max_lag == 0
    assert set(TORCHRL_PEERS) == set(torchrl_peer().KINDS)  # a layout for every TorchRL collector built
    assert LAYOUTS["lookahead+overlap"].profile == "lookahead" and LAYOUTS["double_buffer_peer"].profile == "k1_skip"
    rows = layouts.compared_rows(["k1_skip", "hybrid_k2"], ["double_buffer_thread", "torchrl_sync", "torchrl_async",
                                                            "torchrl_batched"])
    assert list(rows) == ["k1_skip", "hybrid_k2", "k1_skip+overlap", "hybrid_k2+overlap", "double_buffer_thread",
                          "torchrl_sync", "torchrl_async", "torchrl_batched"]
    assert [layout.name for layout in layouts.engine_layouts(["k1_skip", "stock"])] == [
        "k1_skip", "stock", "k1_skip+overlap", "stock+overlap"]


@pytest.mark.slow
def test_quick_run_reports_each_row_s_wall_to_target_from_its_own_runs_and_the_goals(tmp_path, capsys):
    assert main(["train-judge", "--quick", "--device", "cpu", "--out-dir", str(tmp_path), "--tag", "ci"]) == 0
    # a quick run has a name of its own: it never replaces a full run's result
    assert not (tmp_path / "time_to_train_ci.json").exists()
    result = json.loads((tmp_path / "time_to_train_ci_quick.json").read_text())
    regime = result["regimes"]["balanced"]
    layouts = regime["layouts"]
    own = {"k1_skip", "hybrid_k2", "k1_skip+overlap", "hybrid_k2+overlap", "double_buffer_peer",
           "double_buffer_thread"}
    peers = set(TORCHRL_PEERS)
    assert own <= set(layouts) and set(layouts) | set(regime["not_run"]) >= own | peers
    if torchrl_peer().torchrl_missing() is None:  # installed (the test extra has it): its collectors ran
        assert peers <= set(layouts), regime["not_run"]
        own |= peers  # these train their own seeds too
    assert result["complete"] is True and set(regime["training_runs"]) == own
    for name, row in layouts.items():
        if row["s_per_sample"] is None:  # its own runs all reached the target in their first iteration: no
            # steady state to time (shown '-', never 0)
            assert name in own and all(run["iterations"] == 1 for run in regime["training_runs"][name])
            assert row["wait_s_per_sample"] is None and row["of_bound"] is None
        else:
            assert row["s_per_sample"] > 0 and row["update_s_per_sample"] > 0
            # every row, engine or peer, is timed by the same loop: its wait for the batch, then the update
            assert row["s_per_sample"] == pytest.approx(row["wait_s_per_sample"] + row["update_s_per_sample"])
        # a CPU policy: no GPU busy time; the bound is the busiest env worker's or the trainer's CPU thread
        assert row["gpu_busy_s_per_sample"] is None and row["gpu_busy_missing"]
        if row["env_busy_s_per_sample"] is not None and row["s_per_sample"] is not None:
            assert row["bound_s_per_sample"] == max(row["env_busy_s_per_sample"], row["trainer_cpu_s_per_sample"])
            assert row["of_bound"] == pytest.approx(row["bound_s_per_sample"] / row["s_per_sample"])
        if LAYOUTS[name].is_peer and name in own and row["s_per_sample"] is not None:
            # a peer's bound from its own runs counts its busiest env worker too (it was left out)
            assert row["env_busy_s_per_sample"] > 0 and row["bound_s_per_sample"] >= row["env_busy_s_per_sample"]
        # every row's samples and wall to target are its own runs', the start left out
        runs = regime["training_runs"][name]
        assert row["own_runs"] and len(runs) == result["config"]["seeds"] == len(row["wall_to_target_s_per_seed"])
        for run, wall in zip(runs, row["wall_to_target_s_per_seed"]):
            assert wall == run["wall_to_target_s"] and (wall is None) == (run["samples"] is None)
            assert run["trained_wall_s"] + run["startup_s"] == pytest.approx(run["wall_s"][-1], rel=0.05)
            assert len(run["wait_s"]) == len(run["update_s"]) == len(run["update_cpu_s"]) == run["iterations"]
    # serial rows act with the weights of the update just made; overlapped ones one update behind at most
    for name, runs in regime["training_runs"].items():
        lags = [lag for run in runs for lag in run["policy_lag"]]
        if not LAYOUTS[name].overlap:
            assert max(lags) == 0
        elif any(run["iterations"] > 1 for run in runs):  # the first iteration acts with the first weights
            assert 0 < max(lags) <= 1
    assert layouts["k1_skip+overlap"]["semantics"] == "fresh+lag1"
    # each row's intervals and the goals of issue 42, each with a verdict
    assert set(regime["power"]) == own
    assert {g["name"] for g in regime["goals"]} >= {"wall_vs_double_buffer", "wall_vs_thread_double_buffer",
                                                    "of_bound"}
    assert all(g["verdict"] in ("met", "missed", "not shown") for g in regime["goals"])
    # TorchRL's sync collector acts with the weights just posted; its async one (a batch from each worker) and
    # its batched one collect while the trainer updates: one update behind at most, as the actor recorded it
    if "torchrl_sync" in layouts:
        for peer in peers:  # no lag where every run of the row reached the target in its first iteration (the
            # lag counts the iterations after the first)
            if layouts[peer]["policy_lag"] is None:
                assert all(run["iterations"] == 1 for run in regime["training_runs"][peer])
            assert layouts[peer]["update_as"] == peer
        assert {layouts[peer]["policy_lag"] for peer in ("torchrl_sync", "torchrl_parallel")} <= {0, None}
        for peer in ("torchrl_async", "torchrl_batched"):
            assert layouts[peer]["policy_lag"] is None or 0 < layouts[peer]["policy_lag"] <= 1
    calibration = regime["calibration"]
    assert calibration["model_width"] == 64 and calibration["adapter_rank"] > 0
    assert result["profiles"]["hybrid_k2"]["pipeline_stages"] == 2
    assert result["load"]["before"]["cores"] >= 1
    assert (tmp_path / "time_to_train_ci_quick.png").read_bytes()[:4] == b"\x89PNG"
    out = capsys.readouterr().out
    assert "| k1_skip+overlap | fresh+lag1 |" in out and "balanced (T_model / T_env = 1.0)" in out
    assert "balanced goal: wall to target, " in out
    # each step says what it does, overlap included; each written file is announced; no raw dict is printed
    assert "k1_skip+overlap (overlap on: collect while PPO updates): timing" in out
    assert "measured policy lag" in out and "{'" not in out
    assert f"wrote {tmp_path / 'time_to_train_ci_quick.json'}" in out
    assert f"wrote {tmp_path / 'time_to_train_ci_quick.png'}" in out


def test_the_vla_head_trains_the_adapters_inside_the_frozen_transformer_through_the_ppo_update():
    ttt = learner_module()
    from gymnasium import spaces

    obs_space = spaces.Dict({"head::rgb": spaces.Box(0, 255, (16, 16, 3), np.uint8),
                             "proprio": spaces.Box(-1, 1, (3,), np.float32),
                             "task::target": spaces.Box(-1, 1, (2,), np.float32)})
    act_space = spaces.Box(-1, 1, (2,), np.float64)
    arguments = dict(observation_space=obs_space, action_space=act_space, chunk_size=2, width=64, depth=2)
    model = ttt.VLAActorCritic(arguments, 5, 2, 2)
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    trained = ttt.trained_state(model)
    assert frozen and all(".down" in n or ".up" in n for n in trained if n.startswith("vla."))
    rng = np.random.default_rng(0)
    obs = {"head::rgb": rng.integers(0, 255, (4, 16, 16, 3), dtype=np.uint8),
           "proprio": rng.standard_normal((4, 3)).astype(np.float32),
           "task::target": rng.standard_normal((4, 2)).astype(np.float32)}
    before = model.features(obs).detach()
    loss = model.features(obs).pow(2).sum()
    loss.backward()
    assert all(p.grad is None for n, p in model.named_parameters() if n in frozen)
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for n, p in trained.items() if n.endswith(".up"))
    torch.optim.SGD(list(trained.values()), lr=0.1).step()
    assert not torch.allclose(model.features(obs), before)  # the adapters moved the VLA's output
    for name, p in model.named_parameters():
        if name in frozen:
            assert torch.equal(p, frozen[name])
    # the behaviour copy gets only the trained state; its frozen transformer is rebuilt from the seed
    import copy

    behaviour = copy.deepcopy(model)
    torch.testing.assert_close(behaviour.features(obs), model.features(obs))


def test_a_failed_peer_s_line_names_each_exception_it_came_from_and_ends_on_a_looping_chain():
    ttt = judge_module()
    try:
        try:
            raise OSError("the worker's own error")
        except OSError as cause:
            raise RuntimeError("A collector worker thread raised an exception.") from cause
    except RuntimeError as exc:
        line = ttt.failure(exc)
    assert line == ("failed: RuntimeError: ...A collector worker thread raised an exception. "
                    "<- OSError: ...the worker's own error")
    looped = ValueError("a")
    looped.__context__ = KeyError("b")
    looped.__context__.__context__ = looped
    assert ttt.failure(looped) == "failed: ValueError: ...a <- KeyError: ...'b'"
    # an out-of-memory error keeps every process it names (who holds the card), its start cut
    holders = " ".join(f"Process {4925 + i} has {6 + i}.00 GiB memory in use." for i in range(9))
    oom = RuntimeError(f"{'traceback line ' * 200}CUDA out of memory. Tried to allocate 20.00 MiB. {holders} "
                       f"Of the allocated memory 5.82 GiB is allocated by PyTorch.")
    line = ttt.failure(oom)
    assert holders in line and line.endswith("by PyTorch.") and len(line) < len(str(oom))


def test_compact_spaces_equal_the_spaces_and_pickle_small_so_spawned_workers_start_side_by_side():
    import pickle

    ttt = torchrl_peer()
    from gymnasium import spaces

    camera = spaces.Box(0, 255, (224, 224, 3), np.uint8)
    varied = spaces.Box(np.array([-1.0, 0.0]), np.array([1.0, 2.0]), dtype=np.float64)
    obs = spaces.Dict({"head::rgb": camera, "proprio": spaces.Box(-np.inf, np.inf, (3,), np.float32),
                       "offset": varied})
    compact = ttt.compact_space(obs)
    assert len(pickle.dumps(obs)) > 400_000 and len(pickle.dumps(compact)) < 4_000
    again = pickle.loads(pickle.dumps(compact))
    for space in (compact, again):
        assert space == obs and list(space.spaces) == list(obs.spaces)
        assert isinstance(space["head::rgb"], ttt.UniformBox) and space["head::rgb"].dtype == np.uint8
        assert type(space["offset"]) is spaces.Box  # bounds that differ per element stay as they are
        assert space["head::rgb"].contains(camera.sample())


def test_torchrl_s_wait_for_a_worker_s_initial_weights_outlasts_workers_that_start_one_after_another():
    pytest.importorskip("torchrl")
    # a fresh interpreter: the limit is read when torchrl is first imported
    code = ("import inspect; from behavior1k_fast.tools.peers import torchrl; "
            "assert torchrl.torchrl_missing() is None; "
            "from torchrl.weight_update._shared import SharedMemTransport as T; "
            "print(inspect.signature(T.setup_connection_and_weights_on_receiver).parameters['timeout'].default)")
    env = {k: v for k, v in os.environ.items() if k != "WEIGHT_SYNC_TIMEOUT"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                         check=True).stdout.split()
    assert float(out[-1]) == 900.0


def small_vla() -> tuple:
    """A 16 px camera, proprioception and a target: the observation space and a tiny VLA's arguments (chunks of
    2 actions of 2)."""
    from gymnasium import spaces

    obs_space = spaces.Dict({"head::rgb": spaces.Box(0, 255, (16, 16, 3), np.uint8),
                             "proprio": spaces.Box(-1, 1, (3,), np.float32),
                             "task::target": spaces.Box(-1, 1, (2,), np.float32)})
    return obs_space, dict(observation_space=obs_space, action_space=spaces.Box(-1, 1, (2,), np.float64),
                           chunk_size=2, width=64, depth=2)


def test_closing_torchrl_s_batches_ends_the_collector_s_generator_before_its_shutdown():
    """The collector's batch generator is closed while this process runs (left to the finalizer at interpreter
    exit, TorchRL's generator ran its shutdown again without its module globals: "Exception ignored")."""
    ttt = torchrl_peer()
    events = []

    class Collector:
        def __iter__(self):
            try:
                while True:
                    yield torch.ones(1)
            finally:
                events.append("generator closed")

        def shutdown(self):
            events.append("shutdown")

    batches = ttt.TorchRLBatches("torchrl_sync", None, learner_module().make_profile(learner_module().PPOConfig()),
                                 None, (), 0, 1, 2)
    batches.start = Collector
    assert next(batches).tolist() == [1.0]  # one part of a PPO batch (a sync collector's batch spans every env)
    batches.close()
    assert events == ["generator closed", "shutdown"] and batches.collector is None and batches.stream is None


def test_the_torchrl_actor_keeps_the_envs_leading_dims_and_acts_with_the_mirrored_weights():
    import functools

    ttt, ppo = torchrl_peer(), learner_module()
    obs_space, arguments = small_vla()
    make_policy = functools.partial(ppo.VLAActorCritic, arguments, 5, 2, 2)
    torch.manual_seed(0)
    model = make_policy()
    actor = ttt.TorchRLActor(make_policy, ppo.trained_state(model), obs_space)
    rng = np.random.default_rng(0)
    obs = {"head::rgb": torch.as_tensor(rng.integers(0, 255, (4, 16, 16, 3), dtype=np.uint8)),
           "proprio": torch.as_tensor(rng.standard_normal((4, 3)).astype(np.float32)),
           "task::target": torch.as_tensor(rng.standard_normal((4, 2)).astype(np.float32))}
    with torch.no_grad():
        expected = model.critic(model.features(obs)).squeeze(-1)
        for lead in [(2, 2), (4, 1), (4,)]:  # a worker's envs; the batched server's one-env requests; flat
            chunk, logprob, value, version = actor(*(obs[k].reshape(*lead, *obs[k].shape[1:]) for k in actor.keys))
            assert chunk.shape == (*lead, 2, 2) and chunk.dtype == torch.float64
            assert logprob.shape == value.shape == version.shape == lead and (version == 0).all()
            torch.testing.assert_close(value.reshape(-1), expected)
        for p in ppo.trained_state(model).values():  # the trainer updates; the actor follows its refresh only
            p.add_(0.5)
        moved = model.critic(model.features(obs)).squeeze(-1)
        assert not torch.allclose(actor(*(obs[k] for k in actor.keys))[2], moved)
        actor.refresh(ppo.trained_state(model))  # a new version: the next forward copies the mirror in
        _, _, value, version = actor(*(obs[k] for k in actor.keys))
        torch.testing.assert_close(value, moved)
        assert (version == 1).all()


@pytest.mark.parametrize("argv, text", [
    (["--processes", "100000"], "--processes"), (["--chunk-size", "0"], "--chunk-size"),
    (["--envs", "7"], "7"), (["--resolution", "100000"], "resolution"), (["--resolution", "8"], "--resolution 8"),
    (["--iterations", "0"], "--iterations"), (["--iterations", "-1"], "--iterations"), (["--seeds", "-1"], "--seeds"),
    (["--regime", "fast"], "--regime"), (["--layouts", "k3"], "--layouts"), (["--target", "2"], "--target"),
    (["--window", "5", "--iterations", "4"], "--window 5"), (["--model-depth", "2"], "--model-width"),
    (["--lookahead-steps", "soon"], "expected an int >= 0 or auto, got 'soon'"),
    (["--lookahead-steps", "-1"], "expected an int >= 0 or auto, got '-1'"),
    (["--lookahead-steps", "8"], "must be below --chunk-size 8, got 8"),
    (["--plot", "/nonexistent/time_to_train.json"], "argument --plot: cannot read '/nonexistent/time_to_train.json'"),
    (["--plot", str(Path(__file__))], "argument --plot: cannot read"),
    (["--plot", str(Path(__file__).parents[2] / "pytest.ini")], "cannot read"),
    # sizes that would only fail in the allocator, tens of seconds in (issue 44, N24)
    (["--rounds", "1000000000"], "--rounds 1000000000"), (["--chunk-size", "100000"], "--chunk-size 100000"),
    (["--model-width", "1000000000"], "--model-width 1000000000"),
    (["--model-width", "64", "--model-depth", "1000000"], "--model-depth 1000000"),
    (["--model-width", "100"], "--model-width"),
    (["--out-dir", "/proc/version/x"], "--out-dir"),
    (["--corrections", "none", "--layouts", "none", "--peers", "double_buffer_peer"],
     "--corrections none: no collect-while-train row to correct"),
])
def test_a_bad_argument_is_a_one_line_usage_error_before_any_env_starts(argv, text, capsys):
    err = usage_error(argv, capsys)
    assert text in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_the_lookahead_layout_takes_the_lead_given_and_help_shows_the_defaults(capsys):
    from behavior1k_fast.tools.cli import build_parser
    from behavior1k_fast.tools.train import check_args

    parser = build_parser()
    assert check_args(parser.parse_args(["train-judge", "--lookahead-steps", "1"])).lookahead_steps == 1
    assert parser.parse_args(["train-judge"]).lookahead_steps == "auto"
    assert parser.parse_args(["train-judge", "--regime", "model-bound,balanced"]).regime == ["model-bound",
                                                                                              "balanced"]
    profiles, _ = layouts.layout_profiles(2, 4, 8, 1)
    assert (profiles["lookahead"].schedule, profiles["lookahead"].lookahead_steps) == ("lookahead", 1)
    with pytest.raises(SystemExit):
        main(["train-judge", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "(default: 150)" in out and "minutes on 2 cores" in out  # --quick's time estimate


def test_quick_fills_only_the_options_left_at_their_defaults():
    from behavior1k_fast.tools.cli import build_parser
    from behavior1k_fast.tools.train import QUICK, check_args

    args = check_args(build_parser().parse_args(["train-judge", "--quick", "--seeds", "2", "--out-dir", "/tmp"]))
    assert args.seeds == 2 and args.iterations == QUICK["iterations"] and args.regime == QUICK["regime"]


def test_plot_refuses_a_json_that_is_not_a_result_of_this_benchmark(tmp_path, capsys):
    other = tmp_path / "bench.json"
    other.write_text(json.dumps({"rows": []}))
    err = usage_error(["--plot", str(other)], capsys)
    assert "is not a time_to_train result" in err and "Traceback" not in err


@pytest.mark.parametrize("name", sorted(p.name for p in (ROOT / "benchmarks" / "results").glob("time_to_train*.json")))
def test_every_recorded_result_reads_back_to_the_same_json_or_is_refused_as_of_an_older_format(name):
    """The typed result writes the JSON keys the recorded files have (``policy_lag`` of every row and ``complete``
    added; the
    first two H200 files predate regimes and are refused, as before)."""
    from behavior1k_fast.tools.train.report import format_table
    from behavior1k_fast.tools.train.result import TimeToTrainResult

    data = json.loads((ROOT / "benchmarks" / "results" / name).read_text())
    if "regimes" not in data and "lead_sweep" not in data:
        with pytest.raises(ValueError, match="not a time_to_train result"):
            TimeToTrainResult.from_dict(data)
        return
    again = TimeToTrainResult.from_dict(data).to_dict()

    def same(a, b, where):
        if isinstance(a, dict):
            assert set(a) - {"batches_with_posted_weights"} <= set(b), where  # nothing recorded is lost
            if "-peers" in name:  # the files of the current format: no key is new but the lag
                assert set(b) <= set(a) | {"policy_lag"}, where
            for key in set(a) & set(b):
                same(a[key], b[key], f"{where}/{key}")
        elif isinstance(a, float) and isinstance(b, float):
            assert b == pytest.approx(a, rel=1e-12), where
        else:
            assert a == b, where

    same(data, again, name)
    assert "{'" not in format_table(TimeToTrainResult.from_dict(data))


@pytest.mark.slow
def test_a_run_cut_short_leaves_the_seconds_per_sample_it_measured_in_an_incomplete_json(tmp_path, monkeypatch):
    ttt = judge_module()

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ttt, "samples_to_target", interrupted)  # the first training run is cut short
    with pytest.raises(KeyboardInterrupt):
        main(["train-judge", "--quick", "--device", "cpu", "--out-dir", str(tmp_path), "--tag", "cut", "--layouts",
              "k1_skip"])
    result = json.loads((tmp_path / "time_to_train_cut_quick.json").read_text())
    assert result["complete"] is False and result["regimes"] == {}
    so_far = result["in_progress"]["balanced"]
    assert {"k1_skip", "k1_skip+overlap"} <= set(so_far["cost"])
    assert all(runs == [] for runs in so_far["training_runs"].values())
    assert {"k1_skip", "k1_skip+overlap", "double_buffer_peer", "double_buffer_thread"} <= set(so_far["training_runs"])
    assert set(so_far["training_runs"]) <= {"k1_skip", "k1_skip+overlap", *layouts.PEERS}
    assert so_far["calibration"]["model_width"] == 64 and result["config"]["layouts"] == ["k1_skip"]
    # --plot draws what it measured, into the output folder
    drawn = tmp_path / "drawn"
    assert main(["train-judge", "--plot", str(tmp_path / "time_to_train_cut_quick.json"), "--out-dir",
                 str(drawn)]) == 0
    assert (drawn / "time_to_train_cut_quick.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_a_peer_whose_training_run_fails_is_reported_not_run_and_the_other_rows_train_their_seeds(tmp_path,
                                                                                                monkeypatch, capsys):
    """One call on a lent GPU holds a whole regime: a peer that fails (its first seed here) must not take the
    other rows' runs with it. The engine's own rows still raise (they are the product)."""
    ttt = judge_module()
    real = ttt.peer_samples_to_target

    def thread_fails(layout, *args, **kwargs):
        if layout.overlap:
            raise RuntimeError("CUDA error: out of memory")
        return real(layout, *args, **kwargs)

    monkeypatch.setattr(ttt, "peer_samples_to_target", thread_fails)
    assert main(["train-judge", "--quick", "--device", "cpu", "--out-dir", str(tmp_path), "--tag", "peer",
                 "--layouts", "none", "--peers", "double_buffer_peer,double_buffer_thread", "--seeds", "2"]) == 0
    regime = json.loads((tmp_path / "time_to_train_peer_quick.json").read_text())["regimes"]["balanced"]
    why = regime["not_run"]["double_buffer_thread"]
    assert why.startswith("seed 0: failed: RuntimeError") and "CUDA error: out of memory" in why
    assert "double_buffer_thread" not in regime["training_runs"]
    assert [run["seed"] for run in regime["training_runs"]["double_buffer_peer"]] == [0, 1]
    assert {g["name"] for g in regime["goals"]}.isdisjoint({"wall_vs_thread_double_buffer"})
    # --layouts none and no cost-row peer: no engine layout is timed either
    assert set(regime["layouts"]) == {"double_buffer_peer"}
    assert "| k1_skip |" not in capsys.readouterr().out


def test_a_result_that_cannot_be_written_is_one_line_and_exit_code_74_after_the_tables(tmp_path, monkeypatch,
                                                                                     capsys):
    """A full disk at the checkpoints does not stop the measurement; at the end the tables are printed, then
    one line and exit code 74 (issue 44, N17). The measurement is a stand-in: this is about the writing."""
    from behavior1k_fast.tools.measure.files import ResultWriteError
    from behavior1k_fast.tools.train.result import CostRow, RegimeResult, layout_rows

    ttt = judge_module()

    class Judge:
        def __init__(self, config, progress=print):
            self.profiles = {}

        def regime(self, regime, checkpoint):
            from behavior1k_fast.tools.train.result import RegimeProgress

            so_far = RegimeProgress({}, cost={"k1_skip": CostRow(0.001, 0.002)})
            checkpoint(so_far)
            checkpoint(so_far)
            return RegimeResult({}, layout_rows(so_far.cost, {}), {}, {})

    def full_disk(data, path):
        raise ResultWriteError(path, OSError(28, "No space left on device"))

    monkeypatch.setattr(ttt, "Judge", Judge)
    monkeypatch.setattr(ttt, "write_json", full_disk)
    code = main(["train-judge", "--regime", "balanced", "--device", "cpu", "--out-dir", str(tmp_path), "--tag", "x"])
    captured = capsys.readouterr()
    assert code == 74 and "| k1_skip | fresh | 3.000 |" in captured.out
    assert captured.out.count("cannot save the partial result") == 1
    assert len(captured.err.strip().splitlines()) == 1 and "No space left on device" in captured.err


def test_the_script_is_the_command_and_imports_no_path(tmp_path):
    script = ROOT / "benchmarks" / "time_to_train.py"
    assert "sys.path" not in script.read_text()
    done = subprocess.run([sys.executable, str(script), "--iterations", "0"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 2 and "--iterations" in done.stderr and len(done.stderr.strip().splitlines()) == 1
