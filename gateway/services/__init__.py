"""The gateway's logic (routers stay thin and call these)."""
