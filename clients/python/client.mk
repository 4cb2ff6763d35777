# The Python client (clients/python/, docs/clients.md#python): a virtual environment
# under target/ with the package and its test extras, then pytest against
# redis-server and Valkey (servers started by clients/python/tests/conftest.py).
# The venv takes today's newest redis-py (pyproject says redis>=5.0.1) and
# every test runs with it on Redis 7.0 and Valkey; the oldest supported,
# redis-py 5.0.1, goes to a directory put first on PYTHONPATH for a second,
# short run: the conformance scenarios and the snippets (the Cluster ones on
# a Redis 8 cluster) on Redis 8, so each server has the scenarios with no
# third run (the compatibility table of clients/python/README.md).
# python-lint comes first: ruff (pinned in pyproject's test extras, its
# settings there too) checks and format-checks the package, its tests and
# examples; --no-cache writes no .ruff_cache into the work tree.
# Both runs spread their tests over PYTEST_WORKERS processes (pytest-xdist,
# in the test extras), each with its own servers: the tests mostly wait on
# leases, pauses and timers (about a tenth of a core each), so 3 workers
# cut the runs from about 124 s and 28 s to 50 s and 19 s here for about
# 8 s more CPU. PYTEST_WORKERS=0 runs them in one process.
PYTEST_WORKERS ?= 3
PYVENV := target/python-venv
PYREDIS_OLDEST := 5.0.1
PYREDIS_OLD := target/python-redis$(PYREDIS_OLDEST)
.PHONY: python-test python-lint
RUST_LANE_SUITES += python-test
python-lint: $(PYVENV)/.installed
	cd clients/python && ../../$(PYVENV)/bin/ruff check --no-cache . && ../../$(PYVENV)/bin/ruff format --no-cache --check . \
		|| { echo 'ruff: run `ruff check --fix` and `ruff format` in clients/python (target/python-venv/bin/ruff)'; exit 1; }
python-test: python-lint build $(PYVENV)/.installed $(PYREDIS_OLD)/.installed
	cd clients/python && DLOCK_VALKEY_SERVER="$$(../../scripts/fetch-valkey.sh)" ../../$(PYVENV)/bin/python -m pytest -q -rs -p no:cacheprovider -n $(PYTEST_WORKERS)
	cd clients/python && PYTHONPATH=../../$(PYREDIS_OLD) ../../$(PYVENV)/bin/python -c 'import redis, sys; sys.exit(redis.__version__ != "$(PYREDIS_OLDEST)")'
	cd clients/python && PYTHONPATH=../../$(PYREDIS_OLD) DLOCK_PY_SERVERS=redis8 DLOCK_REDIS8_SERVER="$$(../../scripts/fetch-redis8.sh)" \
		../../$(PYVENV)/bin/python -m pytest -q -rs -p no:cacheprovider -n $(PYTEST_WORKERS) tests/test_conformance.py tests/test_snippets.py
$(PYREDIS_OLD)/.installed: $(PYVENV)/.installed
	rm -rf $(PYREDIS_OLD)
	$(PYVENV)/bin/python -m pip install --quiet --target $(PYREDIS_OLD) 'redis==$(PYREDIS_OLDEST)'
	touch $@
$(PYVENV)/.installed: clients/python/pyproject.toml
	test -x $(PYVENV)/bin/python || python3 -m venv $(PYVENV)
	$(PYVENV)/bin/python -m pip install --quiet --upgrade pip
	$(PYVENV)/bin/python -m pip install --quiet -e 'clients/python[test]'
	touch $@
