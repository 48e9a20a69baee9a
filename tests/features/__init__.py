"""Tests of `sidequest.features`: test_<module>.py for each module (see tests/README.md)."""
