import numpy as np
import pytest

from behavior1k_fast.core.profile import KNOWN_MODALITIES, YAML_MAX_NODES, RolloutProfile, parse_yaml


def test_defaults_are_the_fast_path():
    p = RolloutProfile()
    assert p.remove_headless_viewports and p.skip_intermediate_obs and p.numba_cache and p.gc_enable
    assert p.obs_modalities == ("rgb", "proprio")
    assert p.carb_tasking_threads is not None and p.intra_op_threads is not None


def test_stock_turns_every_optimisation_off():
    s = RolloutProfile.stock()
    assert not s.remove_headless_viewports and not s.skip_intermediate_obs and not s.numba_cache
    assert s.obs_modalities is None and s.pipeline_stages == 1 and s.texture_streaming_budget is None
    assert s.carb_tasking_threads is None and s.intra_op_threads is None


def test_rlinf_keys_have_our_meaning():
    p = RolloutProfile.from_dict(
        {
            "skip_intermediate_obs_in_chunk": False,
            "pipeline_stage_num": 2,
            "num_env_subprocess": 3,
            "total_num_envs": 12,
            "num_action_chunks": 16,
        }
    )
    assert (p.skip_intermediate_obs, p.pipeline_stages, p.num_env_processes) == (False, 2, 3)
    assert (p.total_num_envs, p.chunk_size, p.envs_per_process) == (12, 16, 4)


def test_yaml_string_and_file_round_trip(tmp_path):
    p = RolloutProfile.from_yaml("pipeline_stage_num: 2\nobs_modalities: [rgb, depth, proprio]\n")
    assert p.pipeline_stages == 2 and p.obs_modalities == ("rgb", "depth", "proprio")
    path = tmp_path / "profile.yaml"
    path.write_text("chunk_size: 8\n")
    assert RolloutProfile.from_yaml(path).chunk_size == 8
    assert RolloutProfile.from_dict(p.to_dict()) == p


def test_unknown_key_names_the_key_and_closest_valid_key():
    with pytest.raises(ValueError, match=r"'pipeline_stage_nums'.*'pipeline_stage_num'"):
        RolloutProfile.from_dict({"pipeline_stage_nums": 2})
    with pytest.raises(ValueError, match=r"unknown profile key 'zzz'$"):
        RolloutProfile.from_dict({"zzz": 1})


def test_alias_and_field_given_together_is_an_error():
    with pytest.raises(ValueError, match="given twice"):
        RolloutProfile.from_dict({"pipeline_stages": 2, "pipeline_stage_num": 2})


@pytest.mark.parametrize(
    "key, value, exc, text",
    [
        ("obs_modalities", ["rgb", "dpeth"], ValueError, "'dpeth'.*'depth'"),
        ("obs_modalities", "rgb", TypeError, "obs_modalities"),
        ("obs_modalities", [], ValueError, "obs_modalities"),
        ("obs_modalities", 5, TypeError, "obs_modalities must be a sequence of modality names, got 5"),
        ("obs_modalities", ["rgb", "rgb"], ValueError, "names a modality twice"),
        ("pipeline_stages", 0, ValueError, "pipeline_stages must be an int >= 1, got 0"),
        ("pipeline_stages", 2.0, TypeError, "pipeline_stages must be an int >= 1, got 2.0"),
        ("skip_intermediate_obs", "yes", TypeError, "skip_intermediate_obs must be a bool"),
        ("partition", "round_robin", ValueError, "partition must be one of"),
        ("physics_rescale", "halve", ValueError, "physics_rescale must be one of"),
        ("texture_streaming_budget", 2.0, ValueError, "texture_streaming_budget"),
        ("carb_tasking_threads", -1, ValueError, "carb_tasking_threads must be an int >= 1, got -1"),
    ],
)
def test_bad_values_name_argument_and_value(key, value, exc, text):
    with pytest.raises(exc, match=text):
        RolloutProfile.from_dict({key: value})


def test_numpy_scalars_are_accepted_as_python_values():
    p = RolloutProfile.from_dict({"chunk_size": np.int64(4), "gc_enable": np.bool_(False),
                                  "texture_streaming_budget": np.float32(0.5)})
    assert p.chunk_size == 4 and type(p.chunk_size) is int
    assert p.gc_enable is False and p.texture_streaming_budget == 0.5
    assert RolloutProfile.from_dict(p.to_dict()) == p


def test_total_envs_must_divide_over_processes():
    with pytest.raises(ValueError, match="total_num_envs=5 .* num_env_processes=2"):
        RolloutProfile(total_num_envs=5, num_env_processes=2)


