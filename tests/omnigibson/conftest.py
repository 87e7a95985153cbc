"""Integration tests against the real OmniGibson classes of every upstream line.

``omnigibson`` 1.1.1 is imported once per session, through the CPU import hook. The ``line`` fixture runs a
test once per upstream line (``1.1.1``, ``v3.7``, ``main``; see ``tests/upstream_lines.py`` and this folder's
README): for ``v3.7`` and ``main`` the line's verbatim upstream modules replace 1.1.1's while the test runs.
Where a patch does not apply on a line, :func:`patched` asserts the skip and its reason (:data:`EXPECTED_SKIPS`)
and the test stops there. The harnesses:

- ``seam`` (single-scene lines, 1.1.1 and v3.7): the real ``Environment`` / ``VectorEnvironment`` code with a
  recording stand-in for ``og.sim`` and, as upstream's doc names the seam, an ``og.Environment`` that skips
  ``load()`` (scene, robot and task are small stand-ins; ``post_play_load``, ``reset``, ``step``,
  ``_pre_step``, ``_post_step`` and ``get_obs`` are upstream's);
- ``multi_seam`` (main's multi-scene ``Environment``): main's real ``Environment`` with the same ``og.sim``
  stand-in and an ``__init__`` without ``load()``: stand-in scenes, robots, a batched task, scene-graph
  builders and, for tiled rendering, a stand-in ``TiledVisionSensor`` (a name 1.1.1 lacks); ``step``,
  ``reset``, ``get_obs``, ``_populate_info``, ``_convert_action_to_tensor``, ``_build_sensor_registry``,
  ``load_observation_space`` and ``_load_action_space`` are main's;
- ``isaacsim`` (tests marked ``isaacsim``): a real BEHAVIOR-1K install and Isaac Sim.

Each layout's harnesses record the same events into ``harness.log`` by instrumenting instances (never the
patched classes); :class:`Checks` and :class:`MultiSceneChecks` hold the contract assertions both run.
"""

from __future__ import annotations

import contextlib
import types
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import pytest

from ..upstream_lines import LINES, Line, activate_line

#: (line, patch) -> the skip reason (a substring) the fast profile gets there; every other patch a test
#: needs is applied.
EXPECTED_SKIPS = {
    ("main", "vector_env_step"): "main's multi-scene layout",
    ("1.1.1", "multi_scene_step"): "upstream Environment holds one scene",
    ("v3.7", "multi_scene_step"): "upstream Environment holds one scene",
    ("1.1.1", "multi_scene_vector_env"): "upstream Environment holds one scene",
    ("v3.7", "multi_scene_vector_env"): "upstream Environment holds one scene",
    ("main", "headless_viewport"): "already skips the viewport when headless (PR #2117)",
    ("v3.7", "viewer_camera_off"): "gm.RENDER_VIEWER_CAMERA is False",
}


@pytest.fixture(scope="session")
def og():
    from behavior1k_fast.patching.omnigibson import cpu_import

    module = cpu_import.import_omnigibson()  # through the CPU import hook when CUDA is absent
    import omnigibson.envs.env_base  # noqa: F401
    import omnigibson.envs.vec_env_base  # noqa: F401
    import omnigibson.sensors.vision_sensor  # noqa: F401
    import omnigibson.simulator  # noqa: F401

    return module


@pytest.fixture(params=LINES)
def line(request, og, monkeypatch) -> Line:
    """The upstream line this test runs on, active (its modules are the ones ``import omnigibson...`` finds)
    until the test ends. Skips with the reason where the line's texts are absent."""
    return activate_line(request.param, monkeypatch)


@pytest.fixture
def registry(line):
    """A fresh registry over the real patch set, on this test's line; everything is reverted after the test."""
    from behavior1k_fast.patching.omnigibson import PATCHES
    from behavior1k_fast.patching import PatchRegistry

    reg = PatchRegistry(PATCHES)
    yield reg
    reg.revert()


