"""The scheduling cycle: order, place, reserve, backfill; emits decisions, performs none."""
