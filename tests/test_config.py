import os

import pytest

from sidequest.config import Config, parse_queue_spec, usable_cpus
from sidequest.errors import ConfigError


def test_defaults_are_sidekiq_like():
    c = Config()
    assert c.queues == (("default", 0),) and c.strict
    assert c.timeout == 25 and c.url == "redis://localhost:6379/0"


def test_queue_specs_and_weights():
    assert parse_queue_spec("critical,3") == ("critical", 3)
    assert parse_queue_spec(["low", 1]) == ("low", 1)
    c = Config(queues=("critical,3", "low,1"))
    assert not c.strict and c.queue_names == ["critical", "low"]
    with pytest.raises(ConfigError, match="every queue a weight, or none"):
        Config(queues=("a,2", "b"))
    with pytest.raises(ConfigError, match="whole number"):
        parse_queue_spec("a,heavy")
    with pytest.raises(ConfigError, match="not valid"):
        parse_queue_spec("bell\x07")
    with pytest.raises(ConfigError, match="not valid"):
        parse_queue_spec(",3")
    # every name Ruby Sidekiq accepts: spaces, colons, any script, any length
    for name in ("has space", "a:b:c", "files ü 日本", "q" * 1000):
        assert parse_queue_spec([name, 0]) == (name, 0) and parse_queue_spec(name) == (name, 0)


@pytest.mark.parametrize("kwargs, words", [
    ({"concurrency": 0}, "concurrency"),
    ({"timeout": -1}, "timeout"),
    ({"fetch": "magic"}, "fetch must be"),
    ({"heartbeat_interval": 10, "heartbeat_ttl": 5}, "heartbeat_ttl"),
    ({"prefetch": -1}, "prefetch"),
])
def test_bad_values_are_refused_at_construction(kwargs, words):
    with pytest.raises(ConfigError, match=words):
        Config(**kwargs)


def test_from_env_reads_only_what_it_is_given():
    c = Config.from_env({"REDIS_URL": "redis://h:1/2", "SIDEQUEST_CONCURRENCY": "7",
                         "SIDEQUEST_QUEUES": "a,2;b,1", "SIDEQUEST_JOB_TIMEOUT": "1.5", "SIDEQUEST_PREFETCH": "0"})
    assert c.url == "redis://h:1/2" and c.concurrency == 7 and c.prefetch == 0
    assert c.queues == (("a", 2), ("b", 1)) and c.job_timeout == 1.5
    with pytest.raises(ConfigError, match="SIDEQUEST_CONCURRENCY"):
        Config.from_env({"SIDEQUEST_CONCURRENCY": "many"})


def test_sidekiq_yml_shape(tmp_path):
    f = tmp_path / "sidekiq.yml"
    f.write_text(":concurrency: 3\n:timeout: 8\n:queues:\n  - [critical, 2]\n  - [default, 1]\n"
                 "heartbeat_interval: 0.5\nheartbeat_ttl: 2\n")
    c = Config().merge_file(f)
    assert c.concurrency == 3 and c.timeout == 8 and c.queues == (("critical", 2), ("default", 1))
    assert c.heartbeat_interval == 0.5


@pytest.mark.parametrize("text, words", [
    (":concurrency: [1\n", "not valid YAML"),
    ("- a\n- b\n", "mapping"),
    (":bogus: 1\n", "unknown setting 'bogus'"),
    (":concurrency: zero\n", "concurrency"),
])
def test_bad_config_files_are_clear(tmp_path, text, words):
    f = tmp_path / "bad.yml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=words):
        Config().merge_file(f)


def test_missing_config_file():
    with pytest.raises(ConfigError, match="cannot read config file"):
        Config().merge_file("/nonexistent/sidekiq.yml")


def test_processes_is_auto_by_default_and_takes_auto_in_every_form(tmp_path, monkeypatch):
    assert Config().processes is None  # auto: one process per CPU for `sidequest worker`
    assert Config.from_env({"SIDEQUEST_PROCESSES": "auto"}).processes is None
    assert Config.from_env({"SIDEQUEST_PROCESSES": "0"}).processes == 0
    cfg = tmp_path / "w.yml"
    cfg.write_text(":processes: auto\n")
    assert Config(processes=3).merge_file(cfg).processes is None
    assert Config().replace(processes="auto").processes is None and Config(processes=0).worker_processes() == 0
    assert Config(processes=2).worker_processes() == 2
    cpus = usable_cpus()
    assert Config().worker_processes() == (cpus if cpus > 1 else 0)
    with pytest.raises(ConfigError, match="processes"):
        Config(processes=-1)


