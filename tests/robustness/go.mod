module github.com/dlock/dlock/tests/robustness

go 1.24

require (
	github.com/anishathalye/porcupine v1.3.1
	github.com/dlock/dlock/clients/go v0.0.0
	github.com/redis/go-redis/v9 v9.21.0
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/atomic v1.11.0 // indirect
)

replace github.com/dlock/dlock/clients/go => ../../clients/go
