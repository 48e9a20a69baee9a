"""Tests of `sidequest.client`: test_<module>.py for each module (see tests/README.md)."""
