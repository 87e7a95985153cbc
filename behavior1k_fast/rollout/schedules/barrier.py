"""The barrier schedule (``schedule="barrier"``, the default): stage by stage.

Stage k's chunk is sent to all of its slices together and received together (the barrier: the policy of
stage k waits for the slowest process of the stage). With ``overlap`` (default) stage k's next chunk goes
out right after its last one came back, while the other stages step; ``overlap=False`` is the serial
baseline (the driver waits for each stage's chunk before it runs the next forward: nothing steps during a
forward; the same chunks in the same order on every worker, so the same trajectories).
"""

from __future__ import annotations

from .base import Schedule


class Barrier(Schedule):
    """Stage by stage (module docs)."""

    name = "barrier"
    serial_baseline = True

    def send(self, stage: int) -> None:
        """The policy on ``stage``'s boundary observations, its chunk to the stage's slices."""
        driver = self.driver
        obs = driver.stage_obs(stage)
        actions, extras = driver.forward(self.policy, obs, f"policy output for stage {stage}")
        driver.send(driver.plan.stage_slices(stage), actions, obs, extras)

    def run(self) -> None:
        stages = self.driver.plan.pipeline_stages
        total = self.num_rounds * stages
        if self.overlap:
            for k in range(stages):
                self.send(k)
        for i in range(total):
            k = i % stages
            if not self.overlap:
                self.send(k)
            self.deliver(k, self.driver.collect(self.driver.plan.stage_slices(k)))
            if self.overlap and i + stages < total:
                self.send(k)
