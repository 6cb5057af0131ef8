"""The trainer's benchmarks and the synthetic environment they learn in."""
