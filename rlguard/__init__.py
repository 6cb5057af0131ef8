"""rlguard: agent sandbox and reward-guard gateway for RL training of LLM agents."""

from sandbox.version import RLGUARD_VERSION as __version__

__all__ = ["__version__"]
