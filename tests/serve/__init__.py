"""Tests of nmt.serve."""
