"""llmwatch's version, as installed: pyproject.toml is its one source.

`--version`, baselines and suite runs read it (they record the version that wrote them).
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("llmwatch")
except PackageNotFoundError:  # run from a checkout that was never installed
    __version__ = "0+unknown"