def test_usable_cpus_honours_a_cgroup_cpu_quota(tmp_path):
    """A container limited to 1.5 CPUs (cgroup v2 `cpu.max`) gets 2 processes, never more than
    its affinity allows; no limit ("max") or no file leaves the affinity."""
    affinity = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    limit = tmp_path / "cpu.max"
    limit.write_text("150000 100000\n")
    assert usable_cpus(limit) == min(affinity, 2)
    limit.write_text("50000 100000\n")
    assert usable_cpus(limit) == 1
    limit.write_text("max 100000\n")
    assert usable_cpus(limit) == affinity
    assert usable_cpus(tmp_path / "missing") == affinity


def test_a_misspelled_setting_names_the_nearest_one():
    """Issue 28 item 15: `Config(concurency=3)` was a bare TypeError; now one line with the fix."""
    with pytest.raises(ConfigError, match=r"^unknown setting 'concurency'; did you mean 'concurrency'\?$"):
        Config(concurency=3)
    with pytest.raises(ConfigError, match=r"did you mean 'max_retries'\?"):
        Config().replace(max_retry=3)


@pytest.mark.parametrize("url", ["http://127.0.0.1:6379/0", "localhost:6379", "redis//localhost", "tcp://h:1"])
def test_a_redis_url_of_another_scheme_is_refused_at_construction(url):
    """Issue 28 item 15: `Config(redis_url="http://...")` was accepted until the first use."""
    with pytest.raises(ConfigError, match=r"invalid Redis URL .*: the scheme must be one of redis://, rediss://"):
        Config(redis_url=url)
    for good in ("redis://h:1/0", "rediss://h:1/0", "unix:///tmp/redis.sock", "redis+sentinel://h:26379/main",
                 "redis+cluster://h:7000", "REDIS://h:1/0"):
        assert Config(redis_url=good).redis_url == good


def test_a_misspelled_environment_variable_is_named_with_the_nearest_one(caplog, monkeypatch):
    """Issue 28 item 15: `SIDEQUEST_CONCURENCY=3` was ignored without a word."""
    import sidequest.config

    monkeypatch.setattr(sidequest.config, "_warned", set())  # each is named once a process
    caplog.set_level("WARNING", logger="sidequest.config")
    env = {"SIDEQUEST_CONCURENCY": "3", "SIDEQUEST_WEB_BASIC_AUTH": "a:b", "SIDEQUEST_WEB_ALLOWED_HOSTS": "h",
           "SIDEQUEST_QUEUES": "mail",
           "SIDEQUEST_CAPSULES": "serial"}
    config = Config.from_env(env)
    assert config.concurrency == 10 and config.queue_names == ["mail"]
    Config.from_env(env)
    assert sorted(r.getMessage() for r in caplog.records) == [
        "SIDEQUEST_CAPSULES is ignored: capsules is set in code or a config file, not in the environment",
        "SIDEQUEST_CONCURENCY is not a sidequest setting and is ignored; did you mean SIDEQUEST_CONCURRENCY?"]


def test_queues_given_with_a_comma_say_how_to_list_them():
    """Issue 28 item 15: `SIDEQUEST_QUEUES=mail,default` read `default` as mail's weight, with no
    hint that queues are separated by spaces (a comma gives a weight, as in Sidekiq's `-q`)."""
    with pytest.raises(ConfigError) as caught:
        Config.from_env({"SIDEQUEST_QUEUES": "mail,default"})
    assert str(caught.value) == ("queue 'mail' has weight 'default'; a weight is a whole number (NAME,WEIGHT). "
                                 "To work several queues, separate them with spaces: SIDEQUEST_QUEUES='mail default' "
                                 "or -q mail -q default")
    assert Config.from_env({"SIDEQUEST_QUEUES": "mail default"}).queue_names == ["mail", "default"]
    assert Config.from_env({"SIDEQUEST_QUEUES": "mail;default"}).queue_names == ["mail", "default"]


def test_a_configuration_shown_whole_holds_no_password():
    """repr() of a Config (a debug line, a traceback's locals in an error tracker) leaves the URL
    out: it may hold a password; `config.url` still gives it to whoever connects."""
    config = Config(redis_url="redis://cache:6379/0?password=Sq-s3cret-Pa55")
    assert "Sq-s3cret-Pa55" not in repr(config) and "concurrency=10" in repr(config)
    assert config.url.endswith("password=Sq-s3cret-Pa55")
