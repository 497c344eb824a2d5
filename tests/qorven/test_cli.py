"""The `qorven` command itself: its version, and configuration errors as one clear line."""
from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
QORVEN = Path(sys.executable).with_name("qorven")


def run(*args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SECRET_KEY", "DATABASE_URL")}
    return subprocess.run([str(QORVEN), *args], capture_output=True, text=True, cwd=ROOT, timeout=180,
                          env={**environment, **env})


def run_each(*calls: tuple[tuple[str, ...], dict[str, str]]) -> list[subprocess.CompletedProcess]:
    """`run(*args, **env)` for each (args, env), the processes started together, their
    results in the order given: each is a fresh Python starting Django, a second or more of
    CPU, so four at a time (more only wait on each other for the machine's CPUs)."""
    with ThreadPoolExecutor(max_workers=min(len(calls), 4)) as pool:
        return list(pool.map(lambda call: run(*call[0], **call[1]), calls))


def test_version_is_qorvens_not_djangos():
    done = run("--version")
    assert done.returncode == 0 and done.stdout.startswith("qorven 0.")


def test_a_commands_version_is_qorvens_not_djangos():
    """`qorven chat --version`, which every command's --help lists, printed Django's
    version (5.2.x) as the program's."""
    done = run("chat", "--version", DJANGO_SECRET_KEY="x")
    assert done.returncode == 0 and done.stdout == run("--version").stdout, done.stdout


def test_a_missing_secret_key_is_one_line_not_a_traceback():
    done = run("check", DATABASE_URL="postgres://qorven@127.0.0.1:9/qorven")
    assert done.returncode == 2
    assert done.stderr.strip() == "qorven: configuration error: Set DJANGO_SECRET_KEY when DATABASE_URL names a database server."
    assert "Traceback" not in done.stderr + done.stdout


def test_a_sqlite_database_url_needs_no_secret_key(tmp_path):
    """A SQLite file named by DATABASE_URL is the embedded default's layout on another file:
    one machine, whose processes all read the key `make run` keeps. It was refused for the
    secret key, as a PostgreSQL server's would be."""
    done = run("check", DATABASE_URL=f"sqlite:///{tmp_path / 'other.sqlite3'}")
    assert done.returncode == 0, done.stderr[-800:]
    assert (ROOT / ".secret-key").exists()


def test_qorven_alone_lists_its_own_commands_first_with_hyphens():
    done = run()
    assert done.returncode == 0
    out = done.stdout
    assert out.index("Qorven's commands:") < out.index("collapse-sessions") < out.index("Django's commands")
    assert "import_legacy" not in out and out.index("startproject") > out.index("Django's commands")


def test_help_with_a_hyphenated_command_explains_that_command():
    """`qorven help collapse-sessions` answered "Unknown command … Did you mean
    collapse_sessions?", though the hyphenated names are the ones documented."""
    done = run("help", "collapse-sessions", DJANGO_SECRET_KEY="cli-test")
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout.startswith("usage: qorven collapse-sessions") and "--dry-run" in done.stdout


def test_a_reader_that_closes_the_overview_early_gets_no_traceback():
    """`qorven --help | head -3` ended in a BrokenPipeError traceback."""
    environment = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SECRET_KEY", "DATABASE_URL")}
    child = subprocess.Popen([str(QORVEN), "--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT,
                             env={**environment, "DJANGO_SECRET_KEY": "cli-test"})
    child.stdout.close()  # the reader has gone before a word was written
    error = child.stderr.read().decode()
    assert child.wait(timeout=180) == 1 and "Traceback" not in error, error[-800:]


def test_usage_lines_use_the_hyphenated_names_and_mark_required_flags():
    legacy, telegram, whatsapp = run_each((("import-legacy", "--help"), {}), (("bind", "telegram", "--help"), {}),
                                          (("bind", "whatsapp", "--help"), {}))
    assert legacy.stdout.startswith("usage: qorven import-legacy ")
    usage = telegram.stdout
    assert " --token TOKEN" in usage and "[--token TOKEN]" not in usage and "[--username USERNAME]" in usage
    assert "[--groups {paired,anyone}]" in usage and "group chat" in usage
    assert "--groups" not in whatsapp.stdout  # no group chats there


def test_a_command_that_calls_no_model_does_not_load_the_model_sdk():
    # Importing the SDK takes about a second here: `qorven chat` and the rest start without it.
    done = run("chat", "--help", PYTHONPROFILEIMPORTTIME="1", DJANGO_SECRET_KEY="x")
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.rpartition("|")[2].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "django" in imported and "channels_app.chat" in imported  # the log is what it seems
    assert not {name for name in imported if name.split(".")[0] == "openai"}


# What a command's start imported whether the command used it or not (median CPU of
# `qorven chat --help` 1.31 s before, docs/performance.md): the platform adapters with httpx
# (and the rich its own command line brings), pydantic, markdown-it and regex; kombu's Redis
# transport with the Redis client; the terminal client with wcwidth and prompt_toolkit; the
# SDK and the metrics client. Each is imported where it is used now.
NOT_AT_START = ("channels_app.adapters", "channels_app.inbound", "channels_app.formatting", "channels_app.terminal",
                "httpx", "pydantic", "markdown_it", "regex", "redis", "kombu.transport.redis",
                "kombu.transport.memory", "wcwidth", "prompt_toolkit", "openai", "prometheus_client")


def imported_at_start(done: subprocess.CompletedProcess) -> set[str]:
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.rpartition("|")[2].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "django" in imported and "qorven.celery" in imported  # the log is what it seems
    return imported


# The commands that print tables or progress with rich: their --help prints neither.
RICH_COMMANDS = ("backup", "restore", "export", "pair", "usage", "import-legacy", "collapse-sessions")


def test_a_start_imports_only_what_every_command_needs():
    """`qorven --help` reads every command's help (so imports each command's module),
    `qorven doctor --help`, `qorven chat --help` and those of the commands that print with
    rich one each; none of them sends to a platform, parses a payload or a reply, reaches the
    broker, chats, calls a model, or prints a table or a progress bar."""
    calls = [(args, {"PYTHONPROFILEIMPORTTIME": "1", "DJANGO_SECRET_KEY": "x"})
             for args in (("--help",), ("doctor", "--help"), ("chat", "--help"),
                          *((name, "--help") for name in RICH_COMMANDS))]
    for (args, _), done in zip(calls, run_each(*calls), strict=True):
        imported = imported_at_start(done)
        if args in (("--help",), ("chat", "--help")):  # what `qorven chat` imports as its module is read
            assert {"channels_app.chat", "channels_app.json_body"} <= imported
        assert not {name for name in imported if name.split(".")[0] == "rich"}, args
        assert not {name for name in imported if any(name == heavy or name.startswith(f"{heavy}.")
                                                     for heavy in NOT_AT_START)}, args


def test_a_start_does_not_load_daphne():
    # Daphne installs Twisted's reactor as it is imported, a quarter of a second of every
    # start: only `qorven serve --server daphne` needs it (tests/test_serve.py serves on it).
    done = run("check", PYTHONPROFILEIMPORTTIME="1", DJANGO_SECRET_KEY="x")
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {line.rpartition("|")[2].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert "django" in imported and "qorven.celery" in imported  # the log is what it seems
    assert not {name for name in imported if name.split(".")[0] in ("daphne", "twisted")}


def test_serve_refuses_a_port_that_is_not_one():
    """65536 and up would be taken modulo by the socket layer: the server would say it
    listens where it does not."""
    ports = ("99999", "0", "http")
    for port, done in zip(ports, run_each(*((("serve", "--port", port), {"DJANGO_SECRET_KEY": "cli-test"})
                                            for port in ports))):
        assert done.returncode == 2 and "--port" in done.stderr, (port, done.stderr[-500:])


def test_a_malformed_number_or_rate_in_the_environment_is_one_line_naming_it():
    cases = (("QORVEN_TURN_LEASE", "bogus"), ("QORVEN_SWEEP_INTERVAL", "soon"),
             ("QORVEN_LOGIN_FAILURES_PER_USER", "bogus"), ("QORVEN_WEBCHAT_MESSAGE_RATE", "20 a minute"))
    for (name, value), done in zip(cases, run_each(*checks(*({name: value} for name, value in cases)))):
        assert done.returncode == 2, (name, done.stderr[-800:])
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("qorven: configuration error: ") and name in line and repr(value) in line


def test_a_settings_file_named_that_is_not_there_is_one_line_naming_it(tmp_path):
    """QORVEN_ENV_FILE naming a missing file (a typo, a path from another machine) was read
    as none at all: every setting in it silently fell back to its default."""
    missing, folder = tmp_path / "qorven.env", tmp_path
    (env_file := tmp_path / "real.env").write_text("QORVEN_TURN_LEASE=45\n")
    *refused, read = run_each(*checks({"QORVEN_ENV_FILE": str(missing)}, {"QORVEN_ENV_FILE": str(folder)},
                                      {"QORVEN_ENV_FILE": str(env_file)}))
    for path, done in zip((missing, folder), refused):
        line = configuration_error(done)
        assert "QORVEN_ENV_FILE" in line and str(path) in line, line
    assert read.returncode == 0, read.stderr[-800:]


def test_a_settings_file_line_that_cannot_be_read_is_one_line_naming_it_without_its_value(tmp_path):
    """A line of .env that was not NAME=value (`QORVEN_TURN_LEASE = 45`, spaces around the
    =) was skipped with a warning that quoted the whole line, a key included, and the
    setting took its default; a quoted value followed by a comment kept its quotes and
    the comment as its value."""
    spaced, commented = tmp_path / "spaced.env", tmp_path / "commented.env"
    spaced.write_text("# keys\nOPENAI_API_KEY = sk-s3cret\n")
    commented.write_text('QORVEN_TURN_LEASE=45\nQORVEN_MODEL="llama s3cret" # the big one\n')
    (good := tmp_path / "good.env").write_text(
        "# a comment\n\nexport QORVEN_TURN_LEASE=45\nQORVEN_MODEL='llama 3'\nQORVEN_LOG_LEVEL=\"info\"\n"
        "OPENAI_API_KEY=abc#def\n")
    shown = "from django.conf import settings as s; print(s.QORVEN_TURN_LEASE, s.QORVEN_MODEL, s.OPENAI_API_KEY)"
    *refused, read = run_each(*checks({"QORVEN_ENV_FILE": str(spaced)}, {"QORVEN_ENV_FILE": str(commented)}),
                              (("shell", "-c", shown), {"DJANGO_SECRET_KEY": "cli-test", "QORVEN_ENV_FILE": str(good)}))
    for path, line_number, name, done in ((spaced, 2, "OPENAI_API_KEY", refused[0]),
                                          (commented, 2, "QORVEN_MODEL", refused[1])):
        line = configuration_error(done)
        assert str(path) in line and f"line {line_number}" in line and name in line and "s3cret" not in line, line
    assert read.returncode == 0 and read.stdout.splitlines()[-1] == "45 llama 3 abc#def", read.stderr[-800:]


def test_a_number_out_of_its_range_in_the_environment_is_one_line_naming_it():
    """0 workers ran Celery's own default (one per CPU) without a word; a negative lease
    or a zero timeout broke the first turn instead of the start."""
    cases = (("QORVEN_WORKER_CONCURRENCY", "0", "at least 1"), ("QORVEN_TURN_LEASE", "-5", "at least 1"),
             ("QORVEN_MODEL_TIMEOUT", "0", "more than 0"), ("QORVEN_SEND_SLOTS", "0", "at least 1"),
             ("QORVEN_WORKER_METRICS_PORT", "70000", "at most 65535"),
             ("QORVEN_API_PAGE_MAX", "0", "at least 1"), ("QORVEN_SEND_BACKOFF", "-1", "at least 0"))
    # The ends of a range are in it: no retries, no backoff.
    *refused, ends = run_each(*checks(*({name: value} for name, value, _ in cases),
                                      {"QORVEN_MODEL_RETRIES": "0", "QORVEN_SEND_BACKOFF": "0"}))
    for (name, value, says), done in zip(cases, refused):
        assert done.returncode == 2, (name, done.stderr[-800:])
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("qorven: configuration error: ") and name in line and says in line and repr(value) in line
    assert ends.returncode == 0


def test_a_time_in_seconds_written_with_a_unit_or_an_exponent_is_one_line_naming_it():
    """django-environ reads a float by dropping every character that is not a digit, a
    point, a comma or a minus: `5m` was 5 seconds, `1e3` was 13, `12abc34` was 1234, all
    taken without a word."""
    cases = (("QORVEN_HEARTBEAT_RETRY_DELAY", "5m"), ("QORVEN_SEND_BACKOFF", "1e400"),
             ("QORVEN_MODEL_DEADLINE", "12abc34"), ("QORVEN_SWEEP_INTERVAL", "1,5"))
    taken = {"QORVEN_HEARTBEAT_RETRY_DELAY": "300", "QORVEN_MODEL_TIMEOUT": "1e3", "QORVEN_SEND_BACKOFF": " 0.25 "}
    shown = "from django.conf import settings as s; print(s.QORVEN_HEARTBEAT_RETRY_DELAY, s.QORVEN_MODEL_TIMEOUT, " \
            "s.QORVEN_SEND_BACKOFF)"
    *refused, done = run_each(*checks(*({name: value} for name, value in cases)),
                              (("shell", "-c", shown), {"DJANGO_SECRET_KEY": "cli-test", **taken}))
    for (name, value), refusal in zip(cases, refused):
        line = configuration_error(refusal)
        assert name in line and repr(value) in line and "a number" in line, line
    assert done.returncode == 0 and done.stdout.splitlines()[-1] == "300.0 1000.0 0.25", done.stderr[-800:]


def test_a_malformed_mail_or_database_url_is_one_line_naming_it_without_its_password():
    """EMAIL_URL's refusal named no variable ("Invalid email schema bogus"), and a port
    that is not a number, in EMAIL_URL or DATABASE_URL, ended in a ValueError traceback."""
    cases = (("EMAIL_URL", "bogus://mail.example.com"), ("EMAIL_URL", "smtp+tls://user:s3cret@mail.example.com:tls"),
             ("EMAIL_URL", "smtp://"), ("DATABASE_URL", "postgres://qorven:s3cret@db.internal:port/qorven"),
             ("DATABASE_URL", "mysql://qorven:s3cret@db.internal/qorven"))
    finished = run_each(*checks(*({name: value} for name, value in cases)))
    for (name, value), done in zip(cases, finished):
        assert "Traceback" not in done.stderr, done.stderr[-800:]
        line = configuration_error(done)
        assert name in line and "s3cret" not in line, line
    taken = run_each(*checks({"EMAIL_URL": "smtp+tls://user:pass@smtp.example.com:587"},
                             {"EMAIL_URL": "consolemail://"}))
    for done in taken:
        assert done.returncode == 0, done.stderr[-800:]


def test_a_redis_url_that_is_not_one_is_one_line_naming_it_without_its_password():
    """REDIS_URL written without its scheme (127.0.0.1:6379), the commonest slip, was taken:
    `qorven serve` started, said nothing, and queued no task, /readyz answering 503."""
    refused = ("127.0.0.1:6379", "http://redis.internal:6379/0", "redis://:s3cret@redis.internal:port/0",
               "redis://redis.internal:6379/db8")
    taken = ("redis://127.0.0.1:6379/8", "rediss://:pass@redis.internal:6380/0", "redis://redis.internal",
             "unix:///run/redis/redis.sock?db=2")
    finished = run_each(*checks(*({"REDIS_URL": url} for url in (*refused, *taken))))
    for url, done in zip(refused, finished):
        line = configuration_error(done)
        assert "REDIS_URL" in line and "redis://" in line and "s3cret" not in line, line
    for url, done in zip(taken, finished[len(refused):]):
        assert done.returncode == 0, (url, done.stderr[-800:])


def test_the_proxys_https_header_is_taken_as_sent_or_as_django_names_it():
    """DJANGO_SECURE_PROXY_SSL_HEADER=X-Forwarded-Proto, the header as the proxy sends it
    (and as QORVEN_CLIENT_IP_HEADER takes one), never matched: every request behind the
    proxy was redirected to https again, for ever."""
    shown = "from django.conf import settings as s; print(s.SECURE_PROXY_SSL_HEADER)"
    sent, named, bad = run_each(*((("shell", "-c", shown), {"DJANGO_SECRET_KEY": "cli-test",
                                                              "DJANGO_SECURE_PROXY_SSL_HEADER": header})
                                  for header in ("X-Forwarded-Proto", "HTTP_X_FORWARDED_PROTO", "X-Forwarded-Proto: https")))
    for done in (sent, named):
        assert done.returncode == 0 and done.stdout.splitlines()[-1] == "('HTTP_X_FORWARDED_PROTO', 'https')", \
            done.stdout[-300:] + done.stderr[-800:]
    line = configuration_error(bad)
    assert "DJANGO_SECURE_PROXY_SSL_HEADER" in line, line


def test_an_allowed_host_written_as_a_url_or_with_a_port_is_one_line_naming_it():
    """DJANGO_ALLOWED_HOSTS=https://qorven.example.com (or qorven.example.com:8000) matched
    no request: every page answered 400, and nothing said why."""
    refused = ("https://qorven.example.com", "qorven.example.com:8000", "qorven.example.com/chat")
    taken = ("qorven.example.com,.example.org,127.0.0.1,[::1]", "*")
    finished = run_each(*checks(*({"DJANGO_ALLOWED_HOSTS": hosts} for hosts in (*refused, *taken))))
    for hosts, done in zip(refused, finished):
        line = configuration_error(done)
        assert "DJANGO_ALLOWED_HOSTS" in line and repr(hosts) in line, line
    for hosts, done in zip(taken, finished[len(refused):]):
        assert done.returncode == 0, (hosts, done.stderr[-800:])


def test_a_model_or_platform_address_that_is_not_an_http_url_is_one_line_naming_it():
    """OPENAI_BASE_URL=127.0.0.1:11434/v1 (no scheme) was taken, and the model was then
    "unreachable" on every turn and in doctor, which named nothing wrong with the address."""
    cases = (("OPENAI_BASE_URL", "127.0.0.1:11434/v1"), ("OPENAI_BASE_URL", "ollama:11434"),
             ("QORVEN_MODEL_KEY_URLS", "https://api.example.com/v1,api.other.example/v1"),
             ("TELEGRAM_API_BASE", "api.telegram.org"), ("SLACK_API_BASE", "https://user:s3cret@:99x"))
    taken = {"OPENAI_BASE_URL": "http://127.0.0.1:11434/v1", "QORVEN_MODEL_KEY_URLS": "https://api.example.com/v1",
             "TELEGRAM_API_BASE": "https://tg-proxy.internal:8443"}
    *refused, done = run_each(*checks(*({name: value} for name, value in cases), taken))
    for (name, value), refusal in zip(cases, refused):
        line = configuration_error(refusal)
        assert name in line and "http" in line and "s3cret" not in line, line
    assert done.returncode == 0, done.stderr[-800:]


def test_worker_refuses_a_concurrency_or_metrics_port_out_of_range():
    cases = (("--concurrency", "0"), ("--concurrency", "-2"), ("--metrics-port", "70000"))
    for (flag, value), done in zip(cases, run_each(*((("worker", flag, value), {"DJANGO_SECRET_KEY": "cli-test"})
                                                     for flag, value in cases))):
        assert done.returncode == 2 and flag in done.stderr and "Traceback" not in done.stderr, done.stderr[-500:]


def test_worker_and_beat_refuse_a_log_level_that_is_not_one_and_name_a_metrics_host_they_cannot_use():
    """`--loglevel verbose` ended in Celery's traceback (click's BadParameter for the worker,
    a KeyError for beat), and a --metrics-host that is no address was blamed on --metrics-port."""
    environment = {"DJANGO_SECRET_KEY": "cli-test", "REDIS_URL": "redis://127.0.0.1:9/0"}
    worker, beat, host, taken = run_each((("worker", "--loglevel", "verbose"), environment),
                                         (("beat", "-l", "loud"), environment),
                                         (("worker", "--metrics-port", "9", "--metrics-host", "999.9.9.9"), environment),
                                         (("beat", "--loglevel", "warning", "--help"), environment))
    for done, name in ((worker, "worker"), (beat, "beat")):
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-800:]
        assert f"usage: qorven {name}" in done.stderr and "--loglevel" in done.stderr and "DEBUG" in done.stderr
    assert host.returncode == 1 and "Traceback" not in host.stderr, host.stderr[-800:]
    assert "--metrics-host 999.9.9.9" in host.stderr and "--metrics-port" not in host.stderr, host.stderr[-800:]
    assert taken.returncode == 0, taken.stderr[-800:]


def test_a_starting_worker_removes_the_metrics_folders_of_workers_that_are_gone(tmp_path):
    from qorven.runtime.management.commands.worker import METRICS_FOLDER, _metrics_folders_stale_remove

    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    dead = tmp_path / f"{METRICS_FOLDER}{gone.pid}-abc"
    alive = tmp_path / f"{METRICS_FOLDER}{os.getpid()}-def"
    other = tmp_path / "someone-elses"
    for folder in (dead, alive, other):
        folder.mkdir()
        (folder / "counter_1.db").write_bytes(b"x")
    _metrics_folders_stale_remove(tmp_path)
    assert not dead.exists() and alive.exists() and other.exists()


def checks(*environments: dict[str, str]) -> list[tuple[tuple[str, ...], dict[str, str]]]:
    """`qorven check` with a key and each of these settings, as `run_each` takes them."""
    return [(("check",), {"DJANGO_SECRET_KEY": "cli-test", **environment}) for environment in environments]


def configuration_error(done: subprocess.CompletedProcess) -> str:
    """The one line a refused setting prints (exit code 2), else an assertion naming what it did."""
    assert done.returncode == 2, done.stderr[-800:]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("qorven: configuration error: ")
    return line


def test_a_log_level_is_taken_in_any_case_and_an_unknown_one_is_one_line_naming_it():
    levels = ("debug", "Warning", "ERROR")
    *taken, loud = run_each(*checks(*({"QORVEN_LOG_LEVEL": level} for level in (*levels, "loud"))))
    for level, done in zip(levels, taken):
        assert done.returncode == 0 and "Traceback" not in done.stderr, (level, done.stderr[-800:])
    line = configuration_error(loud)
    assert "QORVEN_LOG_LEVEL" in line and "'loud'" in line and "DEBUG" in line


def test_an_unknown_time_zone_or_a_malformed_database_url_is_one_line_naming_it():
    # A folder of the tz database is no zone either, nor its files that are not zones.
    bad_zones = ("Mars/Base", "Europe", "localtime", "Factory", "posix/Europe/Berlin")
    zones = ("Europe/Berlin", "US/Eastern")
    urls = ("bogus", "http://db.internal/qorven")
    # The URL's own problem first: a key would not make it work.
    done = run_each(*checks(*({"QORVEN_TIME_ZONE": zone} for zone in (*bad_zones, *zones)),
                            *({"DATABASE_URL": url} for url in urls)), (("check",), {"DATABASE_URL": "bogus"}))
    for zone, refused in zip(bad_zones, done):
        line = configuration_error(refused)
        assert "QORVEN_TIME_ZONE" in line and f"'{zone}'" in line
    for zone, taken in zip(zones, done[len(bad_zones):]):
        assert taken.returncode == 0, (zone, taken.stderr[-800:])
    for url, refused in zip(urls, done[len(bad_zones) + len(zones):]):
        line = configuration_error(refused)
        assert "DATABASE_URL" in line and repr(url) in line
    line = configuration_error(done[-1])
    assert "DATABASE_URL" in line and "'bogus'" in line and "DJANGO_SECRET_KEY" not in line


def test_a_retention_that_is_not_a_duration_is_one_line_naming_it_at_startup():
    """They were read only by the nightly beats and the sweeper, which then failed."""
    cases = (("QORVEN_IMAGE_RETENTION", "30days"), ("QORVEN_HEARTBEAT_RUN_RETENTION", "1month"),
             ("QORVEN_INBOUND_RETENTION", "-7d"))
    good = {"QORVEN_IMAGE_RETENTION": "12h", "QORVEN_HEARTBEAT_RUN_RETENTION": "0", "QORVEN_INBOUND_RETENTION": "2W"}
    *refused, taken = run_each(*checks(*({name: value} for name, value in cases), good))
    for (name, value), done in zip(cases, refused):
        line = configuration_error(done)
        assert name in line and repr(value) in line and "7d" in line, line
    assert taken.returncode == 0, taken.stderr[-800:]


def test_a_backup_schedule_that_is_not_a_cron_expression_is_one_line_naming_it():
    """Read only by the beat, it would have failed at its start, or never fired at all."""
    cases = (("every night", "has 2 field(s)"), ("30 25 * * *", "hour"), ("61 3 * * *", "minute"))
    schedules = ("30 3 * * *", "@daily", "0 */6 * * mon-fri", "")
    finished = run_each(*checks(*({"QORVEN_BACKUP_SCHEDULE": value} for value, _ in cases), {"QORVEN_BACKUP_KEEP": "-1"},
                                *({"QORVEN_BACKUP_SCHEDULE": value} for value in schedules)))
    for (value, says), done in zip(cases, finished):
        line = configuration_error(done)
        assert "QORVEN_BACKUP_SCHEDULE" in line and repr(value) in line and says in line, line
    line = configuration_error(finished[len(cases)])
    assert "QORVEN_BACKUP_KEEP" in line and "at least 0" in line
    for value, done in zip(schedules, finished[len(cases) + 1:]):
        assert done.returncode == 0, (value, done.stderr[-800:])


def test_a_word_a_switch_or_an_address_a_setting_cannot_take_is_one_line_naming_it():
    """Each was taken without a word: xml logs were text, maybe was false, an allowed
    address that is none was never matched, a network that is none allowed nothing."""
    cases = (("QORVEN_LOG_FORMAT", "xml"), ("DJANGO_DEBUG", "maybe"), ("QORVEN_HTTPS", "sure"),
             ("QORVEN_METRICS_ALLOW", "127.0.0.1,notanip"),
             ("QORVEN_ALLOW_PRIVATE_HOSTS", "ollama.internal,10.0.0.0/33"),
             ("QORVEN_TRUSTED_PROXIES", "127.0.0.1,proxy.internal"),
             ("QORVEN_CLIENT_IP_HEADER", "X-Forwarded-For: 1"))
    taken = {"QORVEN_LOG_FORMAT": "json", "DJANGO_DEBUG": "off", "QORVEN_HTTPS": "0",
             "QORVEN_METRICS_ALLOW": "10.1.2.3,::1", "QORVEN_ALLOW_PRIVATE_HOSTS": "ollama.internal,10.0.0.0/8,fd00::1",
             "QORVEN_TRUSTED_PROXIES": "10.0.0.0/8,fd00::2", "QORVEN_CLIENT_IP_HEADER": "X-Real-IP"}
    *refused, done = run_each(*checks(*({name: value} for name, value in cases), taken))
    for (name, value), refusal in zip(cases, refused):
        line = configuration_error(refusal)
        assert name in line and repr(value.split(",")[-1]) in line, line
    assert done.returncode == 0, done.stderr[-800:]


def test_chat_refuses_a_history_that_is_not_a_count():
    values = ("-5", "many")
    chats = run_each(*((("chat", "--json", "--tenant", "acme", "--qor", "aria", "--user", "alice", "--history", value),
                        {"DJANGO_SECRET_KEY": "cli-test"}) for value in values))
    for value, done in zip(values, chats):
        assert done.returncode == 2 and "--history" in done.stderr and "usage: qorven chat" in done.stderr, \
            done.stderr[-500:]
        assert "Traceback" not in done.stderr
    assert "-5 is not 0 or more" in chats[0].stderr  # not "not in 0-9007199254740991"


def test_chat_wait_and_beat_max_interval_refuse_a_time_that_is_not_one():
    """`chat --json --wait -1` gave up at once and exited 0; `beat --max-interval -1` or `nan`
    went on to Celery, whose sleep between checks was then no sleep at all (or an error)."""
    cases = ((("chat", "--json", "--tenant", "acme", "--qor", "aria", "--user", "alice", "--no-server"), "--wait", "-1"),
             (("chat", "--json", "--tenant", "acme", "--qor", "aria", "--user", "alice", "--no-server"), "--wait", "nan"),
             (("beat",), "--max-interval", "0"), (("beat",), "--max-interval", "-1"))
    refused = run_each(*(((*command, flag, value), {"DJANGO_SECRET_KEY": "cli-test", "REDIS_URL": ""})
                         for command, flag, value in cases))
    for (command, flag, value), done in zip(cases, refused):
        assert done.returncode == 2 and flag in done.stderr and f"usage: qorven {command[0]}" in done.stderr, \
            done.stderr[-500:]
        assert "Traceback" not in done.stderr


def test_a_public_url_without_a_scheme_or_under_a_path_of_qorvens_own_is_one_line_naming_it():
    """A URL without its scheme made every webhook address printed wrong. Under a path of
    its own (https://example.org/qorven) Qorven is served there (tests/qorven/test_url_prefix.py)."""
    bad = ("chat.example.org", "ftp://chat.example.org", "https://chat.example.org/?next=1",
           "https://example.org/chat", "https://example.org/a b")
    good = ("https://chat.example.org", "https://chat.example.org/", "http://127.0.0.1:8000",
            "https://example.org/qorven", "https://example.org/qorven/")
    finished = run_each(*checks(*({"QORVEN_PUBLIC_URL": url} for url in (*bad, *good))))
    for url, done in zip(bad, finished):
        line = configuration_error(done)
        assert "QORVEN_PUBLIC_URL" in line and repr(url) in line, line
    for url, done in zip(good, finished[len(bad):]):
        assert done.returncode == 0, (url, done.stderr[-800:])


def test_pair_help_and_the_readme_name_every_pairing_action():
    """The spec's list names `pair list|approve|deny`; `revoke` and `list --paired` are
    there too, and each place that says what `pair` does names all five."""
    alone, pair, revoke = run_each(((), {}), (("pair", "--help"), {}), (("pair", "revoke", "--help"), {}))
    overview = next(line for line in alone.stdout.splitlines() if line.strip().startswith("pair "))
    usage = pair.stdout
    readme = (ROOT / "README.md").read_text()
    commands = readme[readme.index("## Commands"):readme.index("## The admin")]
    for text in (overview, usage, commands):
        assert all(action in text for action in ("list", "--paired", "approve", "deny", "revoke")), text
    assert "[--dry-run]" in revoke.stdout


def test_runserver_points_to_serve_instead_of_serving_pages_without_their_live_chat():
    """`qorven runserver` (and `python manage.py runserver`) started Django's WSGI server:
    the pages loaded, but the chat page's socket got a 404 and never went live, and no
    heartbeat fired."""
    environment = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    for command in ([str(QORVEN)], [sys.executable, "manage.py"]):
        try:
            done = subprocess.run([*command, "runserver", "--noreload", "127.0.0.1:8765"], capture_output=True,
                                  text=True, cwd=ROOT, timeout=30, env={**environment, "DJANGO_SECRET_KEY": "x"})
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{command} runserver served instead of refusing") from None
        assert done.returncode == 1 and done.stdout == "", done.stderr[-800:]
        assert "WebSocket" in done.stderr and "serve --host 127.0.0.1 --port 8765" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
    assert "runserver" not in run().stdout  # not offered among the commands that work


def test_runworker_and_testserver_point_to_the_commands_that_do_what_they_sound_like():
    """`qorven runworker` is Channels' worker for channel-layer consumers, of which Qorven has
    none: an operator looking for the worker got one that answered nothing. `testserver`
    is Django's development server again, on a test database."""
    worker, served, listed = run_each((("runworker", "chat"), {"DJANGO_SECRET_KEY": "x"}),
                                      (("testserver", "--noinput"), {"DJANGO_SECRET_KEY": "x"}), ((), {}))
    assert worker.returncode == 1 and "qorven worker" in worker.stderr and "Traceback" not in worker.stderr, \
        worker.stderr[-800:]
    assert served.returncode == 1 and "qorven serve" in served.stderr and "Traceback" not in served.stderr, \
        served.stderr[-800:]
    theirs = listed.stdout[listed.stdout.index("Django's commands"):]
    assert "runworker" not in theirs and "testserver" not in theirs


def test_a_command_on_a_database_never_migrated_says_to_migrate_first(tmp_path):
    """`qorven bootstrap` (or token, bind, pair…) on a new database ended in a traceback,
    "no such table: qorven_tenant"."""
    url = f"sqlite:///{tmp_path / 'new.sqlite3'}"
    bootstrap, token = run_each(
        (("bootstrap", "--tenant", "acme", "--qor", "aria", "--owner", "alice"),
         {"DJANGO_SECRET_KEY": "x", "DATABASE_URL": url}),
        (("token", "create", "--tenant", "acme", "--user", "alice"), {"DJANGO_SECRET_KEY": "x", "DATABASE_URL": url}))
    for done in (bootstrap, token):
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr[-800:]
        (line,) = done.stderr.strip().splitlines()
        assert "not migrated" in line and "qorven migrate" in line and str(tmp_path / "new.sqlite3") in line, line


def test_a_command_given_no_action_lists_its_actions_one_line_each():
    """`qorven token`, `tenant`, `pair` and `bind` alone (or with their options but no
    action) said only "the following arguments are required: action" (or channel)."""
    expected = {"token": ("action", ["create"]), "tenant": ("action", ["suspend", "resume", "status"]),
                "pair": ("action", ["list", "approve", "deny", "revoke"]),
                "bind": ("channel", ["discord", "email", "slack", "sms", "telegram", "webchat", "whatsapp"])}
    environment = {"DJANGO_SECRET_KEY": "cli-test"}
    *alone, options_only = run_each(*(((name,), environment) for name in expected),
                                    (("pair", "--traceback"), environment))
    for (name, (noun, actions)), done in zip(expected.items(), alone):
        assert done.returncode == 2 and done.stdout == "" and "Traceback" not in done.stderr, done.stderr[-800:]
        lines = done.stderr.splitlines()
        assert lines[0] == f"usage: qorven {name} <{noun}> [options]", lines
        listed = [line.split()[0] for line in lines if line.startswith("  ")]
        assert listed == actions, lines
        assert all(len(line.split()) > 1 for line in lines if line.startswith("  ")), lines  # each says what it does
        assert f"`qorven {name} <{noun}> --help`" in done.stderr, lines
    assert "  approve  approve a code" in alone[2].stderr.splitlines()
    assert options_only.returncode == 2 and options_only.stderr == alone[2].stderr, options_only.stderr[-800:]


def test_every_command_with_actions_lists_them_when_given_none_through_the_shared_parser():
    """Each command that takes an action names them when called without one, so a new one
    with actions must use `qorven.runtime.arguments.actions` too."""
    from django.core.management import ManagementUtility, call_command, get_commands
    from django.core.management.base import CommandError

    from qorven.cli import _own_app_names
    from qorven.runtime.arguments import ActionParser

    own = _own_app_names()
    with_actions = []
    for name, app in get_commands().items():
        if app not in own:
            continue
        parser = ManagementUtility(["qorven", name]).fetch_command(name).create_parser("qorven", name)
        if any(action.__class__.__name__ == "_SubParsersAction" for action in parser._actions):
            assert isinstance(parser, ActionParser), name
            with_actions.append(name)
            with pytest.raises(CommandError) as refused:
                call_command(name)
            assert "one of" in str(refused.value), str(refused.value)
    assert sorted(with_actions) == ["bind", "pair", "tenant", "token"]


def test_a_database_server_that_cannot_be_reached_is_a_line_naming_it_not_a_traceback():
    """A wrong host or port in DATABASE_URL (or PostgreSQL down) ended `qorven pair list`,
    `token create` and the rest in an OperationalError traceback, "couldn't get a
    connection after 10.00 sec", naming neither the server nor the setting. And the line
    is all it says: a one-off command takes no pool (its one thread has nothing to share
    one with), whose tries had each logged a warning for 10 s before it (11 lines)."""
    from ..ports import free_port

    port = free_port()  # nothing listens there
    url = f"postgres://qorven:s3cret@127.0.0.1:{port}/qorven"
    pooled, unpooled = run_each((("pair", "list", "--tenant", "acme"), {"DJANGO_SECRET_KEY": "x", "DATABASE_URL": url}),
                                (("token", "create", "--tenant", "acme", "--user", "alice"),
                                 {"DJANGO_SECRET_KEY": "x", "DATABASE_URL": url, "QORVEN_DB_POOL": "0"}))
    for done in (pooled, unpooled):
        assert done.returncode == 1 and "Traceback" not in done.stderr and "s3cret" not in done.stderr, \
            done.stderr[-800:]
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"qorven: cannot connect to the database, PostgreSQL database qorven on 127.0.0.1:{port}"), line
        assert "Connection refused" in line and "DATABASE_URL" in line, line


def test_a_refusal_is_one_line_of_ours_without_djangos_prefix(tmp_path):
    """Every refusal of a Qorven command was printed as "CommandError: …", Django's class
    name in front of the sentence, whether run as `qorven …` or `python manage.py …`."""
    sentence = "--list takes no file: it lists the scheduled backups in QORVEN_BACKUP_DIR"
    database = {"DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}", "DJANGO_SECRET_KEY": "cli-test"}
    environment = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SECRET_KEY", "DATABASE_URL")}
    through_manage = subprocess.run([sys.executable, "manage.py", "backup", "--list", "copy.bak"], cwd=ROOT,
                                    capture_output=True, text=True, timeout=180, env={**environment, **database})
    for done in (run("backup", "--list", "copy.bak", **database), through_manage):
        assert done.returncode == 1, done.stderr[-800:]
        assert done.stderr.splitlines() == [sentence], done.stderr[-800:]


def test_doctor_that_finds_a_failure_says_its_summary_once_and_exits_1(tmp_path):
    """doctor wrote "4 of 6 checks passed." and then "CommandError: 2 check(s) failed" on
    stderr: the same summary twice, the second in Django's words."""
    done = run("doctor", DATABASE_URL=f"sqlite:///{tmp_path / 'new.sqlite3'}", DJANGO_SECRET_KEY="cli-test")
    assert done.returncode == 1, done.stderr[-800:]
    assert done.stderr == "", done.stderr[-800:]
    summaries = [line for line in done.stdout.splitlines() if "checks passed" in line or "failed" in line]
    assert len(summaries) == 1 and summaries[0].endswith("checks passed."), done.stdout
