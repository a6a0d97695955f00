"""Tests of nmt.translation.documents."""
