"""Code that runs inside sandbox containers (shipped there as text), not on the host."""