@pytest.fixture
def patched(registry, fast_profile, line):
    """``patched(*names)``: applies the fast profile and checks ``names`` on this line: ``True`` when all are
    applied; ``False`` after asserting that each one :data:`EXPECTED_SKIPS` lists for the line was skipped
    with that reason (the test then has nothing further to check on this line)."""
    from behavior1k_fast.patching import APPLIED, SKIPPED

    def check(*names: str) -> bool:
        report = registry.apply(fast_profile)
        for name in names:
            expected = EXPECTED_SKIPS.get((line.name, name))
            outcome = report[name]
            if expected is None:
                assert outcome.state == APPLIED, f"{name} on {line.name}: {outcome.state}: {outcome.reason}"
            else:
                assert outcome.state == SKIPPED and expected in outcome.reason, (
                    f"{name} on {line.name}: expected skipped ({expected}), got {outcome.state}: {outcome.reason}"
                )
        return not any((line.name, name) in EXPECTED_SKIPS for name in names)

    return check


# --- recording ---------------------------------------------------------------------------------------
def record(log: list, event: str, fn: Callable, detail: Callable[..., Any] | None = None) -> Callable:
    """``fn`` that first appends ``(event, detail(*args))`` to ``log``."""

    def recorded(*args, **kwargs):
        log.append((event, detail(*args, **kwargs) if detail else None))
        return fn(*args, **kwargs)

    return recorded


def class_method(obj: Any, name: str) -> Callable:
    """Calls ``type(obj).name`` looked up at call time, so a patch applied or reverted later is seen."""

    def call(*args, **kwargs):
        return getattr(type(obj), name)(obj, *args, **kwargs)

    return call


def instrument(harness: "Harness") -> None:
    """Record sim steps (with the render flag and scoped scenes), renders, per-env pre/post steps, task
    steps and resets, and every camera read, on instances only."""
    sim, log = harness.sim, harness.log
    sim.step = record(log, "sim.step", sim.step, lambda: (sim._render_on_step, tuple(id(s) for s in sim._scenes)))
    sim.render = record(log, "sim.render", sim.render)
    for i, env in enumerate(harness.venv.envs):
        env._pre_step = record(log, "pre_step", class_method(env, "_pre_step"), lambda *a, i=i: i)
        env._post_step = record(log, "post_step", class_method(env, "_post_step"), lambda *a, i=i, **k: i)
        env.task.step = record(log, "task.step", env.task.step, lambda *a, i=i: i)
        env.task.reset = record(log, "task.reset", env.task.reset, lambda *a, i=i: i)
        for robot in env.robots:
            for sensor in robot.sensors.values():
                sensor.get_obs = record(log, "sensor.read", sensor.get_obs, lambda *a, i=i: i)


class EventLog:
    """A harness's recorded ``(event, detail)`` pairs (``log``)."""

    log: list

    def events(self, name: str) -> list:
        """The details of every ``name`` event, in order."""
        return [detail for event, detail in self.log if event == name]


@dataclass
class Harness(EventLog):
    venv: Any
    sim: Any
    #: A valid action row for env i.
    action: Callable[[int], Any]
    log: list = field(default_factory=list)

    def actions(self, envs) -> list:
        return [self.action(i) for i in envs]

    def scene_ids(self, envs) -> tuple:
        return tuple(id(self.venv.envs[i].scene) for i in envs)


