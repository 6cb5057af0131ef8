"""Reusable test doubles that speak real protocols on loopback (for what cannot run here)."""
