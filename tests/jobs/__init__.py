"""Tests of `sidequest.jobs`: test_<module>.py for each module (see tests/README.md)."""
