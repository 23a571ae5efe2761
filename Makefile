# plumb: `make serve` and `make test` work on a fresh machine with Python 3.11 and make.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-$(shell cat requirements.txt | sha1sum | cut -c1-12)

HOST ?= 127.0.0.1
PORT ?= 8000
WEB_CONCURRENCY ?= 2
# Each process reads its connections on an event loop and runs Django in
# THREADS threads (plumb_site/asgi.py); a waiting check_messages holds one, and
# at most half of them wait (PLUMB_WAITING_POLLS). On SQLite each process still
# runs one request at a time (PLUMB_ACTIVE_REQUESTS, common/gate.py).
THREADS ?= 8

.PHONY: install serve test test-postgres test-hosts bench lint superuser clean chromium

install: $(STAMP) $(BIN)/plumb

# Re-installs only when requirements.txt changed (the stamp carries its hash).
$(STAMP): requirements.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip
	$(BIN)/python -m pip install --quiet --disable-pip-version-check -r requirements.txt
	@rm -f $(VENV)/.installed-*
	@touch $@

# `.venv/bin/plumb …` is `manage.py plumb …` with this environment's Python, from any
# directory: the command every hint of plumb names. It finds the checkout from the path
# it was called by, symlinks left as they are, so each checkout's .venv/bin/plumb acts
# on that checkout even where several share one environment through a symlinked .venv.
define PLUMB_WRAPPER
#!/bin/sh
# Written by `make install`: plumb's operator command, `manage.py plumb`.
bin=$$(CDPATH= cd -- "$$(dirname -- "$$0")" && pwd) || exit 1
exec "$$bin/python" "$${bin%/*/*}/manage.py" plumb "$$@"
endef
export PLUMB_WRAPPER

$(BIN)/plumb: Makefile | $(STAMP)
	@printf '%s\n' "$$PLUMB_WRAPPER" > $@.tmp
	@chmod +x $@.tmp
	@mv -f $@.tmp $@

# plumb_site/gunicorn_config.py: the application and its worker, metrics summed over
# the processes (var/metrics/, emptied at start), gunicorn's log lines in LOG_FORMAT.
serve: install
	$(BIN)/python manage.py migrate --noinput --verbosity 0
	$(BIN)/python manage.py collectstatic --noinput --verbosity 0
	HOST=$(HOST) PORT=$(PORT) $(BIN)/plumb bootstrap
	PLUMB_THREADS=$(THREADS) $(BIN)/gunicorn --config python:plumb_site.gunicorn_config \
		--bind $(HOST):$(PORT) --workers $(WEB_CONCURRENCY) \
		--access-logfile - --graceful-timeout 5 --no-control-socket

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# tests/browser drives Debian's chromium; never a downloaded browser.
chromium:
	@test -x /usr/bin/chromium || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; }

test: lint chromium
	$(BIN)/python manage.py makemigrations --check --dry-run
	$(BIN)/python manage.py spectacular --validate --fail-on-warn --file /dev/null
	$(BIN)/pytest $(PYTEST_ARGS)

# The same suite against a throwaway PostgreSQL 15 cluster on loopback, started and
# deleted by scripts/with-postgres (as root it installs Debian's postgresql if missing).
test-postgres: install chromium
	scripts/with-postgres $(BIN)/python manage.py makemigrations --check --dry-run
	scripts/with-postgres $(BIN)/pytest $(PYTEST_ARGS)

# Two plumb servers (own var/ and port each) on one throwaway PostgreSQL and Redis:
# exactly-once delivery, wake-ups and seqs across hosts, one shared rate limit.
test-hosts: install
	scripts/with-postgres scripts/with-redis $(BIN)/pytest tests/scale/test_hosts.py $(PYTEST_ARGS)

# Throughput and latency against a floor, and growth with stored data (not part of
# make test). BENCH_DB=postgres runs it on a throwaway PostgreSQL cluster.
bench: install
	$(BIN)/python bench/run.py

superuser: install
	$(BIN)/python manage.py createsuperuser

clean:
	rm -rf $(VENV) var
