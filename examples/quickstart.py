import numpy as np
from behavior1k_fast import RolloutProfile
from behavior1k_fast.reference import ReferenceFactory
from behavior1k_fast.rollout import RolloutEngine

def policy(obs):  # a batch of observations (dict of arrays) -> actions [batch, chunk, action_dim]
    return np.random.uniform(-1, 1, (len(obs["proprio"]), 8, 11)).astype(np.float32)

if __name__ == "__main__":  # the env workers are spawned processes: they import this file
    profile = RolloutProfile(total_num_envs=4, num_env_processes=2, pipeline_stages=2, chunk_size=8)
    with RolloutEngine(ReferenceFactory(), profile) as engine:  # 2 processes x 2 envs, K = 2 stages
        stats = engine.rollout(policy, num_rounds=4)
    print(f"{stats.env_steps_per_second:.0f} env steps/s, {int(stats.own_actions.sum())} actions taken")
