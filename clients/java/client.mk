# The Java client (clients/java/, docs/clients.md#java): Maven (local repository ~/.m2)
# builds every module, compiles the examples and runs the JUnit suites against
# redis-server and Valkey (servers started by dlock-testkit's Servers extension).
.PHONY: java-test
CLIENT_SUITES += java-test
# Then the transports built against today's newest Lettuce and Jedis (profile `newest`,
# in target/newest) run the conformance suite on Redis 8 (the main run has Redis 7.0 and
# Valkey): the compatibility table of clients/java/README.md. The areas where what the
# library decides shows (replies, errors, timeouts, reconnects, blocking waits and their
# cancellation: the new scenarios of issue 36 run on Redis 8 this way); the others
# are the client's own logic.
JAVA_NEWEST_AREAS := bad_input.,basic.,cancel.,lost.,stall.,wait.
# -T 2: the modules that do not depend on each other build and test at once (the
# Lettuce and Jedis suites, then ShedLock's and Spring's): their time is mostly
# spent waiting on servers (about 2 minutes for Lettuce's, 1.5 for Jedis's).
java-test: build
	cd clients/java && DLOCK_VALKEY_SERVER="$$(../../scripts/fetch-valkey.sh)" mvn -q -B -T 2 verify
	cd clients/java && DLOCK_REDIS_SERVER="$$(../../scripts/fetch-redis8.sh)" mvn -q -B -T 2 -Pnewest -pl dlock-lettuce,dlock-jedis -am verify -Dtest='*ConformanceTest' -Dsurefire.failIfNoSpecifiedTests=false -Ddlock.conformance.servers=redis -Ddlock.conformance=$(JAVA_NEWEST_AREAS)

# The benchmark against Redisson (clients/java/dlock-bench, Maven profile `bench`):
# docs/benchmarks-java.md, or a temporary file with QUICK=1. Then dlock beside Curator's
# recipes on a standalone ZooKeeper 3.8 the bench starts (ConsensusBench, issue 41): the
# ZooKeeper section of docs/benchmarks-consensus.md (QUICK=1: a temporary file).
.PHONY: java-bench
bench: java-bench
java-bench: build
	cd clients/java && mvn -q -B -Pbench -DskipTests -pl dlock-bench -am package dependency:build-classpath -Dmdep.outputFile=target/bench-classpath.txt
	cd clients/java && java -cp dlock-bench/target/classes:$$(cat dlock-bench/target/bench-classpath.txt) dev.dlock.bench.Bench $(if $(filter-out 0 false no,$(QUICK)),--quick $$(mktemp),../../docs/benchmarks-java.md)
	@[ -e /usr/share/java/zookeeper.jar ] || ./scripts/ensure-deps.sh zookeeper
	cd clients/java && java -cp dlock-bench/target/classes:$$(cat dlock-bench/target/bench-classpath.txt) dev.dlock.bench.ConsensusBench $(if $(filter-out 0 false no,$(QUICK)),--quick $$(mktemp),../../docs/benchmarks-consensus.md)
