"""Tests of `sidequest.worker.fetch`: test_<module>.py for each module (see tests/README.md)."""