class Checks:
    """Contract assertions shared by the seam harness and the Isaac Sim harness."""

    @staticmethod
    def render_false_steps_physics_only(h: Harness) -> None:
        h.log.clear()
        h.venv.step(h.actions(range(len(h.venv.envs))), render=False)
        assert [render for render, _ in h.events("sim.step")] == [False]
        assert h.events("sim.render") == []
        assert h.sim._render_on_step is True  # restored after the step
        h.log.clear()
        h.venv.step(h.actions(range(len(h.venv.envs))))
        assert [render for render, _ in h.events("sim.step")] == [True]

    @staticmethod
    def no_obs_reads_no_sensor_but_steps_task(h: Harness, steps: int = 3) -> None:
        n = len(h.venv.envs)
        h.log.clear()
        for _ in range(steps):
            obs, rewards, terminated, truncated, infos = h.venv.step(h.actions(range(n)), get_obs=False)
            assert obs == [None] * n
            assert len(rewards) == len(terminated) == len(truncated) == len(infos) == n
        assert h.events("sensor.read") == []
        assert h.events("task.step") == list(range(n)) * steps
        h.log.clear()
        obs, *_ = h.venv.step(h.actions(range(n)))
        assert all(o is not None for o in obs)
        assert sorted(set(h.events("sensor.read"))) == list(range(n))

    @staticmethod
    def env_indices_steps_only_selected(h: Harness, selected: int = 1) -> None:
        h.log.clear()
        obs, rewards, *_ = h.venv.step(h.actions([selected]), env_indices=[selected])
        assert h.events("pre_step") == [selected]
        assert h.events("post_step") == [selected]
        assert h.events("task.step") == [selected]
        assert len(obs) == len(rewards) == 1
        (render, scenes), = h.events("sim.step")
        assert scenes == h.scene_ids([selected])
        assert tuple(id(s) for s in h.sim._scenes) == h.scene_ids(range(len(h.venv.envs)))  # restored

    @staticmethod
    def reset_resets_only_selected(h: Harness, selected: int = 1) -> None:
        h.log.clear()
        obs, infos = h.venv.reset(env_indices=[selected])
        assert h.events("task.reset") == [selected]
        assert len(obs) == len(infos) == 1 and obs[0] is not None
        h.log.clear()
        obs, infos = h.venv.reset(env_indices=[selected], get_obs=False)
        assert h.events("task.reset") == [selected] and obs == [None]
        assert h.events("sim.step") == []

    @staticmethod
    def reverted_to_upstream(h: Harness) -> None:
        """After ``revert()``: upstream signatures and behaviour (every env steps, renders, reads)."""
        n = len(h.venv.envs)
        with pytest.raises(TypeError):
            h.venv.step(h.actions([1]), env_indices=[1])
        h.log.clear()
        obs, *_ = h.venv.step(h.actions(range(n)))
        assert [render for render, _ in h.events("sim.step")] == [True]
        assert h.events("pre_step") == list(range(n)) and h.events("post_step") == list(range(n))
        assert sorted(set(h.events("sensor.read"))) == list(range(n))

    @staticmethod
    def headless_camera_has_no_viewport(camera: Any) -> None:
        config = camera._load_config
        assert camera._viewport is None and camera._render_product is not None
        assert (camera.image_width, camera.image_height) == (config["image_width"], config["image_height"])
        assert camera.viewer_visibility is False
        assert camera.active_camera_path == camera.prim_path


@dataclass
class MultiSceneHarness(EventLog):
    """main's multi-scene ``Environment`` (``env``) and the ``og.sim`` it steps, with the recorded events."""

    env: Any
    sim: Any
    #: A valid action row for env i.
    action: Callable[[int], Any]
    log: list = field(default_factory=list)

    def rows(self, envs) -> Any:
        """Action rows of ``envs`` (in that order) as one float tensor, as main's ``step`` takes them."""
        import torch

        return torch.as_tensor(np.stack([self.action(i) for i in envs]), dtype=torch.float32)

    @property
    def tiled(self) -> bool:
        return self.env._tiled_sensor is not None

    def steps(self) -> list[int]:
        return self.env.episode_steps.tolist()

    def outcome(self, call: Callable[["MultiSceneHarness"], Any]) -> tuple:
        """``call(self)`` from simulated time 0: its result (structure, shapes, dtypes and values), the events
        it records, and the step counters after it."""
        self.log.clear()
        self.sim.current_time = 0.0
        result = call(self)
        events = [(event, detail.tolist() if hasattr(detail, "tolist") else detail) for event, detail in self.log]
        return _described(result), events, self.steps()


