"""The job model every layer shares: a validated gang, its pods' resources, where it may land,
and the files jobs are written in."""
