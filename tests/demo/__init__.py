"""Tests of nmt.demo."""
