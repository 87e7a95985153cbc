from pathlib import Path

from setuptools import find_packages, setup

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

setup(
    name="behavior1k_fast",
    version=version["v"],
    description="Fast RL rollouts on BEHAVIOR-1K: runtime patches, rollout engine, profiler, benchmark, validator",
    long_description=(here / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10,<3.13",
    packages=find_packages(include=["behavior1k_fast", "behavior1k_fast.*"]),
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
        "test": ["pytest>=7", "numba>=0.59", "ray[default]>=2.9", *OMNIGIBSON_IMPORT],
    },
    entry_points={"console_scripts": ["behavior1k-fast=behavior1k_fast.tools.cli:main"]},
    classifiers=[
        "Programming Language :: Python :: 3.10",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "License :: OSI Approved :: Apache Software License",
    ],
)
