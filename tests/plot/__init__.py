"""Tests of nmt.plot."""
