"""HTTP gateway: composes guard, sandbox and store behind the v1 API."""
