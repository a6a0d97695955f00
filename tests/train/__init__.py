"""Tests of nmt.train."""
