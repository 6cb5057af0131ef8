"""rlguard guard package."""
