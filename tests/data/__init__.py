"""Tests of nmt.data."""
