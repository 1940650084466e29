"""Evaluations that measure scheduling quality on published traces against published results."""
