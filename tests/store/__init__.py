"""Tests of `sidequest.store`: test_<module>.py for each module (see tests/README.md)."""
