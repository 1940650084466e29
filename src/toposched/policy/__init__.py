"""Budgets, fair share, the scheduling contract: who goes first."""
