"""HTTP routers: parse, authorise, call a service, shape the answer."""
