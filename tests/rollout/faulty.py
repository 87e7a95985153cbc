"""Fault injection for the engine tests: a point-mass backend whose worker hangs, crashes or raises on purpose,
and reports the environment variables its process sees."""

from __future__ import annotations

import ctypes
import os
import signal
import time
from dataclasses import dataclass, field

import numpy as np

from .pointmass import PointMassFactory

#: Where a fault strikes: building the backend, a reset request, a step of a chunk.
WHERE = ("init", "reset", "chunk")
#: What it does: block forever, die of SIGSEGV, exit at once (no cleanup), raise.
HOW = ("hang", "segv", "exit", "raise")
#: A further fault, not in :data:`HOW`: say so on stdout, then block in native code that holds the GIL (a
#: simulator stuck in C++), where no Python thread of the process runs any more.
HOLD_GIL = "hold-gil"


def misbehave(how: str) -> None:
    if how == "hang":
        time.sleep(3600)  # until the driver stops this process
    elif how == HOLD_GIL:
        print(HOLD_GIL, flush=True)
        ctypes.PyDLL(None).sleep(3600)  # libc's sleep through PyDLL: the GIL stays held
    elif how == "segv":
        os.kill(os.getpid(), signal.SIGSEGV)
    elif how == "exit":
        os._exit(3)
    raise RuntimeError("fault injected on purpose")


@dataclass(frozen=True)
class FaultyFactory:
    """Point-mass backends; the workers built with a seed in ``seeds`` (engine seed + worker index) fault
    ``how`` at ``where`` (every time: a respawned worker faults again). ``after_steps``: steps a faulty
    backend finishes before a chunk fault. ``report_env``: variables every step's info carries, under
    ``"env"``."""

    where: str = "chunk"
    how: str = "hang"
    seeds: tuple[int, ...] = (1,)
    after_steps: int = 0
    report_env: tuple[str, ...] = ()
    base: PointMassFactory = field(default_factory=PointMassFactory)

    def __call__(self, num_envs, seed, profile):
        faulty = seed in self.seeds
        if faulty and self.where == "init":
            misbehave(self.how)
        return FaultyBackend(self.base(num_envs, seed, profile), self, faulty)


class FaultyBackend:
    def __init__(self, inner, config, faulty):
        self.inner = inner
        self.config = config
        self.faulty = faulty
        self.num_envs = inner.num_envs
        self.action_space = inner.action_space
        self.observation_space = inner.observation_space
        self.steps = 0

    @property
    def sim_time(self):
        return self.inner.sim_time

    def step(self, actions, env_indices=None, get_obs=True, render=True):
        if self.faulty and self.config.where == "chunk" and self.steps >= self.config.after_steps:
            misbehave(self.config.how)
        self.steps += 1
        obs, rewards, terminated, truncated, infos = self.inner.step(actions, env_indices, get_obs, render)
        for info in infos:
            info["env"] = {name: os.environ.get(name) for name in self.config.report_env}
        return obs, rewards, terminated, truncated, infos

    def reset(self, env_indices=None, get_obs=True):
        if self.faulty and self.config.where == "reset":
            misbehave(self.config.how)
        return self.inner.reset(env_indices, get_obs)

    def observe(self, env_indices=None, render=True):
        return self.inner.observe(env_indices, render)

    def close(self):
        self.inner.close()


@dataclass(frozen=True)
class LoudFactory:
    """Point-mass backends whose step observations put ``value`` (float64) into ``key`` of every env."""

    key: str = "proprio"
    value: float = 1e300
    base: PointMassFactory = field(default_factory=PointMassFactory)

    def __call__(self, num_envs, seed, profile):
        return LoudBackend(self.base(num_envs, seed, profile), self)


class LoudBackend(FaultyBackend):
    def __init__(self, inner, config):
        super().__init__(inner, FaultyFactory(), faulty=False)
        self.loud = config

    def step(self, actions, env_indices=None, get_obs=True, render=True):
        obs, rewards, terminated, truncated, infos = super().step(actions, env_indices, get_obs, render)
        for ob in obs if get_obs else ():
            ob[self.loud.key] = np.full(np.shape(ob[self.loud.key]), self.loud.value)
        return obs, rewards, terminated, truncated, infos


@dataclass(frozen=True)
class EchoFactory:
    """Point-mass backends whose step info carries the action row each env got at that step, as the
    backend received it (``info["action"]``; a chunk result keeps the info of its last applied step)."""

    base: PointMassFactory = field(default_factory=PointMassFactory)

    def __call__(self, num_envs, seed, profile):
        return EchoBackend(self.base(num_envs, seed, profile), FaultyFactory(), faulty=False)


class EchoBackend(FaultyBackend):
    def step(self, actions, env_indices=None, get_obs=True, render=True):
        obs, rewards, terminated, truncated, infos = super().step(actions, env_indices, get_obs, render)
        for info, action in zip(infos, actions):
            info["action"] = np.array(action)
        return obs, rewards, terminated, truncated, infos
