"""Backends carry out the scheduler's decisions: start pods where told, stop them when told,
and report what happened. All choices stay in `toposched.scheduler`."""