def test_replace_validates_and_accepts_rlinf_names():
    p = RolloutProfile().replace(pipeline_stage_num=2)
    assert p.pipeline_stages == 2
    with pytest.raises(ValueError):
        p.replace(chunk_size=0)


def test_non_mapping_is_a_type_error():
    with pytest.raises(TypeError, match="mapping"):
        RolloutProfile.from_dict(["chunk_size", 2])


def test_known_modalities_include_proprio_and_vision():
    assert "proprio" in KNOWN_MODALITIES and "seg_instance" in KNOWN_MODALITIES


def test_coerce_accepts_profile_mapping_or_none():
    p = RolloutProfile(chunk_size=4)
    assert RolloutProfile.coerce(p) is p
    assert RolloutProfile.coerce({"pipeline_stage_num": 2}).pipeline_stages == 2
    assert RolloutProfile.coerce(None) == RolloutProfile()
    with pytest.raises(TypeError, match="profile must be a RolloutProfile, a mapping or None, got int"):
        RolloutProfile.coerce(3)


def test_from_yaml_tells_a_missing_file_from_yaml_text_and_names_the_line_of_a_syntax_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="profile file 'profiles/fast.yaml' does not exist"):
        RolloutProfile.from_yaml("profiles/fast.yaml")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        RolloutProfile.from_yaml(tmp_path / "absent")
    with pytest.raises(TypeError, match="must hold a mapping of profile keys .*got str 'fast'"):
        RolloutProfile.from_yaml("fast")
    bad = tmp_path / "bad.yaml"
    bad.write_text("chunk_size: 8\nobs_modalities: [rgb, proprio\n")
    with pytest.raises(ValueError, match=rf"{bad}: invalid YAML at line 3, column 1: expected ',' or ']'"):
        RolloutProfile.from_yaml(bad)
    with pytest.raises(ValueError, match="profile YAML text: invalid YAML at line 2, column 13: mapping values"):
        RolloutProfile.from_yaml("chunk_size: 8\n  bad indent: 1\n")
    assert RolloutProfile.from_yaml("{chunk_size: 8}").chunk_size == 8


def alias_bomb(levels: int, width: int = 9) -> str:
    """A profile whose one field is ``levels`` lists of ``width`` aliases of the list before: a few hundred
    bytes that expand to ``width ** levels`` values."""
    lists = [f"&a0 [{', '.join(['x'] * width)}]"]
    lists += [f"&a{i} [{', '.join([f'*a{i - 1}'] * width)}]" for i in range(1, levels + 1)]
    return f"chunk_size: [{', '.join(lists)}]\n"


def test_a_yaml_alias_bomb_is_a_one_line_error_naming_the_file_before_anything_expands_it(tmp_path):
    bomb = alias_bomb(8)
    assert len(bomb) < 500
    with pytest.raises(ValueError, match="profile YAML text: YAML holds more than .* once its aliases are expanded"):
        parse_yaml(bomb, "profile YAML text")
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb)
    with pytest.raises(ValueError, match=f"{path}: YAML holds more than {YAML_MAX_NODES} values") as info:
        RolloutProfile.from_yaml(path)
    assert "\n" not in str(info.value) and len(str(info.value)) < 300


def test_yaml_aliases_within_the_bound_load_and_an_alias_inside_its_own_node_is_refused():
    assert parse_yaml("a: &m [rgb, proprio]\nb: *m\n", "t") == {"a": ["rgb", "proprio"], "b": ["rgb", "proprio"]}
    with pytest.raises(ValueError, match="t: YAML holds more than .* an alias inside the node it names"):
        parse_yaml("a: &m [1, *m]\n", "t")
    with pytest.raises(ValueError, match="t: YAML nested deeper than"):
        parse_yaml("[" * 5000 + "]" * 5000, "t")


def test_a_huge_value_is_cut_short_in_the_error_message():
    with pytest.raises(TypeError, match=r"^chunk_size must be an int >= 1, got \[\[0, 0, ") as info:
        RolloutProfile.from_dict({"chunk_size": [[0] * 1000] * 1000})
    assert len(str(info.value)) < 300
    with pytest.raises(TypeError, match=r"must hold a mapping of profile keys .*got list \['x', ") as info:
        RolloutProfile.from_yaml("[" + ", ".join(["x"] * 10000) + "]")
    assert len(str(info.value)) < 400


def test_the_auto_lead_is_capped_at_a_quarter_of_the_chunk_and_at_least_one_step():
    from behavior1k_fast.core.profile import auto_lead_cap

    assert [auto_lead_cap(n) for n in (1, 2, 4, 7, 8, 32)] == [0, 1, 1, 1, 2, 8]
