"""The simulator: replays workloads through the scheduler on a simulated clock and backend."""
