# The TypeScript client (clients/node/, docs/clients.md#typescript): npm ci
# into clients/node/node_modules (the lock file pins every tool), prettier's
# check, a strict tsc build (emitting .js and .d.ts into dist/), then Node's
# test runner on the built suite, which starts redis-server and Valkey with
# the module on free ports (DLOCK_MODULE overrides the module's path), and
# Redis 8 (scripts/fetch-redis8.sh) for node-redis's conformance run and
# the stalled server through today's default libraries (moved there from
# Redis 7.0, test/conformance.test.ts and test/stall.test.ts).
NODE_DIR := clients/node
.PHONY: node-test node-build
CLIENT_SUITES += node-test
node-test: build node-build
	cd $(NODE_DIR) && DLOCK_VALKEY_SERVER="$${DLOCK_VALKEY_SERVER:-$$(../../scripts/fetch-valkey.sh)}" \
		DLOCK_REDIS8_SERVER="$${DLOCK_REDIS8_SERVER:-$$(../../scripts/fetch-redis8.sh)}" \
		node --test dist/test/*.test.js
node-build: $(NODE_DIR)/node_modules/.installed
	cd $(NODE_DIR) && npx --no-install prettier --check src test
	cd $(NODE_DIR) && rm -rf dist && npx --no-install tsc -p tsconfig.json
$(NODE_DIR)/node_modules/.installed: $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	cd $(NODE_DIR) && npm ci --no-audit --no-fund
	touch $@

# The Node client's benchmark (clients/node/bench/bench.ts): against redlock
# and redis-semaphore on one redis-server, same run; writes
# docs/benchmarks-node.md (QUICK=1: a short run, printed only).
.PHONY: node-bench
bench: node-bench
node-bench: build node-build
	cd $(NODE_DIR) && node dist/bench/bench.js$(if $(filter-out 0 false no,$(QUICK)), --quick,)
