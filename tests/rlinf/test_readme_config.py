"""The RLinf page's (docs/rlinf.md) config lines mean what it says to RLinf 0.3.0's own config code."""

from __future__ import annotations

import re

from .conftest import README


def rlinf_config():
    from omegaconf import OmegaConf

    section = README.read_text().split("## Use with RLinf", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```yaml\n(.*?)```", section, flags=re.S)
    return OmegaConf.create(block)


def test_cluster_lines_give_the_variable_to_the_env_node_group_only():
    from rlinf.scheduler.cluster.config import ClusterConfig
    from rlinf.scheduler.cluster.node import NodeGroupInfo

    cluster = ClusterConfig.from_dict_cfg(rlinf_config().cluster)
    (group,) = cluster.node_groups
    env_group = cluster.component_placement["env,rollout"]["node_group"]
    assert group.label == env_group and cluster.get_node_labels_by_rank(1) == [env_group]
    info = NodeGroupInfo(label=group.label, nodes=[], env_configs=group.env_configs)
    assert info.get_node_env_vars(1) == {"BEHAVIOR1K_FAST": "rlinf"} and info.get_node_env_vars(0) == {}


def test_env_lines_are_the_keys_rlinf_reads():
    from omegaconf import OmegaConf

    # RLinf's EnvWorker builds BehaviorEnv with cfg.env.train / cfg.env.eval, whose BehaviorProcessPool and
    # BehaviorProcess select the key there; its stage count is cfg.rollout.pipeline_stage_num.
    config = rlinf_config()
    for split in ("train", "eval"):
        assert OmegaConf.select(config.env[split], "skip_intermediate_obs_in_chunk", default=False) is True
    assert config.rollout.pipeline_stage_num == 2
