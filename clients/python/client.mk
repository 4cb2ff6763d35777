# The Python client (clients/python/, docs/clients.md#python): a virtual environment
# under target/ with the package and its test extras, then pytest against
# redis-server and Valkey (servers started by clients/python/tests/conftest.py).
PYVENV := target/python-venv
.PHONY: python-test
CLIENT_SUITES += python-test
python-test: build $(PYVENV)/.installed
	cd clients/python && DLOCK_VALKEY_SERVER="$$(../../scripts/fetch-valkey.sh)" ../../$(PYVENV)/bin/python -m pytest -q -rs -p no:cacheprovider
$(PYVENV)/.installed: clients/python/pyproject.toml
	test -x $(PYVENV)/bin/python || python3 -m venv $(PYVENV)
	$(PYVENV)/bin/python -m pip install --quiet --upgrade pip
	$(PYVENV)/bin/python -m pip install --quiet -e 'clients/python[test]'
	touch $@
