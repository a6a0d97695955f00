"""Tests of nmt.config."""
