"""What every request of the gateway relies on: authentication, body limits, structured logs,
Prometheus metrics, the database runner and the call recorder."""