def instrument_multi_scene(harness: MultiSceneHarness) -> None:
    """Record sim steps (with the render flag), renders, every robot's actions (by env), the batched task's
    steps (the action it is given) and resets (the env indices), scene-graph builder steps, per-env camera
    reads and tiled reads, on instances only."""
    sim, log, env = harness.sim, harness.log, harness.env
    sim.step = record(log, "sim.step", sim.step, lambda: sim._render_on_step)
    sim.render = record(log, "sim.render", sim.render)
    for i, scene in enumerate(env.scenes):
        for robot in scene.robots:
            robot.apply_action = record(log, "apply", class_method(robot, "apply_action"), lambda *a, i=i: i)
            for sensor in robot.sensors.values():
                sensor.get_obs = record(log, "sensor.read", sensor.get_obs, lambda *a, i=i, **k: i)
    env.task.step = record(log, "task.step", env.task.step,
                           lambda e, action: action.clone() if hasattr(action, "clone") else action)
    env.task.reset = record(log, "task.reset", env.task.reset,
                            lambda e, env_indices=None: sorted(int(i) for i in env_indices))
    for i, builder in enumerate(env._scene_graph_builders):
        builder.step = record(log, "builder.step", builder.step, lambda *a, i=i: i)
    if env._tiled_sensor is not None:
        env._tiled_sensor.get_obs = record(log, "tiled.read", env._tiled_sensor.get_obs)


def _described(value: Any) -> Any:
    """``value`` as comparable plain data: containers by type and items, tensors by shape, dtype and values."""
    if isinstance(value, (list, tuple)):
        return type(value).__name__, [_described(v) for v in value]
    if isinstance(value, dict):
        return "dict", {k: _described(v) for k, v in value.items()}
    if hasattr(value, "tolist"):
        return type(value).__name__, tuple(value.shape), str(value.dtype), value.tolist()
    return type(value).__name__, value if value is None or isinstance(value, (bool, int, float, str)) else None


def torch_equal(a: Any, b: Any) -> bool:
    import torch

    return torch.equal(torch.as_tensor(a), torch.as_tensor(b))


def _same_obs(a: Any, b: Any) -> bool:
    """Nested observation dicts with equal keys and equal tensors."""
    import torch

    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same_obs(a[k], b[k]) for k in a)
    return torch_equal(a, b)


