"""RolloutProfile: every knob of the fast rollout path in one typed, immutable config.

The defaults are the fast path (slim observation, on-demand observation, capped thread pools, numba cache,
GC on). ``RolloutProfile.stock()`` is the stock BEHAVIOR path with every optimisation off; the ablation
benchmark walks from one to the other.

RLinf key names are accepted with RLinf's meaning: ``skip_intermediate_obs_in_chunk``,
``pipeline_stage_num``, ``num_env_subprocess``, ``total_num_envs`` and ``num_action_chunks``.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

from .checks import (
    check_bool,
    check_choice,
    check_int,
    check_number,
    check_optional_positive_int,
    check_positive_int,
    shown,
)

#: Observation modalities a vision sensor can produce (OmniGibson ``VisionSensor.ALL_MODALITIES``).
VISION_MODALITIES = (
    "rgb",
    "depth",
    "depth_linear",
    "normal",
    "seg_semantic",
    "seg_instance",
    "seg_instance_id",
    "flow",
    "bbox_2d_tight",
    "bbox_2d_loose",
    "bbox_3d",
    "camera_params",
    "pointcloud",
)
#: Non-vision modalities a robot can produce (``proprio`` is the proprioception vector).
OTHER_MODALITIES = ("proprio", "scan", "occupancy_grid")
KNOWN_MODALITIES = VISION_MODALITIES + OTHER_MODALITIES

#: How physics frequency follows the stage count K (see ``behavior1k_fast.core.frequencies``).
PHYSICS_RESCALE_MODES = ("none", "divide_physics", "preserve_sim_time")
#: How envs are grouped into pipeline stages (see ``behavior1k_fast.rollout``).
PARTITION_MODES = ("hybrid", "process")
#: When the rollout engine sends a chunk (see ``behavior1k_fast.rollout.schedule``; ``lookahead``: the next chunk
#: is chosen from an observation read ``lookahead_steps`` before the current chunk ends, ``rollout.chunk``).
SCHEDULES = ("barrier", "async", "lookahead")
#: ``lookahead_steps`` value: the lead is derived from measured step and policy times, up to
#: :func:`auto_lead_cap`.
AUTO_LEAD = "auto"
#: The longest ``auto`` lead, as a fraction of the chunk (:func:`auto_lead_cap`).
AUTO_LEAD_MAX_FRACTION = 0.25


def auto_lead_cap(chunk_size: int) -> int:
    """The longest lead ``lookahead_steps="auto"`` picks for chunks of ``chunk_size`` steps: a quarter of the
    chunk, at least 1 (0 for a chunk of 1 step). Each step of a lead is a step the policy acts without seeing:
    in the delay sweep of ``benchmarks/time_to_train.py`` (``benchmarks/README.md``, 5 seeds) no lead of half
    the chunk or more reached the target, and every shorter one cost more samples to it (1.57x and more) than
    a lead can save in seconds ((N + d) / N at one stage). So the cap bounds how far ``auto`` goes to hide a
    forward in rollouts and evaluation; training is best served by lead 0, the profile's default. Where the
    forward needs a longer lead to be hidden, the rest of it is a stall
    (``RolloutStats.stall_seconds_per_worker``)."""
    return min(chunk_size - 1, max(1, int(chunk_size * AUTO_LEAD_MAX_FRACTION)))

#: Kit's built-in ``/rtx/descriptorSets``, which OmniGibson's trimmed ``.kit`` experience inherits (BEHAVIOR-1K
#: #2152; Isaac Sim's own extensions set 360000): the least ``rtx_descriptor_sets`` may be.
RTX_DESCRIPTOR_SETS_UPSTREAM = 10000
#: Render-quality knobs (``None``: upstream's setting; a bool changes pixels).
RENDER_QUALITY_FIELDS = ("rtx_reflections", "rtx_indirect_diffuse", "rtx_ambient_occlusion", "rtx_sampled_lighting")

#: RLinf key -> our field. Same meaning, other name.
RLINF_ALIASES = {
    "skip_intermediate_obs_in_chunk": "skip_intermediate_obs",
    "pipeline_stage_num": "pipeline_stages",
    "num_env_subprocess": "num_env_processes",
    "num_action_chunks": "chunk_size",
}
#: Fields :meth:`RolloutProfile.to_yaml` always writes (the layout), default or not.
_YAML_LAYOUT_KEYS = ("skip_intermediate_obs", "pipeline_stages", "num_env_processes", "total_num_envs", "chunk_size",
                     "partition", "schedule")


def _default_numba_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "behavior1k_fast", "numba")


@dataclass(frozen=True)
class RolloutProfile:
    """Every knob of the fast path. Times in the simulator's own units; frequencies in Hz."""

    # --- feature slimming -------------------------------------------------------------------------
    #: Headless runs create no viewport per camera and no viewer camera (upstream PR #2117 semantics).
    remove_headless_viewports: bool = True
    #: Modalities the policy consumes. ``None`` keeps whatever the env config asks for (stock).
    obs_modalities: tuple[str, ...] | None = ("rgb", "proprio")

    # --- on-demand observation ------------------------------------------------------------------
    #: Inside a chunk, render and read observations only at the chunk boundary (and at episode end).
    skip_intermediate_obs: bool = True
    #: Actions per chunk the policy emits (RLinf ``num_action_chunks``).
    chunk_size: int = 32
    #: Renders at the chunk boundary before the observation is read (RTX lags physics by frames).
    boundary_rerenders: int = 1

    # --- hybrid-partition pipeline --------------------------------------------------------------
    #: Pipeline stages K (RLinf ``pipeline_stage_num``). 1 = no pipeline.
    pipeline_stages: int = 1
    #: Env worker processes P (RLinf ``num_env_subprocess``).
    num_env_processes: int = 1
    #: Total envs over all processes (RLinf ``total_num_envs``); ``None`` = one env per process.
    total_num_envs: int | None = None
    #: ``hybrid``: stage k is slice k of every process; ``process``: stage k is a set of whole processes.
    partition: str = "hybrid"
    #: How physics frequency follows K: ``none``, ``divide_physics`` (RLinf) or ``preserve_sim_time``.
    physics_rescale: str = "divide_physics"
    #: ``barrier``: a stage's chunk goes out to all its processes at once, once all of them returned the last
    #: one; ``async``: each slice's chunk goes out as soon as the policy ran on a batch holding it;
    #: ``lookahead`` (K = 1, or K stages with ``partition="process"``): each chunk is chosen from observations
    #: read ``lookahead_steps`` before the previous chunk ends, while those steps run
    #: (``behavior1k_fast.rollout.chunk``).
    schedule: str = "barrier"
    #: ``async``: envs a policy batch waits for (``None``: one stage's envs, the barrier's batch).
    async_min_batch: int | None = None
    #: ``async``: seconds a ready slice waits for others to fill the batch before the policy runs anyway.
    async_max_wait_s: float = 0.005
    #: ``lookahead``: the lead d, actions of a chunk still to run once its lead observation was read
    #: (``0 <= d < chunk_size``; 0: read at the chunk's end, today's barrier with K = 1) or ``"auto"``
    #: (the smallest d whose d steps cover the policy's forward and transfer, measured).
    lookahead_steps: int | str = 0

    # --- thread caps (None = leave the library default) ---------------------------------------
    #: Kit ``/plugins/carb.tasking.plugin/threadCount``.
    carb_tasking_threads: int | None = 8
    #: Kit ``/plugins/omni.tbb.globalcontrol/maxThreadCount``.
    tbb_max_threads: int | None = 4
    #: Kit ``/persistent/physics/numThreads`` (PhysX CPU workers).
    physx_worker_threads: int | None = 4
    #: OMP / MKL / OpenBLAS threads and torch intra-op threads in each env process.
    intra_op_threads: int | None = 1

    # --- runtime --------------------------------------------------------------------------------
    #: numba ``cache=True`` for the controller kernels.
    numba_cache: bool = True
    #: Writable numba cache dir (``NUMBA_CACHE_DIR``); default ``~/.cache/behavior1k_fast/numba``.
    numba_cache_dir: str = field(default_factory=_default_numba_cache_dir)
    #: Re-enable Python's GC after the simulator launched (Kit disables it).
    gc_enable: bool = True
    #: ``/rtx-transient/resourcemanager/texturestreaming/memoryBudget`` after launch (fraction of VRAM).
    texture_streaming_budget: float | None = 0.1

    # --- Kit launch ---------------------------------------------------------------------------------
    #: Kit ``/rtx/descriptorSets`` (the RTX descriptor-pool cap) on the launch command line: an int (at least
    #: :data:`RTX_DESCRIPTOR_SETS_UPSTREAM`), ``"auto"`` (sized from the envs per process x
    #: ``cameras_per_env``, never below upstream's) or ``None`` (upstream's: Kit's built-in default).
    rtx_descriptor_sets: int | str | None = "auto"
    #: Cameras (render products) per env, robot cameras and external sensors; sizes ``rtx_descriptor_sets="auto"``
    #: (R1Pro, BEHAVIOR's robot, carries 3).
    cameras_per_env: int = 3
    #: Kit gets the script name as ``argv[0]`` where upstream's ``_launch_app`` clears ``sys.argv`` to ``[]``
    #: (Kit otherwise drops the first launch argument; BEHAVIOR-1K #2178).
    keep_launch_argv0: bool = True
    #: Isaac Lab 3.0's headless-rendering Kit settings that keep the frame read at a chunk boundary the current
    #: one (synchronous Replicator rendering, renderer and Hydra wait-idle, wait for Hydra's render to complete)
    #: and switch off what a headless run does not use (the Replicator orchestrator, the present thread):
    #: ``behavior1k_fast.patching.omnigibson.runtime.HEADLESS_RENDER_SETTINGS``. ``False``: upstream's.
    headless_render_settings: bool = False
    #: RTX reflections after the simulator set its renderer settings (``None``: upstream's). Changes pixels.
    rtx_reflections: bool | None = None
    #: RTX indirect diffuse lighting (``None``: upstream's). Changes pixels.
    rtx_indirect_diffuse: bool | None = None
    #: RTX ambient occlusion (``None``: upstream's). Changes pixels.
    rtx_ambient_occlusion: bool | None = None
    #: RTX sampled direct lighting (``None``: upstream's). Changes pixels.
    rtx_sampled_lighting: bool | None = None

    # --- placement --------------------------------------------------------------------------------
    #: GPUs of the env workers as CUDA numbers them where the engine runs; worker w runs on
    #: ``gpu_ids[w % len(gpu_ids)]`` (``behavior1k_fast.core.gpus``). ``None``: no binding.
    gpu_ids: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, _check_field(f.name, getattr(self, f.name)))
        if self.total_num_envs is not None and self.total_num_envs % self.num_env_processes:
            raise ValueError(
                f"total_num_envs={self.total_num_envs} is not divisible by "
                f"num_env_processes={self.num_env_processes}"
            )
        self._check_lookahead()

    def _check_lookahead(self) -> None:
        """The lookahead knobs against the layout: one stage or stages of whole processes (every env steps at
        every global step), a lead shorter than the chunk, and a lead only where the schedule is ``lookahead``."""
        if self.schedule == "lookahead" and self.pipeline_stages != 1 and self.partition != "process":
            raise ValueError(
                f"schedule='lookahead' needs pipeline_stages=1 or partition='process' (every env steps at every "
                f"global step), got pipeline_stages={self.pipeline_stages} with partition={self.partition!r}"
            )
        if self.lookahead_steps != AUTO_LEAD and self.lookahead_steps >= self.chunk_size:
            raise ValueError(
                f"lookahead_steps={self.lookahead_steps} must be < chunk_size={self.chunk_size} "
                "(the lead observation is read inside the chunk)"
            )
        if self.lookahead_steps != 0 and self.schedule != "lookahead":
            raise ValueError(
                f"lookahead_steps={self.lookahead_steps!r} needs schedule='lookahead', got schedule={self.schedule!r}"
            )

    # --- constructors -----------------------------------------------------------------------------
    @classmethod
    def stock(cls, **overrides: Any) -> "RolloutProfile":
        """The stock BEHAVIOR path: every optimisation off."""
        base = dict(
            remove_headless_viewports=False,
            obs_modalities=None,
            skip_intermediate_obs=False,
            pipeline_stages=1,
            carb_tasking_threads=None,
            tbb_max_threads=None,
            physx_worker_threads=None,
            intra_op_threads=None,
            numba_cache=False,
            gc_enable=False,
            texture_streaming_budget=None,
            rtx_descriptor_sets=None,
            keep_launch_argv0=False,
        )
        base.update(overrides)
        return cls.from_dict(base)

    @classmethod
    def rlinf(cls, **overrides: Any) -> "RolloutProfile":
        """The fast path for RLinf's BEHAVIOR env worker (``rlinf.envs.behavior.behavior_env.BehaviorProcess``,
        rlinf 0.3.0), leaving out what that worker does itself so nothing is done twice: it calls
        ``gc.enable()`` once its env is built and sets the texture-streaming budget to 0.1 after launch
        (``apply_runtime_renderer_settings``). The intra-op thread cap is left off too: RLinf passes the
        launch shell's environment to every worker, so the variable that applies this profile also reaches
        the trainer and rollout workers, whose torch thread pools must not shrink to 1."""
        base: dict[str, Any] = dict(gc_enable=False, texture_streaming_budget=None, intra_op_threads=None)
        base.update(overrides)
        return cls.from_dict(base)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "RolloutProfile":
        """Build from a flat mapping; RLinf key names are accepted; unknown keys are an error."""
        if not isinstance(data, Mapping):
            raise TypeError(f"profile data must be a mapping, got {type(data).__name__}")
        valid = {f.name for f in dataclasses.fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in data.items():
            name = RLINF_ALIASES.get(key, key)
            if name not in valid:
                close = difflib.get_close_matches(str(key), sorted(valid | set(RLINF_ALIASES)), n=1)
                hint = f"; did you mean {close[0]!r}?" if close else ""
                if key in ("rollout", "env", "actor"):  # tune --format rlinf's nested keys (tools/rlinf_keys.py)
                    hint = ("; these are RLinf's nested config keys (tune's .rlinf.yaml, to merge into an RLinf "
                            "config): a profile, and BEHAVIOR1K_FAST, take the flat YAML (tune's tune_<tag>.yaml)")
                raise ValueError(f"unknown profile key {shown(key)}{hint}")
            if name in kwargs:
                raise ValueError(f"profile key {key!r} given twice (as {name!r} and an alias)")
            kwargs[name] = value
        return cls(**kwargs)

    @classmethod
    def coerce(cls, profile: "RolloutProfile | Mapping[str, Any] | None") -> "RolloutProfile":
        """A profile from a profile, a mapping (RLinf names accepted) or ``None`` (the fast path)."""
        if profile is None:
            return cls()
        if isinstance(profile, cls):
            return profile
        if isinstance(profile, Mapping):
            return cls.from_dict(profile)
        raise TypeError(f"profile must be a RolloutProfile, a mapping or None, got {type(profile).__name__}")

    @classmethod
    def from_yaml(cls, source: str | os.PathLike) -> "RolloutProfile":
        """Build from a YAML file or YAML text holding a flat mapping.

        ``source`` is a file path when it is an ``os.PathLike``, or a one-line string that names an existing
        file or ends in ``.yaml`` / ``.yml``; any other string is YAML text. A path that does not exist
        raises ``FileNotFoundError``; YAML that does not parse raises ``ValueError`` naming the file and
        line; anything but a mapping raises ``TypeError``."""
        if isinstance(source, os.PathLike) or (
            isinstance(source, str) and "\n" not in source
            and (os.path.exists(source) or source.endswith((".yaml", ".yml")))
        ):
            where = os.fspath(source)
            try:
                with open(where, encoding="utf-8") as fh:
                    text = fh.read()
            except FileNotFoundError:
                raise FileNotFoundError(f"profile file {where!r} does not exist") from None
        elif isinstance(source, str):
            where, text = "profile YAML text", source
        else:
            raise TypeError(f"from_yaml needs a file path or YAML text, got {type(source).__name__}")
        data = parse_yaml(text, where)
        if data is not None and not isinstance(data, Mapping):
            raise TypeError(f"{where} must hold a mapping of profile keys (or name an existing profile file), got "
                            f"{type(data).__name__} {shown(data)}")
        return cls.from_dict(data or {})

    def to_yaml(self, path: str | os.PathLike | None = None, header: str = "") -> str:
        """This profile as YAML that :meth:`from_yaml` reads back equal: the layout keys and every field that
        differs from ``RolloutProfile()``, under RLinf's key names where RLinf has the key; ``header`` as
        comment lines first. Written to ``path`` when given; the text either way."""
        import yaml

        defaults = RolloutProfile().to_dict()
        rlinf = {ours: theirs for theirs, ours in RLINF_ALIASES.items()}
        data = {rlinf.get(k, k): v for k, v in self.to_dict().items() if k in _YAML_LAYOUT_KEYS or v != defaults[k]}
        text = "".join(f"# {line}\n" for line in header.splitlines()) + yaml.safe_dump(data, sort_keys=False)
        if path is not None:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
        return text

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        for key in ("obs_modalities", "gpu_ids"):
            if data[key] is not None:
                data[key] = list(data[key])
        return data

    def replace(self, **changes: Any) -> "RolloutProfile":
        """A copy with some knobs changed (validated; RLinf names accepted)."""
        data = self.to_dict()
        data.update({RLINF_ALIASES.get(k, k): v for k, v in changes.items()})
        return type(self).from_dict(data)

    @property
    def envs_per_process(self) -> int:
        return (self.total_num_envs or self.num_env_processes) // self.num_env_processes

    @property
    def stages_sharing_physics(self) -> int:
        """Stages whose envs share one worker's physics, the count a backend rescales its frequencies for
        (``core.frequencies.rescale_for_stages``): K = ``pipeline_stages`` in hybrid partition (every process
        holds a slice of each stage), 1 in process partition (a stage is whole processes)."""
        return self.pipeline_stages if self.partition == "hybrid" else 1


#: Nodes a YAML document may hold once its aliases are expanded: a profile or a backend config has tens to
#: hundreds, while an alias bomb of a few hundred bytes (nested lists of aliases of lists) expands to billions.
YAML_MAX_NODES = 100_000


def parse_yaml(text: str, where: str) -> Any:
    """``yaml.safe_load(text)`` with alias expansion bounded: a syntax error, a document that holds more than
    :data:`YAML_MAX_NODES` nodes once its aliases are expanded (or an alias inside the node it names), or
    one nested too deep is a one-line ``ValueError`` naming ``where`` (a file, or what the text is); a
    syntax error names the line and the column."""
    import yaml

    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_nodes(node, YAML_MAX_NODES) > YAML_MAX_NODES:
            raise ValueError(f"{where}: YAML holds more than {YAML_MAX_NODES} values once its aliases are expanded "
                             "(an alias bomb, or an alias inside the node it names)")
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ValueError(f"{where}: invalid YAML{at}: {problem}") from None
    except RecursionError:
        raise ValueError(f"{where}: YAML nested deeper than Python's recursion limit") from None
    finally:
        loader.dispose()


def _expanded_nodes(root: Any, limit: int) -> int:
    """Nodes under the composed YAML node ``root`` (itself included) with every alias expanded, counted up
    to ``limit + 1`` (a cycle counts as ``limit + 1``); each distinct node is visited once."""
    import yaml

    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()  # on the path from root: meeting one again is a cycle
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = list(node.value)
        else:
            children = []
        if done:
            open_nodes.discard(id(node))
            sizes[id(node)] = min(limit + 1, 1 + sum(sizes[id(c)] for c in children))
            continue
        if id(node) in sizes:
            continue
        if id(node) in open_nodes:
            return limit + 1
        open_nodes.add(id(node))
        stack.append((node, True))
        stack.extend((c, False) for c in children)
    return sizes[id(root)]


_BOOL_FIELDS = {
    "remove_headless_viewports",
    "skip_intermediate_obs",
    "numba_cache",
    "gc_enable",
    "keep_launch_argv0",
    "headless_render_settings",
}
_INT_FIELDS = {"chunk_size", "boundary_rerenders", "pipeline_stages", "num_env_processes", "cameras_per_env"}
_OPTIONAL_INT_FIELDS = {
    "async_min_batch",
    "total_num_envs",
    "carb_tasking_threads",
    "tbb_max_threads",
    "physx_worker_threads",
    "intra_op_threads",
}


def _check_field(name: str, value: Any) -> Any:
    """The validated value of field ``name`` (numpy scalars become Python ones)."""
    if name in _BOOL_FIELDS:
        return check_bool(name, value)
    if name in _INT_FIELDS:
        return check_positive_int(name, value)
    if name in _OPTIONAL_INT_FIELDS:
        return check_optional_positive_int(name, value)
    if name == "obs_modalities":
        return None if value is None else _check_modalities(value)
    if name == "partition":
        return check_choice(name, value, PARTITION_MODES)
    if name == "physics_rescale":
        return check_choice(name, value, PHYSICS_RESCALE_MODES)
    if name == "numba_cache_dir":
        if not isinstance(value, str) or not value:
            raise TypeError(f"numba_cache_dir must be a non-empty path string, got {shown(value)}")
        return value
    if name == "texture_streaming_budget":
        return None if value is None else check_number(name, value, 0.0, 1.0)
    if name == "schedule":
        return check_choice(name, value, SCHEDULES)
    if name == "async_max_wait_s":
        return check_number(name, value, 0.0, 60.0, unit="of seconds")
    if name == "gpu_ids":
        return None if value is None else _check_gpu_ids(value)
    if name in RENDER_QUALITY_FIELDS:
        return None if value is None else check_bool(name, value)
    if name == "rtx_descriptor_sets":
        if value is None or value == "auto":
            return value
        if isinstance(value, str):
            raise ValueError(f"rtx_descriptor_sets must be an int >= {RTX_DESCRIPTOR_SETS_UPSTREAM}, 'auto' or None, "
                             f"got {shown(value)}")
        return check_int(name, value, RTX_DESCRIPTOR_SETS_UPSTREAM)
    if name == "lookahead_steps":
        if isinstance(value, str):
            if value == AUTO_LEAD:
                return value
            raise ValueError(f"lookahead_steps must be an int >= 0 or {AUTO_LEAD!r}, got {shown(value)}")
        try:
            return check_int(name, value, 0)
        except (TypeError, ValueError) as exc:
            raise type(exc)(f"lookahead_steps must be an int >= 0 or {AUTO_LEAD!r}, got {shown(value)}") from None
    raise AssertionError(f"field {name!r} has no check")  # a new field must get one


def _check_modalities(value: Any) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable) or not all(isinstance(m, str) for m in value):
        raise TypeError(f"obs_modalities must be a sequence of modality names, got {shown(value)}")
    value = tuple(value)
    for m in value:
        if m not in KNOWN_MODALITIES:
            close = difflib.get_close_matches(m, KNOWN_MODALITIES, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"unknown modality {shown(m)} in obs_modalities{hint}")
    if not value:
        raise ValueError("obs_modalities must name at least one modality, got an empty sequence")
    if len(set(value)) != len(value):
        raise ValueError(f"obs_modalities={list(value)} names a modality twice")
    return value


def _check_gpu_ids(value: Any) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise TypeError(f"gpu_ids must be a sequence of GPU indices, got {shown(value)}")
    value = tuple(check_int("gpu_ids entry", v, 0) for v in value)
    if not value:
        raise ValueError("gpu_ids must name at least one GPU, got an empty sequence (None: no binding)")
    if len(set(value)) != len(value):
        raise ValueError(f"gpu_ids={list(value)} names a GPU twice")
    return value
