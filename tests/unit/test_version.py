"""The package says the version the CHANGELOG is at: its first ``## <version>`` heading."""

import re
from pathlib import Path

import behavior1k_fast

CHANGELOG = Path(__file__).resolve().parents[2] / "CHANGELOG.md"


def test_the_package_version_is_the_changelogs_current_one():
    headings = re.findall(r"^## (\S+)", CHANGELOG.read_text(), flags=re.MULTILINE)
    assert headings, "CHANGELOG.md has no '## <version>' heading"
    assert behavior1k_fast.__version__ == headings[0]