class MultiSceneChecks:
    """Contract assertions on main's multi-scene ``Environment``, shared by its seam and Isaac Sim harnesses."""

    @staticmethod
    def observed(h: MultiSceneHarness, envs: list[int]) -> None:
        """The last step read the observations of ``envs`` only: one tiled read (no per-env camera read), or
        one camera read per env of ``envs``."""
        if h.tiled:
            assert h.events("tiled.read") == [None] and h.events("sensor.read") == []
        else:
            assert sorted(h.events("sensor.read")) == sorted(envs) and h.events("tiled.read") == []

    @staticmethod
    def render_false_steps_physics_only(h: MultiSceneHarness) -> None:
        n = h.env.num_envs
        h.log.clear()
        h.env.step(h.rows(range(n)), render=False)
        assert h.events("sim.step") == [False] and h.events("sim.render") == []
        assert h.sim._render_on_step is True  # restored after the step
        h.log.clear()
        h.env.step(h.rows(range(n)))
        assert h.events("sim.step") == [True]

    @staticmethod
    def no_obs_reads_no_sensor_but_steps_task(h: MultiSceneHarness, steps: int = 3) -> None:
        n = h.env.num_envs
        before = h.steps()
        h.log.clear()
        for _ in range(steps):
            obs, rewards, terminated, truncated, infos = h.env.step(h.rows(range(n)), get_obs=False)
            assert obs == [None] * n and [info["obs_info"] for info in infos] == [{}] * n
            assert tuple(rewards.shape) == tuple(terminated.shape) == tuple(truncated.shape) == (n,)
        assert h.events("sensor.read") == [] and h.events("tiled.read") == []
        assert len(h.events("task.step")) == steps
        assert h.steps() == [b + steps for b in before]
        h.log.clear()
        obs, *_ = h.env.step(h.rows(range(n)))
        assert all(o is not None for o in obs)
        MultiSceneChecks.observed(h, list(range(n)))

    @staticmethod
    def env_indices_steps_only_selected(h: MultiSceneHarness, selected: int = 1) -> None:
        n = h.env.num_envs
        before = h.steps()
        h.log.clear()
        rows = h.rows([selected])
        obs, rewards, terminated, truncated, infos = h.env.step(rows, env_indices=[selected])
        assert h.events("apply") == [selected] * len(h.env.scenes[selected].robots)
        assert len(obs) == len(infos) == 1 and obs[0] is not None
        assert tuple(rewards.shape) == tuple(terminated.shape) == tuple(truncated.shape) == (1,)
        assert h.events("sim.step") == [True]
        (task_action,) = h.events("task.step")  # main's task is batched: one call, every env's row
        assert tuple(task_action.shape) == (n, rows.shape[1]) and torch_equal(task_action[selected], rows[0])
        assert h.steps() == [b + (i == selected) for i, b in enumerate(before)]
        MultiSceneChecks.observed(h, [selected])

    @staticmethod
    def reset_resets_only_selected(h: MultiSceneHarness, selected: int = 1) -> None:
        n = h.env.num_envs
        episodes = h.env._current_episodes.tolist()
        h.log.clear()
        obs, info = h.env.reset(env_indices=[selected])
        assert h.events("task.reset") == [[selected]]
        assert len(obs) == len(info["obs_info"]) == 1 and obs[0] is not None
        assert h.env._current_episodes.tolist() == [e + (i == selected) for i, e in enumerate(episodes)]
        assert h.steps()[selected] == 0
        h.log.clear()
        assert h.env.reset(env_indices=[selected], get_obs=False) is None  # main's reset returns nothing then
        assert h.events("task.reset") == [[selected]] and h.events("sim.step") == []
        assert len(h.steps()) == n

    @staticmethod
    def tiled_subset_equals_rows_of_full(h: MultiSceneHarness, selected: tuple = (0, 2)) -> None:
        assert h.tiled
        h.log.clear()
        obs, *_ = h.env.step(h.rows(selected), env_indices=list(selected))
        assert h.events("sim.render") == []
        MultiSceneChecks.observed(h, list(selected))
        full, _ = h.env.get_obs()  # every env, from the same render
        assert len(obs) == len(selected)
        for row, env_idx in enumerate(selected):
            assert _same_obs(obs[row], full[env_idx]), env_idx

    @staticmethod
    def reverted_to_upstream(h: MultiSceneHarness) -> None:
        """After ``revert()``: main's own signature and behaviour (every env steps, renders, is read)."""
        n = h.env.num_envs
        with pytest.raises(TypeError):
            h.env.step(h.rows([1]), env_indices=[1])
        with pytest.raises(TypeError):
            h.env.step(h.rows(range(n)), get_obs=False)
        h.log.clear()
        obs, *_ = h.env.step(h.rows(range(n)))
        assert h.events("sim.step") == [True]
        assert sorted(h.events("apply")) == sorted(i for i in range(n) for _ in h.env.scenes[i].robots)
        MultiSceneChecks.observed(h, list(range(n)))


# --- the og.sim seam -------------------------------------------------------------------------------
class RecordingSim:
    """Stand-in for ``og.sim``: the members OmniGibson's env and sensor code calls. ``render_on_step`` sets the
    render flag and restores it only when its block exits normally, as upstream's does on every line."""

    def __init__(self, sim_step_dt: float = 1 / 30) -> None:
        self._render_on_step = True
        self._scenes: list = []
        self.current_time = 0.0
        self.sim_step_dt = sim_step_dt
        self.device = "cpu"
        self.initial_physics_dt = 1 / 120
        self.initial_rendering_dt = 1 / 30
        self.viewer_width = self.viewer_height = 1280
        self.handle_updates = 0

    @contextlib.contextmanager
    def render_on_step(self, value):
        previous, self._render_on_step = self._render_on_step, value
        yield
        self._render_on_step = previous

    @contextlib.contextmanager
    def editing_usd(self):  # main
        yield

    def step(self):
        self.current_time += self.sim_step_dt

    def render(self):
        pass

    def stop(self):
        pass

    def play(self):
        pass

    def update_handles(self):
        self.handle_updates += 1

    def get_sim_step_dt(self):
        return self.sim_step_dt


