# The Java client (clients/java/, docs/clients.md#java): Maven (local repository ~/.m2)
# builds every module, compiles the examples and runs the JUnit suites against
# redis-server and Valkey (servers started by dlock-testkit's Servers extension).
.PHONY: java-test
test: java-test
java-test: build
	cd clients/java && DLOCK_VALKEY_SERVER="$$(../../scripts/fetch-valkey.sh)" mvn -q -B verify
