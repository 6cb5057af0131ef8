"""The closed RL loop on one machine: rollout, train, reload, repeat.

One loop spec, played on a schedule: synchronous (rollout, then training, in turn) or overlapped
(rollout workers in their own process, a bounded queue and a staleness gate). The processes it
starts (policy server, gateway) and the meter of the machine's busy CPU live here too.
"""