class Camera:
    """Stand-in camera of a stand-in robot (reads a constant image)."""

    def __init__(self, value: float) -> None:
        self.value = value

    def get_obs(self):
        import torch

        return {"rgb": torch.full((4, 4, 3), self.value)}, {}


class Robot:
    name = "robot0"
    action_dim = 2

    def __init__(self, env_id: int) -> None:
        import gymnasium as gym

        self.sensors = {"robot0:eyes:Camera:0": Camera(float(env_id))}
        self.action_space = gym.spaces.Box(-1.0, 1.0, (self.action_dim,), dtype=np.float32)
        self.applied: list = []

    def load_observation_space(self):
        import gymnasium as gym

        self.observation_space = gym.spaces.Dict(
            {"rgb": gym.spaces.Box(0.0, 255.0, (4, 4, 3), dtype=np.float32)}
        )
        return self.observation_space

    def apply_action(self, action):
        self.applied.append(np.asarray(action, dtype=np.float64).copy())

    def get_obs(self):
        obs, info = {}, {}
        for name, sensor in self.sensors.items():
            obs.update(sensor.get_obs()[0])
        return obs, info


class Task:
    """Stand-in task: reward 1 per step; the episode ends with ``terminate_at`` steps (0 = never)."""

    def __init__(self, terminate_at: int = 0) -> None:
        self.terminate_at = terminate_at
        self.steps = 0

    def load_observation_space(self):
        import gymnasium as gym

        self.observation_space = gym.spaces.Dict({})
        return self.observation_space

    def post_play_load(self, env):
        pass

    def reset(self, env):
        self.steps = 0

    def step(self, env, action):
        self.steps += 1
        done = bool(self.terminate_at) and self.steps >= self.terminate_at
        conditions = {"timeout": {"done": False}, "success": {"done": done}}
        return 1.0, done, {"done": {"termination_conditions": conditions}}


class Scene:
    def __init__(self, robot: Robot) -> None:
        self.robots = [robot]

    def reset(self):
        pass

    def update_initial_state(self):  # 1.1.1
        pass

    def update_initial_file(self):  # v3.7
        pass


def seam_environment_class(og):
    """``og.Environment`` for the seam: upstream's class, ``__init__`` without ``load()``."""
    from omnigibson.envs.env_base import Environment

    class SeamEnvironment(Environment):
        created = 0
        terminate_at: dict = {}
        built: list = []  # every instance, in creation order

        def __init__(self, configs, in_vec_env=False):
            env_id = SeamEnvironment.created
            SeamEnvironment.created += 1
            SeamEnvironment.built.append(self)
            self.in_vec_env = in_vec_env
            self.config = configs
            self._automatic_reset = False
            self._flatten_action_space = True
            self._flatten_obs_space = False
            self._scene_graph_builder = None
            self._external_sensors = None
            self._external_sensors_include_in_obs = None
            self._loaded = False
            self._current_episode = 0
            self._current_step = 0
            self._scene = Scene(Robot(env_id))
            self._task = Task(SeamEnvironment.terminate_at.get(env_id, 0))
            og.sim._scenes.append(self._scene)

    return SeamEnvironment


# --- main's multi-scene Environment at the seam ---------------------------------------------------------
class SceneRobot(Robot):
    """Stand-in robot of one scene of main's ``Environment``: its camera and proprioception ``[env, actions]``."""

    _obs_modalities = ("rgb", "proprio")

    def __init__(self, env_id: int) -> None:
        super().__init__(env_id)
        self.env_id = env_id

    def load_observation_space(self):
        import gymnasium as gym

        camera = gym.spaces.Dict({"rgb": gym.spaces.Box(0.0, 255.0, (4, 4, 3), dtype=np.float32)})
        proprio = gym.spaces.Box(-np.inf, np.inf, (2,), dtype=np.float32)
        self.observation_space = gym.spaces.Dict({name: camera for name in self.sensors} | {"proprio": proprio})
        return self.observation_space

    def get_proprioception(self):
        import torch

        return torch.tensor([float(self.env_id), float(len(self.applied))]), {}


