"""Every exception sidequest raises, under one root.

    SidequestError
    ├── ConfigError              a setting is missing, malformed or contradictory
    ├── RedisUnavailableError    Redis cannot be reached or refuses us (URL shown masked)
    │   └── RedisURLError        ... because the URL is wrong: invalid, or not a Redis server (also a ConfigError)
    ├── JobArgumentError         an argument or option is not JSON, or does not fit the job (also TypeError, ValueError)
    ├── JobDefinitionError       a job is defined twice under one name, with bad options, or in __main__ without a name
    ├── UnknownJobError          a payload names a job that is not registered
    ├── PayloadError             bytes from Redis that are not a job payload
    ├── JobTimeoutError          a job ran past its time limit
    └── JobFailed                a business failure: recorded, not retried (tasks)
"""

from __future__ import annotations


class SidequestError(Exception):
    """Root of every sidequest exception."""


class ConfigError(SidequestError, ValueError):
    """A configuration value is missing, malformed or contradictory."""


class RedisUnavailableError(SidequestError):
    """Redis cannot be reached, or refused authentication. The message names the masked URL."""


class RedisURLError(RedisUnavailableError, ConfigError):
    """The Redis URL is invalid, or what it points at does not speak Redis: a setting to fix."""


class JobArgumentError(SidequestError, TypeError, ValueError):
    """An argument or option of a job cannot be stored as native JSON, or the arguments do not
    fit the job's parameters (too many, too few, keywords).

    It is both a TypeError (an object, set, bytes, tuple...) and a ValueError (NaN, a bad
    queue name, an infinite time), so callers may catch whichever reads better.
    """


class JobDefinitionError(SidequestError, ValueError):
    """A job definition is invalid: a duplicate name, an unknown option type, a default name in `__main__`."""


class UnknownJobError(SidequestError, LookupError):
    """A payload names a job class that this process has not registered."""


class PayloadError(SidequestError, ValueError):
    """Bytes read from Redis are not a valid job payload."""


class JobTimeoutError(SidequestError):
    """A job ran longer than its `timeout` option allows."""


class JobFailed(SidequestError):
    """Raised by a job to report a business failure: recorded as failed, never retried."""

