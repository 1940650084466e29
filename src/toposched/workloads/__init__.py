"""Workload traces: task lists read from published cluster traces."""