class BatchedTask:
    """Stand-in for main's batched task (``task.step(env, action)`` scores every env in one call and takes no
    ``env_indices``, as main's ``BaseTask.step``): env i's reward is ``i + 1``; env i's episode succeeds at its
    ``terminate_at[i]``-th step, counted by the env's step counter (as main's timeout counts)."""

    def __init__(self, terminate_at: dict) -> None:
        self.terminate_at = terminate_at

    def load_observation_space(self):
        import gymnasium as gym

        self.observation_space = gym.spaces.Dict({})
        return self.observation_space

    def post_play_load(self, env):
        pass

    def get_obs(self, env, env_idx=None, flatten_low_dim=True):
        return {}

    def reset(self, env, env_indices=None):
        pass

    def step(self, env, action):
        import torch

        n = env.num_envs
        ends = [i in self.terminate_at and int(env.episode_steps[i]) + 1 >= self.terminate_at[i] for i in range(n)]
        conditions = [{"timeout": {"done": False}, "success": {"done": end}} for end in ends]
        infos = [{"done": {"termination_conditions": c}} for c in conditions]
        return torch.arange(1, n + 1, dtype=torch.float32), torch.tensor(ends), infos


class TiledCameras:
    """Stand-in for main's ``TiledVisionSensor`` (a name 1.1.1 lacks): one batched rgb buffer per camera name
    of the robots, env i's tile filled with ``i + og.sim.current_time`` (so a tile shows the env and the frame)."""

    def __init__(self, scenes: list, sim: Any) -> None:
        self._num_envs = len(scenes)
        self._sim = sim
        self.modalities = {name: ["rgb"] for robot in scenes[0].robots for name in robot.sensors}

    def get_obs(self):
        import torch

        tiles = torch.stack([torch.full((4, 4, 3), i + self._sim.current_time) for i in range(self._num_envs)])
        return {name: {"rgb": tiles.clone()} for name in self.modalities}


class GraphBuilder:
    """Stand-in scene-graph builder of one scene."""

    def step(self, scene):
        pass

    def get_scene_graph(self):
        return None


def multi_scene_environment_class(og):
    """``og.Environment`` for main's seam: main's class, ``__init__`` without ``load()``; reads ``env.num_envs``
    and ``env.automatic_reset`` from the config; ``terminate_at``, ``tiled`` and ``builders`` are set per build."""
    from omnigibson.envs.env_base import Environment

    class SeamMultiSceneEnvironment(Environment):
        terminate_at: dict = {}
        tiled = False
        builders = False
        built: list = []  # every instance, in creation order

        def __init__(self, configs):
            import torch

            SeamMultiSceneEnvironment.built.append(self)

            env_config = configs.get("env", {})
            self.config = configs
            self.num_envs = env_config.get("num_envs", 1)
            self._automatic_reset = env_config.get("automatic_reset", False)
            self._flatten_action_space = True
            self._flatten_obs_space = False
            self._num_rerenders_on_reset = 3
            self.device = "cpu"
            self._external_sensors = None
            self._external_sensors_include_in_obs = None
            self._loaded = False
            self._current_episodes = torch.zeros(self.num_envs, dtype=torch.int32)
            self._current_steps = torch.zeros(self.num_envs, dtype=torch.int32)
            self._held_actions = None  # set by __init__ where patches/main's env_indices patch is applied
            self._scenes = [Scene(SceneRobot(i)) for i in range(self.num_envs)]
            self._task = BatchedTask(dict(type(self).terminate_at))
            self._scene_graph_builders = [GraphBuilder() for _ in self._scenes] if type(self).builders else []
            self._tiled_sensor = TiledCameras(self._scenes, og.sim) if type(self).tiled else None
            self.load_observation_space()
            self._load_action_space()
            self._build_sensor_registry()

    return SeamMultiSceneEnvironment


