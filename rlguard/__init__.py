"""rlguard: agent sandbox and reward-guard gateway for RL training of LLM agents."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("rlguard")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.0.0+local"
