"""gpu-incident: a terminal console for GPU nodes that will not give their memory back."""
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("gpu-incident-console")
except PackageNotFoundError:  # running from a source tree
    __version__ = "0.0.0+source"
