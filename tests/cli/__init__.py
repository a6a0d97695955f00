"""Tests of nmt.cli."""
