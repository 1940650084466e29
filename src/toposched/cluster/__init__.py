"""Topology model and the array-backed cluster state: what is free."""
