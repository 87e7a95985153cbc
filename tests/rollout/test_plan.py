import numpy as np
import pytest

from behavior1k_fast import RolloutProfile
from behavior1k_fast.rollout import PartitionPlan


def test_hybrid_stage_k_is_slice_k_of_every_process():
    plan = PartitionPlan(num_env_processes=2, envs_per_process=4, pipeline_stages=2, partition="hybrid")
    assert plan.stage_size == 4 and plan.stages_sharing_physics == 2
    assert plan.stage_envs(0).tolist() == [0, 1, 4, 5]
    assert plan.stage_envs(1).tolist() == [2, 3, 6, 7]
    assert [(s.worker, s.local_envs) for s in plan.stage_slices(1)] == [(0, (2, 3)), (1, (2, 3))]


def test_process_stage_k_is_a_set_of_whole_processes():
    plan = PartitionPlan(num_env_processes=4, envs_per_process=2, pipeline_stages=2, partition="process")
    assert plan.stages_sharing_physics == 1
    assert plan.stage_envs(0).tolist() == [0, 1, 2, 3]
    assert plan.stage_envs(1).tolist() == [4, 5, 6, 7]
    assert [s.worker for s in plan.stage_slices(1)] == [2, 3]


def test_every_env_in_exactly_one_stage():
    for mode, (p, e, k) in (("hybrid", (3, 6, 3)), ("process", (6, 2, 3))):
        plan = PartitionPlan(p, e, k, mode)
        envs = np.concatenate([plan.stage_envs(s) for s in range(k)])
        assert sorted(envs.tolist()) == list(range(p * e))


def test_rlinf_names_build_the_plan():
    profile = RolloutProfile.from_dict(
        {"pipeline_stage_num": 2, "num_env_subprocess": 2, "total_num_envs": 8, "skip_intermediate_obs_in_chunk": False}
    )
    plan = PartitionPlan.from_profile(profile)
    assert (plan.num_env_processes, plan.envs_per_process, plan.pipeline_stages, plan.partition) == (2, 4, 2, "hybrid")
    assert profile.skip_intermediate_obs is False


@pytest.mark.parametrize(
    "args, words",
    [
        ((2, 3, 2, "hybrid"), ["pipeline_stages=2", "envs_per_process=3"]),
        ((3, 2, 2, "process"), ["pipeline_stages=2", "num_env_processes=3"]),
        ((2, 2, 0, "hybrid"), ["pipeline_stages", "0"]),
        ((2, 2, 1, "pipelined"), ["partition", "pipelined"]),
    ],
)
def test_invalid_combinations_name_the_values(args, words):
    with pytest.raises(ValueError) as info:
        PartitionPlan(*args)
    for word in words:
        assert word in str(info.value)


def test_stage_out_of_range_or_not_an_int():
    with pytest.raises(ValueError, match="stage must be an int in \\[0, 1\\], got 2"):
        PartitionPlan(1, 2, 2).stage_slices(2)
    with pytest.raises(TypeError, match="stage must be an int in \\[0, 1\\], got '1'"):
        PartitionPlan(1, 2, 2).stage_slices("1")


def test_the_count_of_stages_sharing_physics_has_one_name():
    hybrid = RolloutProfile(num_env_processes=2, total_num_envs=8, pipeline_stages=2)
    process = hybrid.replace(partition="process")
    assert (hybrid.stages_sharing_physics, process.stages_sharing_physics) == (2, 1)
    assert process.pipeline_stages == 2  # K, the driver's stages, whatever the partition
    plan = PartitionPlan.from_profile(process)
    assert plan.stages_sharing_physics == process.stages_sharing_physics == 1
    assert (plan.num_env_processes, plan.partition) == (2, "process")
    assert not [old for old in ("stages_per_process", "num_processes", "mode", "worker_profile") if hasattr(plan, old)]
