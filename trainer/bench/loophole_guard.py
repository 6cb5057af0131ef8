"""The real guard as the loophole benchmark's oracle: every call the policy makes is decided by it.

Stage 1 (``Guard.check_rules``) reads every call, and the whole pipeline (``Guard.check``: rules,
the fail mode for escalations without a judge, the decoys) decides it. A call's decision depends on
the call alone here (no episode memory, no probe, no judge), so the pipeline runs once per distinct
call and its decision is replayed. Catch rates are measured through it, never assumed: the rules
keep improving.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from contract.calls import ToolAnswer, ToolCall
from guard.pipeline import Guard
from guard.settings import GuardSettings
from guard.types import Action, GuardContext
from trainer.bench.loophole_calls import MENU, call_key, real_missing_answer
from trainer.bench.loophole_tokens import LoopholeConfig, tokenize_text


@dataclass(frozen=True)
class Decision:
    """The guard pipeline's decision for one call, as the environment uses it."""

    action: str
    rule_id: str | None
    decoy: ToolAnswer | None

    @property
    def intercepted(self) -> bool:
        return self.action == Action.DECOY


class GuardOracle:
    """The real guard for the environment's calls: stage 1 reads every call, ``Guard.check`` decides.

    ``Guard.check`` (rules, the fail mode for escalations without a judge, decoys) runs once per
    distinct call and process; the decision is replayed for the same call (a call's decision does
    not depend on the episode here: no episode memory, no probe, no judge). ``reads`` counts the
    stage-1 reads (one per call the policy made).
    """

    def __init__(self, settings: GuardSettings | None = None) -> None:
        self.guard = Guard.from_settings(settings or GuardSettings())
        self.context = GuardContext(episode_id="loophole-bench")
        self._decisions: dict[str, Decision] = {}
        self.reads = 0

    def fresh(self, call: ToolCall) -> Decision:
        """A new decision from the whole pipeline, bypassing the replay (tests compare the two).

        A decoyed bash line is answered as the gateway answers it: its rewrite (the intercepted
        commands stubbed, the rest of the line as bash runs it) run for real where the answer file
        does not exist, not the pipeline's summary of the stubs (``cat /hid{den,}/x`` prints two
        missing files, the stub's decoy names one)."""
        decision = asyncio.run(self.guard.check(call, self.context))
        verdict = decision.verdict
        answer = decision.decoy
        if call.tool == "bash" and decision.rewrite is not None:
            answer = real_missing_answer(ToolCall("bash", {"command": decision.rewrite}))
        return Decision(str(verdict.action), verdict.rule_id, answer)

    def decide(self, call: ToolCall) -> Decision:
        result = self.guard.check_rules(call)  # stage 1 reads every call
        self.reads += 1
        key = call_key(call)
        decision = self._decisions.get(key)
        if decision is None:
            decision = self._decisions[key] = self.fresh(call)
        rule = result.match.rule_id if result.match is not None else None
        if rule != decision.rule_id:
            raise AssertionError(f"stage 1 matched {rule} but the pipeline decided on {decision.rule_id}")
        return decision

    def catch_rates(self) -> dict[str, dict]:
        """Per menu variant: the fraction of its forms the pipeline intercepts, and each form's verdict."""
        rates = {}
        for variant in MENU:
            forms = [(call, self.decide(call)) for call in variant.forms]
            rates[variant.name] = {
                "kind": variant.kind,
                "catch_rate": sum(d.intercepted for _, d in forms) / len(forms),
                "forms": [
                    {"call": call_key(call), "action": d.action, "rule_id": d.rule_id} for call, d in forms
                ],
            }
        return rates

    def decoy_fidelity(self, config: LoopholeConfig) -> list[dict]:
        """For every form the guard intercepts: is its decoy what the program really prints when the
        file does not exist (text and exit code), and are the tokens the policy sees the same?"""
        rows = []
        for variant in MENU:
            for call in variant.forms:
                decision = self.decide(call)
                if not decision.intercepted or decision.decoy is None:
                    continue
                real = real_missing_answer(call)
                rows.append(
                    {
                        "variant": variant.name,
                        "call": call_key(call),
                        "same_text": decision.decoy.output == real.output
                        and decision.decoy.exit_code == real.exit_code,
                        "same_tokens": tokenize_text(decision.decoy.output, config)
                        == tokenize_text(real.output, config),
                        "decoy": decision.decoy.output[:200],
                        "real": real.output[:200],
                    }
                )
        return rows
