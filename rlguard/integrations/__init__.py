"""Adapters that put rlguard under the harnesses people already run: an MCP server, a
mini-swe-agent environment and an Inspect sandbox.

Each is a thin client of the gateway's v1 HTTP API (``rollout.gateway_client``), so every call an
adapter makes is guarded, recorded and audited exactly as the HTTP API does it; nothing here
touches a sandbox, the guard or the store directly.
"""
