"""Tests of `sidequest.worker`: test_<module>.py for each module (see tests/README.md)."""
