"""Tests of `sidequest.contrib`: test_<module>.py for each module (see tests/README.md)."""
