"""A factory whose module notes, when imported, which profile the process had applied by then; it names the
OmniGibson patch set (as the OmniGibson backend's factory does), so a worker applies that first."""

from behavior1k_fast.patching.omnigibson import active_profile

from .pointmass import PointMassFactory

PROFILE_AT_IMPORT = active_profile()


class ProbeFactory(PointMassFactory):
    patch_set = "behavior1k_fast.patching.omnigibson"

    def __call__(self, num_envs, seed, profile):
        if PROFILE_AT_IMPORT != profile:
            raise RuntimeError(f"module imported with profile {PROFILE_AT_IMPORT!r}, before the worker's {profile!r}")
        return super().__call__(num_envs, seed, profile)
