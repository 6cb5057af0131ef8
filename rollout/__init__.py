"""Agent episodes against a policy, through the gateway: token ids in, token ids and logprobs out.

``agent`` (the loop of one episode: generate, parse tool calls, call the gateway, compact past the
context budget), ``policy`` (OpenAI-compatible completions with token ids), ``trajectory`` (the
sub-trajectory record), ``runner`` / ``ray_runner`` (many episodes at once, locally or on Ray),
``policy_server`` / ``hf_engine`` (``rlguard policy serve``), ``tinymodel`` (the locally built test
model), ``scripted`` (a replayed policy for demos and tests) and ``groups`` (whole task groups for
group baselines in an asynchronous loop).
"""
