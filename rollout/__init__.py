"""rlguard rollout package."""
