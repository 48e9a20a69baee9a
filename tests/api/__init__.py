"""Tests of `sidequest.api`: test_<module>.py for each module (see tests/README.md)."""
