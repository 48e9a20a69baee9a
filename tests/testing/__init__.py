"""Tests of `sidequest.testing`: test_<module>.py for each module (see tests/README.md)."""
