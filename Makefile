# Qorven. `make run` serves the embedded default; `make test` runs the whole suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
PORT ?= 8000
# `make test` spreads the suite over this many processes (pytest-xdist; each has its own
# test database and Redis database): most tests wait on servers, so 3 beat 2 on 2 cores.
TEST_WORKERS ?= 3
DEMO_TENANT ?= demo
DEMO_QOR ?= aria
DEMO_OWNER ?= admin

.PHONY: run test stress bench install lint clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# `make run` installs what the product needs; `make test` adds the test tooling.
# pip runs --quiet (its full log is hundreds of lines): say what the silent minute is.
$(STAMP): pyproject.toml | $(PY)
	@echo "Installing Qorven and its dependencies into $(VENV) (a minute or two the first time)…"
	$(PY) -m pip install --quiet -e .
	touch $(STAMP)

$(TEST_STAMP): pyproject.toml $(STAMP)
	@echo "Installing the test tools into $(VENV) (pytest, Playwright, ruff, mypy, …)…"
	$(PY) -m pip install --quiet -e '.[test]'
	touch $(TEST_STAMP)

install: $(STAMP)

.demo-password:
	@$(PY) -c 'import secrets; print(secrets.token_urlsafe(12))' > .demo-password
	@chmod 600 .demo-password

run: $(STAMP) .demo-password
	$(PY) manage.py migrate --verbosity 0
	$(PY) manage.py bootstrap --tenant $(DEMO_TENANT) --qor $(DEMO_QOR) --owner $(DEMO_OWNER) --password="$$(cat .demo-password)" --password-if-new --host-superuser
	@echo ""
	@echo "  Chat at http://127.0.0.1:$(PORT)/ (the admin is at /admin/): sign in as '$(DEMO_OWNER)' with password: $$(cat .demo-password)"
	@echo "  (kept in .demo-password; a password you set since, e.g. with qorven setup, is kept instead)"
	@echo "  Terminal: .venv/bin/qorven chat --server http://127.0.0.1:$(PORT) --tenant $(DEMO_TENANT) --qor $(DEMO_QOR) --user $(DEMO_OWNER)"
	@echo ""
	$(PY) manage.py serve --port $(PORT) --no-migrate

# The suite starts hundreds of Python processes (servers, workers, `qorven` itself): each
# would compile the project's sources again where bytecode is not written
# (PYTHONDONTWRITEBYTECODE), about a tenth of its start. pip compiled the libraries already.
# pytest keeps the test modules it rewrote (for its assertions) as bytecode too, unless
# that variable is set: then each test process rewrote all of them again, 6 of its 10 s of
# CPU collecting the suite; with it unset, a run reuses what the one before it wrote.
PACKAGES := qorven tenancy sessions_app memory_app heartbeats_app legacy_app channels_app

test: $(TEST_STAMP)
	$(PY) -m compileall -q $(PACKAGES) tests
	env -u PYTHONDONTWRITEBYTECODE $(PY) -m pytest -n $(TEST_WORKERS) --dist worksteal --durations=25 $(PYTEST_ARGS)

# tests/reliability at full size (1,000 deliveries); the suite runs them small.
stress: $(TEST_STAMP)
	$(PY) -m pytest tests/reliability --stress $(PYTEST_ARGS)

bench: $(TEST_STAMP)
	$(PY) bench/run.py

lint: $(TEST_STAMP)
	$(VENV)/bin/ruff check .
	DJANGO_SECRET_KEY=$${DJANGO_SECRET_KEY:-lint-only} $(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .test-db.sqlite3* .pytest_cache
	find $(PACKAGES) tests -name __pycache__ -type d -prune -exec rm -rf {} +
