"""Tests of `sidequest.web`: test_<module>.py for each module (see tests/README.md)."""
