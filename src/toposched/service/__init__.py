"""The control plane: `toposched serve` drives a Scheduler from an HTTP API, a durable store
and a backend that runs the pods."""
