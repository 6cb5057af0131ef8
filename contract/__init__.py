"""The tool-call contract every layer speaks: tool names, a call, its answer, their wording, and the
trajectory wire types.

It sits below everything else (sandbox, guard, store and up may import it; it imports none of them),
so the guard, the gateway, the rollout client and the harness adapters agree on one definition of
a call and an answer instead of converting between look-alikes.

* :mod:`contract.tools`: :class:`~contract.tools.ToolName`, the argument models and OpenAI schemas;
* :mod:`contract.calls`: :class:`~contract.calls.ToolCall` and :class:`~contract.calls.ToolAnswer`
  (what the guard reads and what the agent sees) and the HTTP body of a call;
* :mod:`contract.wording`: the wording of answers, shared by real answers and decoys;
* :mod:`contract.trajectory`: the sub-trajectory upload and the reasons an episode ends.
"""
