"""rlguard sandbox package."""
