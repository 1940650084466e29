"""toposched: a topology-aware GPU cluster scheduler."""
