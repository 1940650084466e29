"""Gang placement under topology constraints: where a job fits."""
