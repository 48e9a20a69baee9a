"""Tests of `sidequest.cli`: test_<module>.py for each module (see tests/README.md)."""
