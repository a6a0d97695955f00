"""Tests of nmt.interop (import, export)."""
