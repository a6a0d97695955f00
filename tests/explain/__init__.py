"""Tests of nmt.explain."""
