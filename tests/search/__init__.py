"""Tests of nmt.search."""
