"""Learning from stored episodes: PPO with a learned critic (token-level GAE) and GRPO, RLOO,
REINFORCE++ and on-policy distillation, over whole episodes of compacted sub-trajectories.

``advantages`` and ``losses`` are small registered functions over tensors (the advantage trace runs
across an episode's sub-trajectories); ``mismatch`` measures and corrects the engine-trainer gap;
``ppo`` is the step;
``data`` reads episodes from the store once; ``train`` (``TrainingRun``) reads, trains, checkpoints,
commits and pushes the weights to the serving engine (``reload``); ``staleness`` weighs tokens by
the policy version that produced them; ``bench/`` holds the trainer's benchmarks.
"""
