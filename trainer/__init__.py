"""rlguard trainer package."""
