"""Tests of nmt.translation."""
