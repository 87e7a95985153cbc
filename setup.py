import os
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

here = Path(__file__).parent
version = {}
for line in (here / "behavior1k_fast" / "core" / "__init__.py").read_text().splitlines():
    if line.startswith("__version__"):
        version["v"] = line.split("=")[1].strip().strip('"')

# What `import omnigibson==1.1.1` needs on a CPU machine besides CPU torch (its metadata omits torch and
# pins numpy<2); the integration tests drive the real OmniGibson classes.
OMNIGIBSON_IMPORT = [
    "numpy<2",
    "h5py",
    "addict",
    "imageio",
    "ipython",
    "scipy",
    "termcolor",
    "trimesh",
    "progressbar",
    "cryptography",
    "bddl~=3.5",
    "opencv-python-headless",
    "aenum",
    "nest_asyncio",
]

# The auto-apply hook (behavior1k_fast/patching/autoapply.py): shipped in the package, installed at the root
# of site-packages, where Python's site runs it in every interpreter.
AUTOAPPLY_PTH_SOURCE = "behavior1k_fast/patching/autoapply.pth"
AUTOAPPLY_PTH_NAME = "behavior1k_fast_autoapply.pth"


class BuildPyWithAutoApplyPth(build_py):
    """``build_py`` that also writes the auto-apply ``.pth`` to the root of the wheel, which pip installs into
    site-packages. A regular build puts it into ``build_lib`` (copied whole into the wheel); an editable
    build (PEP 660) leaves packages in the source tree and ships only what is in the unpacked editable
    wheel, which is the ``install`` command's ``install_lib`` during that build."""

    def run(self):
        super().run()
        root = self.get_finalized_command("install").install_lib if self.editable_mode else self.build_lib
        self.mkpath(root)
        self.copy_file(str(here / AUTOAPPLY_PTH_SOURCE), os.path.join(root, AUTOAPPLY_PTH_NAME))


setup(
    name="behavior1k_fast",
    version=version["v"],
    description="Fast RL rollouts on BEHAVIOR-1K: runtime patches, rollout engine, profiler, benchmark, validator",
    long_description=(here / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10,<3.13",
    packages=find_packages(include=["behavior1k_fast", "behavior1k_fast.*"]),
    package_data={"behavior1k_fast.patching": ["autoapply.pth"]},
    cmdclass={"build_py": BuildPyWithAutoApplyPth},
    install_requires=[
        "numpy>=1.24",
        "wrapt>=1.15",
        "gymnasium>=0.29",
        "psutil>=5.9",
        "PyYAML>=6",
        "tqdm>=4.60",
        "matplotlib>=3.7",
        "mujoco>=3.1",
    ],
    extras_require={
        # torch is left to the user (CPU or CUDA build); pin it next to this package, e.g. torch==2.13.0.
        "torch": ["torch>=2.1"],
        "ray": ["ray[default]>=2.9"],
        # train-judge's TorchRL collector peers, tools/peers/torchrl.py (torchrl 0.14.1 needs tensordict < 0.15).
        "peers": ["torchrl==0.14.1", "tensordict==0.14.3"],
        # NVML bindings: doctor reads the NVIDIA driver version through them (else nvidia-smi's column).
        "nvml": ["nvidia-ml-py>=12"],
        # omegaconf: RLinf's BehaviorProcess (rlinf==0.3.0, installed --no-deps by .ci/install) runs in the tests.
        "test": ["pytest>=7", "numba>=0.59", "ray[default]>=2.9", "omegaconf>=2.3", *OMNIGIBSON_IMPORT],
    },
    entry_points={"console_scripts": ["behavior1k-fast=behavior1k_fast.tools.cli:main"]},
    classifiers=[
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "License :: OSI Approved :: Apache Software License",
    ],
)