def install_seam(og, line: Line, monkeypatch) -> tuple[RecordingSim, type]:
    """``og.sim`` is a :class:`RecordingSim` and ``og.Environment`` the seam class of ``line``'s layout (main's
    multi-scene one on main) until ``monkeypatch`` is undone; returns ``(sim, environment class)``."""
    from behavior1k_fast.patching.omnigibson.layout import is_multi_scene

    sim = RecordingSim()
    monkeypatch.setattr(og, "sim", sim)
    multi_scene = is_multi_scene(line.module("omnigibson.envs.env_base").Environment)
    env_cls = (multi_scene_environment_class if multi_scene else seam_environment_class)(og)
    monkeypatch.setattr(og, "Environment", env_cls)
    return sim, env_cls


@pytest.fixture
def seam_og(og, line, monkeypatch):
    """:func:`install_seam` for this test's line: ``(sim, environment class)`` (the backend factory builds
    through ``og.Environment``)."""
    return install_seam(og, line, monkeypatch)


def _seam_action(i: int) -> np.ndarray:
    return np.full(Robot.action_dim, 0.1 * (i + 1), dtype=np.float32)


@pytest.fixture
def seam(og, line, monkeypatch):
    """Factory: ``seam(num_envs, terminate_at={env: step})`` -> a :class:`Harness` over a real, patched
    ``VectorEnvironment`` of this test's line built against the recording ``og.sim``. Apply patches before
    calling it. Single-scene lines only (1.1.1, v3.7: ``Environment`` + ``VectorEnvironment``)."""
    sim, env_cls = install_seam(og, line, monkeypatch)

    def build(num_envs: int = 2, terminate_at: dict | None = None) -> Harness:
        from omnigibson.envs.vec_env_base import VectorEnvironment

        assert hasattr(env_cls, "created"), f"{line.name} has the multi-scene layout: use multi_seam"
        env_cls.terminate_at = dict(terminate_at or {})
        venv = VectorEnvironment(num_envs, {"env": {}})
        harness = Harness(venv, sim, action=_seam_action)
        instrument(harness)
        return harness

    return build


@pytest.fixture
def multi_seam(og, line, monkeypatch):
    """Factory: ``multi_seam(num_envs=3, terminate_at={env: step}, tiled=False, builders=False,
    automatic_reset=False)`` -> a :class:`MultiSceneHarness` over main's real, patched multi-scene
    ``Environment`` (``og.Environment`` here) built against the recording ``og.sim``
    (:func:`build_multi_seam`). Apply patches before calling it. main only."""
    sim, env_cls = install_seam(og, line, monkeypatch)

    def build(*args, **kwargs) -> MultiSceneHarness:
        assert not hasattr(env_cls, "created"), f"{line.name} has the single-scene layout: use seam"
        return build_multi_seam(env_cls, sim, *args, **kwargs)

    return build


def build_multi_seam(env_cls: type, sim: Any, num_envs: int = 3, terminate_at: dict | None = None, tiled: bool = False,
                     builders: bool = False, automatic_reset: bool = False) -> MultiSceneHarness:
    """A :class:`MultiSceneHarness` over ``env_cls`` (from :func:`multi_scene_environment_class`) stepping
    ``sim``: ``num_envs`` scenes, env i's episode ending at its ``terminate_at[i]``-th step, tiled rendering,
    scene-graph builders and automatic reset as asked."""
    env_cls.terminate_at, env_cls.tiled, env_cls.builders = dict(terminate_at or {}), tiled, builders
    env = env_cls(configs={"env": {"num_envs": num_envs, "automatic_reset": automatic_reset}})
    harness = MultiSceneHarness(env, sim, action=_seam_action)
    instrument_multi_scene(harness)
    return harness


@pytest.fixture
def checks():
    return Checks


@pytest.fixture
def multi_checks():
    return MultiSceneChecks


@pytest.fixture(scope="session")
def recording():
    """The recording tools, for harnesses built outside this file (the Isaac Sim tests)."""
    return types.SimpleNamespace(Harness=Harness, instrument=instrument, Checks=Checks,
                                 MultiSceneHarness=MultiSceneHarness, instrument_multi_scene=instrument_multi_scene,
                                 MultiSceneChecks=MultiSceneChecks)


@pytest.fixture
def fast_profile(tmp_path):
    from behavior1k_fast.core.profile import RolloutProfile

    return RolloutProfile(numba_cache_dir=str(tmp_path / "numba"))

